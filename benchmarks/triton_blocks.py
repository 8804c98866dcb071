"""The Triton BP inference step (gbpn.bp.backends.cuda_triton): each variant and block size against GCNConv and
the eager step, all in the same process on the same graph.

    python benchmarks/triton_blocks.py --classes 2 7 40 47

On the arXiv-sized planted-partition graph of benchmarks/bp_step.py. A step's time is
(t(K = 3) - t(K = 1)) / 2, so set-up cancels, each t the median of triton.testing.do_bench (CUDA
events); GCNConv(c, c) is one cached forward; "eager" is BeliefPropagation(kernel="eager").
Prints milliseconds and the ratios to GCNConv; the defaults are marked with '*'.
"""
from __future__ import annotations

import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243)
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 7, 40, 47])
    args = ap.parse_args()
    import triton
    from torch_geometric.nn import GCNConv

    import gbpn.bp.backends.cuda_triton as ft
    import gbpn.bp.backends.triton_kernels as tk
    from gbpn.data.generators import planted_partition_graph
    from gbpn.bp.layer import BeliefPropagation

    data = planted_partition_graph(args.nodes, args.edges, 8, max(args.classes), seed=0)
    ei, rev = data.edge_index.cuda(), data.rev_index.cuda()
    n = data.num_nodes
    layout = tk.device_csr(ei, rev, n)
    print(f"{torch.cuda.get_device_name()}; {n} nodes, {ei.size(1)} directed edges; step ms, median (do_bench)")
    # (edges per program, nodes per program), product with H, tl.dot precision
    sweep = [((32, 64), None, "ieee"), ((64, 64), None, "ieee"), ((128, 64), None, "ieee"),
             ((64, 64), "loop", "ieee"), ((64, 64), "broadcast", "ieee"), ((32, 64), "broadcast", "ieee"),
             ((64, 64), "dot", "tf32x3"), ((32, 64), "dot", "tf32x3")]

    def step(fn) -> float:
        one = triton.testing.do_bench(lambda: fn(1), return_mode="median")
        three = triton.testing.do_bench(lambda: fn(3), return_mode="median")
        return (three - one) / 2

    for c in args.classes:
        g = torch.Generator().manual_seed(0)
        phi = torch.log_softmax(torch.randn(n, c, generator=g), -1).cuda()
        log_H = torch.randn(c, c, generator=g)
        log_H = (0.5 * (log_H + log_H.T)).cuda()
        conv = GCNConv(c, c, cached=True).cuda()
        x = torch.randn(n, c, generator=g).cuda()
        layer = BeliefPropagation(c, learn_coupling=False, coupling_init=log_H.exp().cpu(), kernel="eager").cuda()
        with torch.no_grad():
            gcn = triton.testing.do_bench(lambda: conv(x, ei), return_mode="median")
            eager = step(lambda k: layer(phi, ei, rev_index=rev, num_steps=k))
        print(f"c={c:>3} GCNConv {gcn:.3f} ms  eager step {eager:.3f} ms ({eager / gcn:.2f}x GCN)", flush=True)
        for blocks, product, precision in sweep:
            if (product == "dot" and c < 16) or (product == "broadcast" and c > 16):  # see fused_triton._product
                continue
            name = f"{product or ft._product(c, torch.float32)}/{precision}"
            mark = "*" if blocks == ft._BLOCKS and product is None and precision == "ieee" else " "
            try:
                t = step(lambda k: tk.triton_bp(phi, log_H, layout, k, 0.0, None, None, None, None, False, False,
                                                blocks=blocks, product=product, precision=precision))
            except Exception as exc:  # report and go on: one configuration may not compile
                print(f"      {name:>16} blocks {blocks}: failed ({type(exc).__name__}: {str(exc)[:200]})")
                continue
            print(f"      {name:>16} blocks {blocks}{mark} step {t:.3f} ms  step/GCN {t / gcn:.2f}  "
                  f"eager/step {eager / t:.2f}", flush=True)


if __name__ == "__main__":
    main()
