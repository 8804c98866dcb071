"""Cost of the BP layer's input checks on the arXiv-sized graph: the first call on a graph (edge
ids, self-loops, the reverse index) against a later call with the same tensors, which skips the
edge checks (``gbpn.bp.validation``, cached per graph). Medians of ``--reps`` calls, one thread.

    python benchmarks/input_checks.py
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243, help="undirected edges to sample")
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import gbpn.bp.validation as validation
    from gbpn.data.generators import planted_partition_graph

    data = planted_partition_graph(args.nodes, args.edges, 8, args.classes, seed=0)
    log_self = torch.log_softmax(torch.randn(data.num_nodes, args.classes), -1)

    def call() -> float:
        t = time.perf_counter()
        validation.check_bp_inputs(log_self, data.edge_index, args.classes, data.rev_index)
        return time.perf_counter() - t

    first, later = [], []
    for _ in range(args.reps):
        validation._checked_graphs = validation.GraphCache(6)  # forget the graph: the first call again
        first.append(call())
        later.append(call())
    f, s = statistics.median(first), statistics.median(later)
    print(f"{data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, c = {args.classes}; median of {args.reps}")
    print(f"first call {1e3 * f:.1f} ms, later calls {1e3 * s:.1f} ms, first/later {f / s:.0f}x")


if __name__ == "__main__":
    main()
