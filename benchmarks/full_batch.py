"""Full-batch GBPN training and inference on the arXiv-sized synthetic graph, on a chosen device.

Trains GBPN (transductive, K = 5, the paper's protocol) for ``--epochs`` full-batch steps with
evaluation every epoch, then times one whole-graph inference. Prints seconds per epoch, the
inference time, test accuracy and peak memory (GPU: peak allocated; CPU: peak RSS).

    python benchmarks/full_batch.py --device cuda --epochs 50
    python benchmarks/full_batch.py --device cpu --epochs 3
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from gbpn.train.config import TrainConfig, resolve_device
from gbpn.data.generators import planted_partition_graph
from gbpn.data.splits import random_split
from gbpn.train.fit import fit, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--classes", type=int, default=40)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    t = time.perf_counter()
    data = planted_partition_graph(args.nodes, args.edges, args.features, args.classes, homophily=0.6, seed=0)
    print(f"graph: {data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, {args.features} features, "
          f"{args.classes} classes; built in {time.perf_counter() - t:.1f} s; device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f", {torch.get_num_threads()} threads"))
    masks = random_split(data.y, 0.3, 0.2, 0)
    res = fit(data, TrainConfig(epochs=args.epochs, device=str(device)), seed=0, masks=masks)
    m = res.metrics
    print(f"training: {m['train_seconds'] / m['epochs_run']:.3f} s per epoch (step + whole-graph evaluation), "
          f"{m['epochs_run']} epochs, test accuracy {m['test_accuracy']:.4f}")
    model = res.model.to(device)
    predict(model, data, masks[0])  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    predict(model, data, masks[0])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    print(f"whole-graph inference (K = 5): {time.perf_counter() - t:.3f} s")
    if device.type == "cuda":
        print(f"peak GPU memory allocated: {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
