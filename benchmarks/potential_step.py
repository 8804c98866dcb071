"""Seconds per full-batch GBPN training step with each potential encoder, against the MLP potential
measured in the same run, and the one-off cost of what each encoder precomputes.

A step is what ``gbpn train`` does per epoch: the encoder's forward, K = 5 BP steps with half the
training labels clamped, the degree-tempered loss, backward and AdamW. Each (graph, encoder) cell
runs in its own process (peak RSS is its own), one thread each unless ``--threads`` says otherwise.
``precompute s`` is the one-off :meth:`GBPN.precompute` (propagated features for ``sign``; the
CSR adjacency for the GNNs, DAGNN and LINKX), ``ratio`` the median step over the MLP potential's median step.

    python benchmarks/potential_step.py --data-dir ../shared/datasets [--graphs cora arxiv] [--steps 20] [--bp-steps 5]

``arxiv`` is the arXiv-sized DC-SBM of ``benchmarks/bp_step.py`` (169,343 nodes, about 2.3 M directed
edges, 128 features, 40 classes); GAT is left out there (its [E, heads, hidden] attention tensors
need about 10 GB).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ENCODERS = ["mlp", "sign", "sign-mixed", "sage", "gcn-mixed", "gat", "dagnn", "linkx"]


def measure(graph: str, encoder: str, steps: int, warmup: int, data_dir: str | None, bp_steps: int) -> dict:
    import torch

    from gbpn.experiments.grid_models import gbpn_config
    from gbpn.data import load_dataset, random_split
    from gbpn.data.generators import planted_partition_graph
    from gbpn import GBPN
    from gbpn.train.fit import model_args
    from gbpn.data.features import prepare_features
    from train_step import time_steps  # the same timed step as the speed table (this folder is on sys.path)

    if graph == "arxiv":
        data = planted_partition_graph(169_343, 1_166_243, 128, 40, seed=0)
        dropout = 0.1
    else:
        data = load_dataset(graph, data_dir)
        dropout = 0.6 if graph in ("cora", "citeseer") else 0.1
    cfg = gbpn_config(f"gbpn:{encoder}")
    torch.manual_seed(0)
    model = GBPN(**model_args(data.num_features, int(data.num_classes), cfg, dropout, data.num_nodes))
    t0 = time.perf_counter()
    x = model.precompute(prepare_features(data.x), data.edge_index)
    precompute = time.perf_counter() - t0
    train, _, _ = random_split(data.y, seed=0)
    (times,) = time_steps(model, x, data, train, steps, warmup, schedule=(bp_steps,))
    return {"seconds_per_step": statistics.median(times), "precompute_seconds": precompute,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="+", default=["cora", "arxiv"])
    ap.add_argument("--encoders", nargs="+", default=ENCODERS)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bp-steps", type=int, default=5,
                    help="BP steps K per training step (0: the encoder and loss alone) (default: 5)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--child", nargs=2, metavar=("GRAPH", "ENCODER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(measure(*args.child, args.steps, args.warmup, args.data_dir, args.bp_steps)))
        return
    print(f"K = {args.bp_steps} BP steps per training step, {args.threads} thread(s)")
    print(f"{'graph':<8} {'encoder':<11} {'s/step':>9} {'ratio':>7} {'precompute s':>13} {'peak MB':>8}", flush=True)
    for graph in args.graphs:
        base = None
        for enc in args.encoders:
            if graph == "arxiv" and enc == "gat":
                continue
            cmd = [sys.executable, __file__, "--child", graph, enc, "--steps", str(args.steps), "--warmup",
                   str(args.warmup), "--threads", str(args.threads), "--bp-steps", str(args.bp_steps)] + (["--data-dir", args.data_dir] if args.data_dir else [])
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            r = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            base = base or (r["seconds_per_step"] if enc == "mlp" else None)
            ratio = f"{r['seconds_per_step'] / base:.2f}" if base else "-"
            print(f"{graph:<8} {enc:<11} {r['seconds_per_step']:>9.4f} {ratio:>7} {r['precompute_seconds']:>13.3f} "
                  f"{r['peak_rss_mb']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
