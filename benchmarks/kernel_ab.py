"""Same-process A/B of the fused BP kernels against another version of their module.

The machines here are noisy: a kernel change is measured by running both versions in one process,
alternating, on the arXiv-sized synthetic graph (169,343 nodes, 2.33 M directed edges). ``--old``
is a copy of ``gbpn/bp/backends/_numba/fused_kernels.py`` from another commit, e.g.

    git show HEAD~1:src/gbpn/bp/backends/_numba/fused_kernels.py > /tmp/old_kernels.py
    python benchmarks/kernel_ab.py --old /tmp/old_kernels.py --classes 40 --rounds 6

Per round and version: one K = 5 training step (forward, then backward of a weighted sum) and one
K = 5 inference call. Prints the medians and the new/old ratio of each round.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a copy of gbpn/bp/backends/_numba/fused_kernels.py from another version")
    ap.add_argument("--classes", type=int, nargs="+", default=[40])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243, help="undirected edges to sample")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import gbpn.bp.backends._numba.fused_kernels as new
    import gbpn.bp.backends.cpu_fused as fused
    from gbpn.data.generators import planted_partition_graph
    from gbpn.bp.layer import BeliefPropagation

    spec = importlib.util.spec_from_file_location("gbpn_kernels_old", args.old)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old  # numba's on-disk cache finds the module by name
    spec.loader.exec_module(old)
    versions = {"old": old, "new": new}
    print(f"graph: {args.nodes} nodes, {args.edges} sampled undirected edges; {args.threads} thread(s); "
          f"{args.rounds} rounds, alternating")
    for c in args.classes:
        data = planted_partition_graph(args.nodes, args.edges, 8, c, seed=0)
        ei, rev, n = data.edge_index, data.rev_index, data.num_nodes
        g = torch.Generator().manual_seed(0)
        x = torch.log_softmax(torch.randn(n, c, generator=g), -1).requires_grad_()
        log_H = torch.randn(c, c, generator=g)
        layer = BeliefPropagation(c, coupling_init=(0.5 * (log_H + log_H.T)).exp(), kernel="fused")
        weight = torch.randn(n, c, generator=g)

        def train():
            t0 = time.perf_counter()
            out = layer(x, ei, rev_index=rev, num_steps=5)
            t1 = time.perf_counter()
            (out * weight).sum().backward()
            return t1 - t0, time.perf_counter() - t1

        def infer():
            with torch.no_grad():
                t0 = time.perf_counter()
                layer(x, ei, rev_index=rev, num_steps=5)
                return time.perf_counter() - t0

        def use(name):
            fused._kernels = lambda: versions[name]

        times = {name: {"fwd": [], "bwd": [], "inf": []} for name in versions}
        for name in versions:  # compile or load, warm the buffers
            use(name)
            train()
            infer()
        for r in range(args.rounds):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                use(name)
                f, b = train()
                times[name]["fwd"].append(f)
                times[name]["bwd"].append(b)
                times[name]["inf"].append(infer())
        med = statistics.median
        for name, t in times.items():
            total = [f + b for f, b in zip(t["fwd"], t["bwd"])]
            print(f"c={c} {name}: train forward {med(t['fwd']):.3f} s, backward {med(t['bwd']):.3f} s, "
                  f"step {med(total):.3f} s | inference K=5 {med(t['inf']):.3f} s")
        o, nw = times["old"], times["new"]
        for part in ("fwd", "bwd", "inf"):
            print(f"c={c} new/old {part} per round: " + " ".join(f"{b / a:.2f}" for a, b in zip(o[part], nw[part]))
                  + f" (median {med([b / a for a, b in zip(o[part], nw[part])]):.2f})")


if __name__ == "__main__":
    main()
