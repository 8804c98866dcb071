"""Partition statistics measured here, extrapolated to ogbn-papers100M at 16 and 64 ranks.

Measures, for METIS and for degree-balanced ranges at each number of parts: the cut fraction
(undirected edges whose ends lie in different parts), the largest halo per part (as a fraction
of that part's nodes) and the largest number of cut edges of one part (as a fraction of all
edges). Graphs: Cora and CiteSeer (real citation graphs, like papers100M, but small: at 64 parts
a part has about 40 nodes, so their cut is pessimistic there) and the arXiv-sized DC-SBM
(random node ids, no locality: the worst case of a partitioner).

Then scales these fractions to papers100M's size (``--nodes``, ``--pairs``, ``--classes``,
``--features``) with the memory model of partitioned BP (:mod:`gbpn.bp.backends.pairs`): every directed
message stored once over all ranks (``2 P c`` values), int32 local edges (2 per local pair) and
cut endpoints (1 per cut edge), four ``[n_r, c]`` float32 node tables (self-potentials, beliefs,
their linear form, the accumulator) and the part's features in float32; each step a rank sends
one message per cut edge it holds.

    python benchmarks/partition_extrapolation.py --data-dir ../shared/datasets
"""
from __future__ import annotations

import argparse
import json

import torch

from gbpn.distributed.partition import build_part, partition


def stats(pairs: torch.Tensor, num_nodes: int, parts: int, method: str) -> dict:
    part = partition(pairs, num_nodes, parts, method)
    per = [build_part(pairs, part, r, parts) for r in range(parts)]
    num_pairs = pairs.size(1)
    cut = sum(p.cut_node.numel() for p in per) // 2
    return {"parts": parts, "method": method, "cut_fraction": cut / num_pairs,
            "max_halo_per_node": max(p.halo / max(p.nodes.numel(), 1) for p in per),
            "max_cut_edges_fraction": max(p.cut_node.numel() for p in per) / num_pairs,
            "max_local_pairs_fraction": max(p.pairs.size(1) for p in per) / num_pairs,
            "max_nodes_fraction": max(p.nodes.numel() for p in per) / num_nodes}


def extrapolate(s: dict, nodes: int, pairs: int, c: int, features: int, msg_bytes: int) -> dict:
    """Memory per rank (GB, the largest part) and bytes sent per BP step per rank for a graph of
    this size partitioned with the measured fractions."""
    local_pairs = s["max_local_pairs_fraction"] * pairs
    cut_edges = s["max_cut_edges_fraction"] * pairs
    n_r = s["max_nodes_fraction"] * nodes
    messages = (2 * local_pairs + cut_edges) * c * msg_bytes
    index = local_pairs * 2 * 4 + cut_edges * 4
    tables = 4 * n_r * c * 4 + n_r * features * 4
    return {"memory_gb": (messages + index + tables) / 1e9, "messages_gb": messages / 1e9,
            "sent_per_step_gb": cut_edges * c * msg_bytes / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--parts", type=int, nargs="+", default=[2, 16, 64])
    ap.add_argument("--real", nargs="+", default=["cora", "citeseer"], help="real citation graphs to partition")
    ap.add_argument("--nodes", type=int, default=111_059_956, help="papers100M nodes")
    ap.add_argument("--pairs", type=int, default=1_615_685_872, help="undirected edges (papers100M's edge count)")
    ap.add_argument("--classes", type=int, default=172)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from gbpn.data import load_dataset
    from gbpn.data.generators import ARXIV_SIZE, planted_partition_graph

    graphs = {}
    for name in args.real:
        real = load_dataset(name, args.data_dir)
        ei = real.edge_index
        graphs[real.name] = (ei[:, ei[0] < ei[1]], real.num_nodes)
    n, e, f, c = ARXIV_SIZE
    sbm = planted_partition_graph(n, e, 8, c, homophily=0.6, seed=0, pairs_only=True)
    graphs["DC-SBM (arXiv-sized)"] = (sbm.pairs, n)
    rows = []
    for name, (pairs, num_nodes) in graphs.items():
        for parts in args.parts:
            for method in ("metis", "ranges"):
                s = stats(pairs, num_nodes, parts, method)
                s["graph"] = name
                for dtype, size in (("bf16", 2), ("fp32", 4)):
                    s[f"papers100M_{dtype}"] = extrapolate(s, args.nodes, args.pairs, args.classes, args.features,
                                                           size)
                rows.append(s)
    print("| graph | parts | partition | cut | largest halo / part's nodes | papers100M: memory per rank (bf16 / fp32 "
          "messages) | sent per step per rank (bf16) |")
    print("|---|---|---|---|---|---|---|")
    for s in rows:
        b, f32 = s["papers100M_bf16"], s["papers100M_fp32"]
        print(f"| {s['graph']} | {s['parts']} | {s['method']} | {100 * s['cut_fraction']:.1f}% | "
              f"{s['max_halo_per_node']:.2f} | {b['memory_gb']:.0f} / {f32['memory_gb']:.0f} GB | "
              f"{b['sent_per_step_gb']:.1f} GB |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
