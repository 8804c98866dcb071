"""Seconds per training step and peak memory: pairwise GBPN against triangle GBPN (issue 50).

One training step is what ``gbpn train`` takes per epoch for GBPN (transductive): the MLP potential,
half of the training nodes clamped, BP (K = 5) and the loss on the other half, backward and an AdamW
step. The triangles are enumerated once per graph (timed apart, as ``fit`` does).

    python benchmarks/motif_step.py --dataset cora --data-dir ../shared/datasets
    python benchmarks/motif_step.py --synthetic 169343 1166243 40   # an arXiv-sized DC-SBM graph

Each cell runs in its own process; its peak memory is the growth of the process's peak RSS over what
the set-up holds (VmHWM reset after the set-up and a call on a 3-node graph that pays the first-call
costs), over all the steps; the step time is the median of ``--steps`` steps.
The cells alternate (pairwise, triangle, pairwise, triangle, ...; ``--repeats`` pairs) so that the
load of a shared machine falls on both alike.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from bp_step import peak_kb, reset_peak  # a sibling script: python benchmarks/<this>.py puts benchmarks/ on the path


def child(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from gbpn.data.features import prepare_features
    from gbpn.data.splits import random_split
    from gbpn.models.gbpn import GBPN
    from gbpn.train.objective import marginal_nll

    if args.synthetic:
        from gbpn.data.generators import planted_partition_graph

        nodes, edges, c = args.synthetic
        data = planted_partition_graph(nodes, edges, 8, c, seed=0)
    else:
        from gbpn.data.datasets import load_dataset

        data = load_dataset(args.dataset, args.data_dir)
    torch.manual_seed(0)
    c = int(data.num_classes)
    model = GBPN(data.num_features, c, dropout=0.5, motifs=args.child, max_triangles_per_node=args.cap)
    x = model.precompute(prepare_features(data.x), data.edge_index)
    start = time.perf_counter()
    tri = model.triangles_of(data.edge_index, data.num_nodes)
    triangle_seconds = time.perf_counter() - start
    train = random_split(data.y, 0.3, 0.2, 0)[0].nonzero().view(-1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    ei, rev, y = data.edge_index, data.rev_index, data.y

    def step() -> float:
        t = time.perf_counter()
        perm = train[torch.randperm(train.numel(), generator=gen)]
        known = torch.zeros(data.num_nodes, dtype=torch.bool)
        known[perm[: perm.numel() // 2]] = True
        out = model(x, ei, rev_index=rev, known_labels=y, known_mask=known, triangles=tri)
        loss = marginal_nll(out[perm[perm.numel() // 2:]], y[perm[perm.numel() // 2:]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    # first-call costs (the CPU kernels' compilation, lazy imports) on a 3-node triangle, not on the graph
    tiny = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    model(torch.zeros(3, data.num_features), tiny, known_labels=torch.zeros(3, dtype=torch.long),
          known_mask=torch.tensor([True, False, False])).sum().backward()
    opt.zero_grad(set_to_none=True)
    base = reset_peak(False)  # the process's peak RSS: measure the steps, not the set-up
    times = [step() for _ in range(args.steps)]
    return {"seconds": statistics.median(times), "peak_mb": (peak_kb(False) - base) / 1024,
            "triangles": None if tri is None else int(tri.size(1)), "triangle_seconds": triangle_seconds,
            "nodes": data.num_nodes, "edges": int(ei.size(1)), "classes": c,
            "form": None if tri is None else model.bp.triangle.form}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--synthetic", type=int, nargs=3, metavar=("NODES", "EDGES", "CLASSES"), default=None,
                    help="a DC-SBM graph (gbpn.data.generators.planted_partition_graph) instead of --dataset")
    ap.add_argument("--cap", type=int, default=None, help="--max-triangles-per-node (default: every triangle)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", choices=("none", "triangle"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    cells = {"none": [], "triangle": []}
    for _ in range(args.repeats):
        for motifs in ("none", "triangle"):
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", motifs], capture_output=True,
                                 text=True, check=True)
            cells[motifs].append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = cells[motifs][-1]
            print(f"{motifs:>8}: {r['seconds']:.3f} s/step, peak +{r['peak_mb']:.0f} MB"
                  + (f", {r['triangles']} triangles ({r['form']} form) in {r['triangle_seconds']:.2f} s"
                     if r["triangles"] is not None else ""), flush=True)
    g = cells["none"][0]
    what = f"{args.dataset}" if not args.synthetic else "DC-SBM"
    print(f"{what}: {g['nodes']} nodes, {g['edges']} directed edges, {g['classes']} classes; {args.threads} thread(s), "
          f"median of {args.steps} steps per cell, {args.repeats} cells each, interleaved")
    for motifs, rows in cells.items():
        s = [r["seconds"] for r in rows]
        m = [r["peak_mb"] for r in rows]
        print(f"  {motifs:>8}: s/step {min(s):.3f}-{max(s):.3f}, peak memory +{min(m):.0f}-{max(m):.0f} MB")
    ratio = [t["seconds"] / p["seconds"] for p, t in zip(cells["none"], cells["triangle"])]
    print(f"  triangle / pairwise s/step, pair by pair: {', '.join(f'{r:.2f}' for r in ratio)}")


if __name__ == "__main__":
    main()
