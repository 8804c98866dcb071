"""Triangles of the benchmark graphs (issue 50): how many, how fast they are found, and how labels sit on them.

    python benchmarks/triangle_stats.py --data-dir ../shared/datasets

Per graph: nodes, undirected edges, triangles (all, and under ``--cap`` per node), the seconds
``gbpn.graph.triangles.enumerate_triangles`` took for each (best of ``--repeats``), the global
clustering coefficient (transitivity: 3 x triangles / paths of length 2), edge homophily (share of
edges whose two labels agree) and the share of triangles whose three labels agree, beside what
independent edges with that homophily would give for a triangle's two edges at one corner
(homophily squared: a baseline, not a model).
"""
from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+",
                    default=["synth-triangle", "cora", "citeseer", "chameleon", "squirrel", "chameleon-filtered",
                             "squirrel-filtered", "election", "sexual", "ising+", "ising-", "mrf+", "mrf-"])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cap", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from gbpn.data.datasets import load_dataset
    from gbpn.graph.triangles import enumerate_triangles, undirected_pairs

    print("| graph | nodes | edges | triangles | seconds | triangles, cap {0} | seconds | transitivity | edge homophily "
          "| triangles all one label | homophily² |".format(args.cap))
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        data = load_dataset(name, args.data_dir)
        n, ei, y = data.num_nodes, data.edge_index, data.y

        def timed(**kw):
            best, tri = float("inf"), None
            for _ in range(args.repeats):
                t = time.perf_counter()
                tri = enumerate_triangles(ei, n, **kw)
                best = min(best, time.perf_counter() - t)
            return tri, best

        tri, t_all = timed()
        capped, t_cap = timed(max_per_node=args.cap)
        pairs = undirected_pairs(ei, n)
        deg = torch.bincount(pairs.reshape(-1), minlength=n).double()
        wedges = float((deg * (deg - 1) / 2).sum())
        transitivity = 3 * tri.size(1) / wedges if wedges else float("nan")
        homophily = float((y[pairs[0]] == y[pairs[1]]).double().mean())
        ly = y[tri]
        same = float(((ly[0] == ly[1]) & (ly[1] == ly[2])).double().mean()) if tri.size(1) else float("nan")
        print(f"| {name} | {n:,} | {pairs.size(1):,} | {tri.size(1):,} | {t_all:.2f} | {capped.size(1):,} | "
              f"{t_cap:.2f} | {transitivity:.3f} | {homophily:.3f} | {same:.3f} | {homophily ** 2:.3f} |", flush=True)


if __name__ == "__main__":
    main()
