"""Write the arXiv-sized DC-SBM graph (``gbpn.data.generators``, homophily 0.6, seed 0) as a
bring-your-own folder (``edges.npy``, ``features.npy``, ``labels.npy``), so that ``gbpn train`` and
``gbpn benchmark`` can run on it like on a user's own graph.

    python benchmarks/arxiv_folder.py runs/arxiv-sized
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gbpn.data.generators import ARXIV_SIZE, planted_partition_graph


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", help="folder to write")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the nodes and edges (default: 1)")
    args = ap.parse_args()
    n, e, f, c = ARXIV_SIZE
    data = planted_partition_graph(int(n * args.scale), int(e * args.scale), f, c, homophily=0.6, seed=0)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    ei = data.edge_index
    np.save(out / "edges.npy", ei[:, ei[0] < ei[1]].T.numpy())  # one row per undirected edge
    np.save(out / "features.npy", data.x.numpy())
    np.save(out / "labels.npy", data.y.numpy())
    print(f"{out}: {data.num_nodes} nodes, {ei.size(1) // 2} undirected edges, {f} features, {c} classes")


if __name__ == "__main__":
    main()
