"""Test accuracy of GBPN with a 1- and a 2-hidden-layer MLP, side by side in one run.

    python benchmarks/mlp_depth.py --datasets cora citeseer election sexual ising+ ising- mrf+ mrf- \
        --trials 3 --patience 100 --data-dir ../shared/datasets --output runs/mlp-depth

Each (dataset, depth) is ``gbpn train`` with the paper's protocol (random 30/20/50 split per
trial, seeds 0..trials-1, at most 500 epochs, model selection on validation accuracy), the two
depths alternating per data set; prints mean ± std test accuracy and seconds per trial.
"""
from __future__ import annotations

import argparse
import time

import torch

from gbpn.train.config import TrainConfig
from gbpn.experiments.runner import run_trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", required=True)
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--patience", type=int, default=100)
    ap.add_argument("--variant", default="gbpn")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--output", default="runs/mlp-depth")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'dataset':<10} " + " ".join(f"{'depth ' + str(d):>14} {'s/trial':>8}" for d in args.depths), flush=True)
    for name in args.datasets:
        cells = []
        for depth in args.depths:
            config = TrainConfig(variant=args.variant, num_hidden=depth, epochs=args.epochs, patience=args.patience)
            start = time.perf_counter()
            res = run_trials(name, config, args.trials, 0, f"{args.output}/{name}-depth{depth}", args.data_dir,
                             progress=False, log=lambda m: None)
            sec = (time.perf_counter() - start) / args.trials
            s = res["summary"]
            cells.append(f"{100 * s['test_accuracy_mean']:>7.1f} ± {100 * s['test_accuracy_std']:<4.1f} {sec:>8.1f}")
        print(f"{name:<10} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
