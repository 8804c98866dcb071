"""Full-graph BP inference on a large synthetic graph, in one process or partitioned over ranks.

First build the graph once and train a model on it (mini-batches of sampled trees), saved to a
cache folder that every later run memory-maps (so two ranks do not each hold a copy)::

    python benchmarks/partitioned_inference.py prepare --size products --cache /tmp/products

Then time inference (K = 5, every neighbour) in one process, and partitioned over 2 ranks::

    python benchmarks/partitioned_inference.py run --cache /tmp/products --half-messages
    torchrun --standalone --nproc_per_node 2 benchmarks/partitioned_inference.py run --cache /tmp/products --half-messages

Each run prints the partition (cut fraction, halo per part), seconds per BP step on every rank,
bytes exchanged per step, the whole inference's seconds, every rank's peak RSS and PSS and the test
accuracy; ``--save`` writes the beliefs and ``--compare`` reports how far they are from beliefs
saved by an earlier run (e.g. the single-process one).
"""
from __future__ import annotations

import argparse
import json
import logging
import resource
import threading
import time
from pathlib import Path

import torch

from gbpn.distributed.partition import PARTITIONERS

def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


class PeakPss:
    """The largest proportional set size of this process seen by a sampler thread, in GB: like RSS,
    but a page mapped by k processes counts 1/k in each (the memory-mapped features and edges that
    every rank reads are in every rank's RSS, once in the machine's memory). Linux only; one
    sample every ``interval`` seconds (a sample walks the page tables: milliseconds)."""

    def __init__(self, interval: float = 2.0):
        self.peak, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    @staticmethod
    def sample() -> float:
        try:
            with open("/proc/self/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) / 1024**2
        except OSError:
            pass
        return float("nan")

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, self.sample())  # NaN (unreadable) never wins a max

    def stop(self) -> float:
        """The peak, NaN where PSS cannot be read; sampled, so a lower bound."""
        self._stop.set()
        self._thread.join()
        peak = max(self.peak, self.sample())
        return peak if peak > 0 else float("nan")


def prepare(args: argparse.Namespace) -> None:
    from gbpn.train.config import TrainConfig
    from gbpn.data.generators import ARXIV_SIZE, PRODUCTS_SIZE, planted_partition_graph
    from gbpn.data.splits import random_split
    from gbpn import GBPN
    from gbpn.graph.csr import CSRGraph
    from gbpn.train.fit import model_args
    from gbpn.train.minibatch import tree_epochs
    from gbpn.data.features import prepare_features

    torch.set_num_threads(args.threads)
    n, e, f, c = ARXIV_SIZE if args.size == "arxiv" else PRODUCTS_SIZE
    t = time.perf_counter()
    data = planted_partition_graph(n, e, f, c, homophily=0.6, seed=0, pairs_only=True)
    print(f"graph: {n} nodes, {data.pairs.size(1)} undirected edges, {f} features, {c} classes; "
          f"built in {time.perf_counter() - t:.1f} s", flush=True)
    cfg = TrainConfig(batch_size=1024, num_steps=args.steps, num_hops=2, fanout=5, epochs=1)
    torch.manual_seed(0)
    model = GBPN(**model_args(f, c, cfg, 0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=2.5e-4)
    masks = random_split(data.y, 0.3, 0.2, 0)
    graph = CSRGraph.from_pairs(data.pairs, n)
    t = time.perf_counter()
    model.train()
    loss = tree_epochs(model, opt, data, prepare_features(data.x), masks[0].nonzero().view(-1), True, cfg, 0,
                       torch.Generator().manual_seed(0), graph=graph, max_batches=args.max_batches)(0)
    print(f"{args.max_batches} mini-batches of trees: {time.perf_counter() - t:.1f} s, mean loss {loss:.3f}", flush=True)
    out = Path(args.cache)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(data.x, out / "x.pt")
    torch.save(data.pairs.to(torch.int32), out / "pairs.pt")
    torch.save({"y": data.y, "train": masks[0], "test": masks[2]}, out / "labels.pt")
    torch.save({"args": model_args(f, c, cfg, 0.1), "state": model.state_dict()}, out / "model.pt")
    print(f"saved to {out}; peak RSS {peak_gb():.2f} GB", flush=True)


def run(args: argparse.Namespace) -> None:
    from torch_geometric.data import Data

    from gbpn.distributed import all_gather_object, init_from_env
    from gbpn.distributed.inference import partitioned_predict
    from gbpn.train.metrics import accuracy
    from gbpn import GBPN

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rank, world = init_from_env()
    if rank != 0:
        logging.getLogger("gbpn").setLevel(logging.WARNING)
    cache = Path(args.cache)
    labels = torch.load(cache / "labels.pt")
    saved = torch.load(cache / "model.pt")
    model = GBPN(**saved["args"])
    model.load_state_dict(saved["state"])
    # memory-mapped: the ranks share the page cache instead of each reading a copy
    data = Data(x=torch.load(cache / "x.pt", mmap=True), y=labels["y"], pairs=torch.load(cache / "pairs.pt", mmap=True),
                num_nodes=labels["y"].numel())
    pss = PeakPss()
    t = time.perf_counter()
    log_b, report = partitioned_predict(model, data, labels["train"], num_steps=args.steps,
                                        message_dtype=torch.bfloat16 if args.half_messages else torch.float32,
                                        chunk=args.chunk, partitioner=args.partitioner, parts_file=args.parts_file)
    seconds = time.perf_counter() - t
    peaks = all_gather_object(peak_gb())
    pss_peaks = all_gather_object(pss.stop())
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank != 0:
        return
    row = {"world_size": world, "threads": args.threads, "seconds": seconds, "peak_rss_gb": peaks, "peak_pss_gb": pss_peaks,
           "test_accuracy": accuracy(log_b, labels["y"], labels["test"]), "half_messages": args.half_messages,
           "cut_fraction": report["partition"]["cut_fraction"],
           "bytes_sent_per_step": report["bytes_sent_per_step"], "partition": report["partition"]}
    print(f"inference (K = {args.steps}, all neighbours, {world} rank(s) x {args.threads} thread(s)): {seconds:.1f} s, "
          f"test accuracy {row['test_accuracy']:.3f}, peak RSS per rank "
          + ", ".join(f"{p:.2f} GB" for p in peaks) + " (PSS " + ", ".join(f"{p:.2f} GB" for p in pss_peaks) + ")",
          flush=True)
    if args.compare:
        ref = torch.load(args.compare)
        print(f"vs {args.compare}: beliefs differ by at most {(ref.exp() - log_b.exp()).abs().max():.2e} in "
              f"probability, argmax agrees on {100 * (ref.argmax(1) == log_b.argmax(1)).float().mean():.4f}% "
              "of nodes", flush=True)
    if args.save:
        torch.save(log_b, args.save)
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the graph, train a model, save both")
    p.add_argument("--size", choices=["arxiv", "products"], default="products")
    p.add_argument("--max-batches", type=int, default=20)
    r = sub.add_parser("run", help="time full-graph inference (under torchrun: partitioned)")
    r.add_argument("--half-messages", action="store_true", help="store messages in bfloat16")
    r.add_argument("--chunk", type=int, default=1 << 18, help="pairs per chunk (default: 2^18)")
    r.add_argument("--partitioner", choices=list(PARTITIONERS), default="auto")
    r.add_argument("--parts-file", default=None,
                   help="under torchrun: node parts read from here if present, else computed and saved here")
    r.add_argument("--save", default=None, help="write the log-beliefs here (rank 0)")
    r.add_argument("--compare", default=None, help="log-beliefs saved by --save in an earlier run")
    r.add_argument("--json", default=None, help="write the numbers here as JSON")
    for q in (p, r):
        q.add_argument("--cache", required=True, help="folder for the graph and the model")
        q.add_argument("--steps", type=int, default=5, help="BP steps K (default: 5)")
        q.add_argument("--threads", type=int, default=1, help="torch threads per process (default: 1)")
    args = ap.parse_args()
    (prepare if args.command == "prepare" else run)(args)


if __name__ == "__main__":
    main()
