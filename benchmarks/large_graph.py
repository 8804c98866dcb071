"""Mini-batch training epoch and full-graph inference on a large synthetic graph.

Builds a DC-SBM graph of the chosen size (default: arXiv-sized, 169,343 nodes, 1,166,243
undirected edges, 128 features, 40 classes; ``--size products`` for 2,449,029 / 61,859,140 /
100 / 47), trains GBPN for a few mini-batch epochs on sampled computation trees (T = 2,
d = 5) and runs full-graph inference with all neighbours. Prints seconds and the
process's peak RSS after each phase.

Inference modes: ``chunked`` keeps two float32 ``[E, c]`` message buffers (node- and
edge-chunked BP); ``pairs-fp32`` / ``pairs-bf16`` keep one buffer per undirected edge,
updated in place for both directions (``BeliefPropagation.infer_pairs``); the graph is
then built as undirected pairs only. ``--compare`` also runs ``chunked`` in the same
process and reports how far the beliefs moved.

    python benchmarks/large_graph.py --epochs 1 --batch-size 1024
    python benchmarks/large_graph.py --size products --inference pairs-bf16 --steps 5 --max-batches 20
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from gbpn.train.config import TrainConfig
from gbpn.data.generators import ARXIV_SIZE, PRODUCTS_SIZE, planted_partition_graph
from gbpn.data.splits import random_split
from gbpn.train.metrics import accuracy
from gbpn import GBPN
from gbpn.graph.csr import CSRGraph
from gbpn.train.fit import model_args, predict
from gbpn.train.minibatch import tree_epochs
from gbpn.data.features import prepare_features

DTYPES = {"chunked": None, "pairs-fp32": torch.float32, "pairs-fp16": torch.float16, "pairs-bf16": torch.bfloat16}


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["arxiv", "products"], default="arxiv")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--fanout", type=int, default=5)
    ap.add_argument("--hops", type=int, default=2, help="training tree depth T (default: 2)")
    ap.add_argument("--node-chunk", type=int, default=65536)
    ap.add_argument("--edge-chunk", type=int, default=1 << 20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--inference", choices=list(DTYPES), default="chunked")
    ap.add_argument("--max-batches", type=int, default=None, help="cap the training batches per epoch")
    ap.add_argument("--compare", action="store_true", help="also run chunked float32 inference and compare")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, e, f, c = ARXIV_SIZE if args.size == "arxiv" else PRODUCTS_SIZE
    t = time.perf_counter()
    pairs = args.inference != "chunked"
    data = planted_partition_graph(n, e, f, c, homophily=0.6, seed=0, pairs_only=pairs)
    graph = CSRGraph.from_pairs(data.pairs, n) if pairs else CSRGraph.from_edge_index(data.edge_index, n)
    print(f"graph: {data.num_nodes} nodes, {graph.col.numel()} directed edges, {f} features, {c} classes; "
          f"built in {time.perf_counter() - t:.1f} s; peak RSS {peak_gb():.2f} GB", flush=True)
    cfg = TrainConfig(batch_size=args.batch_size, num_steps=args.steps, num_hops=args.hops, fanout=args.fanout,
                      epochs=args.epochs)
    torch.manual_seed(0)
    model = GBPN(**model_args(f, c, cfg, 0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=2.5e-4)
    masks = random_split(data.y, 0.3, 0.2, 0)
    x = prepare_features(data.x)
    epoch = tree_epochs(model, opt, data, x, masks[0].nonzero().view(-1), True, cfg, 0, torch.Generator().manual_seed(0),
                        graph=graph, max_batches=args.max_batches)
    for k in range(args.epochs):
        model.train()
        t = time.perf_counter()
        loss = epoch(k)
        print(f"mini-batch epoch {k}: {time.perf_counter() - t:.1f} s, mean loss {loss:.3f}, "
              f"peak RSS {peak_gb():.2f} GB", flush=True)
    del graph, epoch, opt
    t = time.perf_counter()
    log_b = predict(model, data, masks[0], x=x, node_chunk=args.node_chunk, edge_chunk=args.edge_chunk,
                    message_dtype=DTYPES[args.inference])
    print(f"full-graph inference ({args.inference}, K = {args.steps}, all neighbours): {time.perf_counter() - t:.1f} s, "
          f"test accuracy {accuracy(log_b, data.y, masks[2]):.3f}, peak RSS {peak_gb():.2f} GB", flush=True)
    if args.compare:
        if pairs:
            u, v = data.pairs
            data.edge_index = torch.stack([torch.cat([u, v]), torch.cat([v, u])])
        t = time.perf_counter()
        ref = predict(model, data, masks[0], x=x, node_chunk=args.node_chunk, edge_chunk=args.edge_chunk)
        print(f"chunked float32 inference: {time.perf_counter() - t:.1f} s; beliefs differ by at most "
              f"{(ref.exp() - log_b.exp()).abs().max():.2e} in probability, argmax agrees on "
              f"{100 * (ref.argmax(1) == log_b.argmax(1)).float().mean():.3f}% of nodes", flush=True)


if __name__ == "__main__":
    main()
