"""Test accuracy of GBPN trained with implicit BP (``--backward implicit``) against unrolled K = 5.

Every cell is a resumable ``gbpn train`` run (:func:`gbpn.experiments.runner.run_trials`, seeds
0..T-1 with their splits, the paper's protocol: 500 epochs, model selection on validation) under
``--output``. Unrolled K = 5 is either trained here (``--unroll-trials``, same seeds) or read from a
benchmark grid's ``results.csv`` (``--reference``, model ``gbpn``), made with the same protocol;
with both, the trials trained here are checked against the reference ones.

    python benchmarks/implicit_accuracy.py --datasets sexual election cora citeseer --trials 10 \\
        --reference results/table3/results.csv --unroll-trials 1 --data-dir $GBPN_DATA
    python benchmarks/implicit_accuracy.py --datasets ising+ mrf+ --trials 10 --unroll-trials 10 --long-steps 30

Prints per data set: mean ± std test accuracy of both, the mean paired difference (implicit -
unrolled, same split), and the implicit training passes' convergence: the fraction of forward
passes that reached the tolerance, the mean forward and adjoint steps, and the fallback rate.
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from gbpn.train.config import TrainConfig
from gbpn.experiments.runner import run_trials


def _mean_std(values) -> str:
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--reference", default=None, help="results.csv of a benchmark grid with unrolled gbpn rows")
    ap.add_argument("--unroll-trials", type=int, default=None,
                    help="unrolled trials to train here (default: all when there is no --reference, else 0)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--long-steps", type=int, default=None,
                    help="also train unrolled BP with this many steps (same seeds as --trials): does a short K "
                         "act as a regulariser, or is a long unrolled run as good as K = 5?")
    ap.add_argument("--output", default="runs/implicit-accuracy")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    unroll_trials = args.unroll_trials if args.unroll_trials is not None else (0 if args.reference else args.trials)

    reference = defaultdict(dict)
    if args.reference:
        with open(args.reference) as fh:
            for row in csv.DictReader(fh):
                if row["model"] == "gbpn":
                    reference[row["dataset"]][int(row["trial"])] = float(row["test_accuracy"])

    def cell(dataset: str, backward: str, trials: int, num_steps: int = 5) -> list:
        # model selection on validation accuracy, as in the results/ grids (not --metric auto's ROC AUC)
        config = TrainConfig(epochs=args.epochs, backward=backward, tol=args.tol, max_steps=args.max_steps,
                             metric="accuracy", num_steps=num_steps)
        name = backward if num_steps == 5 else f"{backward}-K{num_steps}"
        out = Path(args.output) / f"{dataset}-{name}"
        return run_trials(dataset, config, trials, 0, out, args.data_dir, progress=False,
                          log=lambda m: print(f"  {dataset} {name}: {m}", flush=True))["trials"]

    lines, long_cols = [], []
    for d in args.datasets:
        imp = cell(d, "implicit", args.trials)
        own = cell(d, "unroll", unroll_trials) if unroll_trials else []
        unrolled = {t["trial"]: t["test_accuracy"] for t in own}
        check = ""
        if reference.get(d):
            same = [abs(unrolled[t] - reference[d][t]) for t in unrolled if t in reference[d]]
            if same:
                check = f"; unrolled trials rerun here vs reference: max |diff| {100 * max(same):.2f} pts"
            unrolled = {**reference[d], **unrolled}
        pairs = [(t["test_accuracy"], unrolled[t["trial"]]) for t in imp if t["trial"] in unrolled]
        u = [unrolled[t] for t in sorted(unrolled) if t < args.trials]
        diff = 100 * np.mean([a - b for a, b in pairs]) if pairs else float("nan")
        f = np.mean([t["implicit_forward_converged_frac"] for t in imp])
        fs = np.mean([t["implicit_forward_steps_mean"] for t in imp])
        a = np.mean([t["implicit_adjoint_steps_mean"] for t in imp])
        fb = np.mean([t["implicit_fallback_frac"] for t in imp])
        sec = np.mean([t["train_seconds"] for t in imp])
        if args.long_steps:
            long = cell(d, "unroll", args.trials, args.long_steps)
            paired = [t["test_accuracy"] - unrolled[t["trial"]] for t in long if t["trial"] in unrolled]
            long_cols.append(f"| {d} | {_mean_std([t['test_accuracy'] for t in long])} ({len(long)}) | "
                             f"{100 * np.mean(paired) if paired else float('nan'):+.1f} | {diff:+.1f} | "
                             f"{np.mean([t['train_seconds'] for t in long]):.0f} |")
        lines.append(f"| {d} | {_mean_std(u) if u else '-'} ({len(u)}) | {_mean_std([t['test_accuracy'] for t in imp])} "
                     f"({len(imp)}) | {diff:+.1f} | {100 * f:.1f}% | {fs:.1f} | {a:.1f} | {100 * fb:.1f}% | {sec:.0f} |")
        print(f"{d} done{check}", flush=True)
    print(f"\nTest accuracy (%), mean ± std (trials); Δ: mean paired difference implicit - unrolled; "
          f"implicit at tol {args.tol:g}, at most {args.max_steps} steps; {args.epochs} epochs")
    print("| dataset | unrolled K=5 | implicit | Δ | forward converged | forward steps | adjoint steps | fallback "
          "| s/trial (implicit) |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    if long_cols:
        print(f"\nUnrolled K = {args.long_steps} against K = 5 (Δ: mean paired difference, same splits)")
        print(f"| dataset | unrolled K={args.long_steps} | Δ K={args.long_steps} - K=5 | Δ implicit - K=5 "
              f"| s/trial (K={args.long_steps}) |")
        print("|---|---|---|---|---|")
        print("\n".join(long_cols))


if __name__ == "__main__":
    main()
