"""Mini-batch training epoch and full-graph inference on a large synthetic graph.

Builds a DC-SBM graph of the chosen size (default: arXiv-sized, 169,343 nodes, 1,166,243
undirected edges, 128 features, 40 classes; ``--size products`` for 2,449,029 / 61,859,140 /
100 / 47), trains GBPN for a few mini-batch epochs on sampled computation trees (T = 2,
d = 5) and runs full-graph inference with node- and edge-chunked BP. Prints seconds and the
process's peak RSS after each phase.

    python benchmarks/large_graph.py --epochs 1 --batch-size 1024
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from gbpn.data.generators import ARXIV_SIZE, PRODUCTS_SIZE, planted_partition_graph
from gbpn.data.splits import random_split
from gbpn.nn import GBPN
from gbpn.training import TrainConfig, tree_epochs, accuracy, model_args, predict, prepare_features


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["arxiv", "products"], default="arxiv")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--fanout", type=int, default=5)
    ap.add_argument("--node-chunk", type=int, default=65536)
    ap.add_argument("--edge-chunk", type=int, default=1 << 20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, e, f, c = ARXIV_SIZE if args.size == "arxiv" else PRODUCTS_SIZE
    t = time.perf_counter()
    data = planted_partition_graph(n, e, f, c, homophily=0.6, seed=0)
    print(f"graph: {data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, {f} features, {c} classes; "
          f"built in {time.perf_counter() - t:.1f} s; peak RSS {peak_gb():.2f} GB", flush=True)
    cfg = TrainConfig(batch_size=args.batch_size, num_steps=args.steps, fanout=args.fanout, epochs=args.epochs)
    torch.manual_seed(0)
    model = GBPN(**model_args(f, c, cfg, 0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=2.5e-4)
    masks = random_split(data.y, 0.3, 0.2, 0)
    x = prepare_features(data.x)
    epoch = tree_epochs(model, opt, data, x, masks[0].nonzero().view(-1), True, cfg, 0, torch.Generator().manual_seed(0))
    for k in range(args.epochs):
        model.train()
        t = time.perf_counter()
        loss = epoch(k)
        print(f"mini-batch epoch {k}: {time.perf_counter() - t:.1f} s, mean loss {loss:.3f}, "
              f"peak RSS {peak_gb():.2f} GB", flush=True)
    t = time.perf_counter()
    log_b = predict(model, data, masks[0], x=x, node_chunk=args.node_chunk, edge_chunk=args.edge_chunk)
    print(f"full-graph inference (K = {args.steps}, all neighbours): {time.perf_counter() - t:.1f} s, "
          f"test accuracy {accuracy(log_b, data.y, masks[2]):.3f}, peak RSS {peak_gb():.2f} GB", flush=True)


if __name__ == "__main__":
    main()
