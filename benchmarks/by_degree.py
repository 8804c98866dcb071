"""Test accuracy and confidence by node degree, for runs trained with ``--save-trials`` (issue 60: why the
degree-weighted loss costs accuracy).

Reads each run folder's ``predictions/trial_K.csv`` (every node's class probabilities) and the graph its
``config.json`` names, splits the nodes into degree quantile groups (``[low, high)``, the last closed), and prints
per group and run the accuracy and the mean probability of the predicted class on the group's test (or
validation) nodes, mean ± std over trials. The degree weighting is a temperature: the loss reads
``softmax(alpha_i * log p_i)`` with ``alpha_i = d_i^-1/2``, so the gradient on a node's log-beliefs is scaled by
``alpha_i`` and its belief must be ``1 / alpha_i`` times as sharp to reach the same loss. Printed too: each
group's mean alpha, and over the (first trial's) training nodes the effective sample size ``(sum a)^2 / sum a^2``
of the alphas, the share of them the gradient effectively sees.

    python benchmarks/by_degree.py --runs runs/repro/dw-sage-on runs/repro/dw-sage-off --groups 4
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from gbpn.data import degree, load_dataset
from gbpn.experiments.report import read_predictions
from gbpn.train.objective import degree_temperature


def _trials(run: Path):
    """Each saved trial's predictions (:func:`~gbpn.experiments.report.read_predictions`), in trial order."""
    files = sorted((run / "predictions").glob("trial_*.csv"), key=lambda p: int(p.stem.split("_")[1]))
    return [read_predictions(f) for f in files]


def _mean_std(xs) -> str:
    xs = [100 * x for x in xs if x == x]
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.1f}" if xs else "–"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="gbpn train folders written with --save-trials")
    p.add_argument("--groups", type=int, default=4, help="degree quantile groups of the nodes")
    p.add_argument("--split", default="test", choices=["test", "val"], help="the nodes scored (default: test)")
    args = p.parse_args()

    config = Path(args.runs[0]) / "config.json"
    cfg = json.loads(config.read_text()) if config.is_file() else {}
    if "source" not in cfg:
        raise SystemExit(f"{config} is not a gbpn train run's config: pass folders written by gbpn train --save-trials")
    data = load_dataset(cfg["source"]["dataset"], cfg["source"]["data_dir"], cfg.get("sample", 0))
    deg = degree(data.edge_index, data.num_nodes).numpy()
    alpha = degree_temperature(data.edge_index, data.num_nodes).numpy()
    trials = {run: _trials(Path(run)) for run in args.runs}
    if not all(trials.values()):
        raise SystemExit("a run has no predictions/trial_K.csv: train it with --save-trials")
    split = trials[args.runs[0]][0]["split"]  # training nodes: the first trial's
    edges = np.quantile(deg, np.linspace(0, 1, args.groups + 1))
    group = np.clip(np.searchsorted(edges, deg, side="right") - 1, 0, args.groups - 1)

    train = alpha[split == "train"]
    print(f"{cfg['source']['dataset']}: training nodes {train.size}, mean alpha {train.mean():.2f}, effective sample "
          f"size of alpha {train.sum() ** 2 / (train ** 2).sum() / train.size:.0%} of them")
    print(f"{args.split} nodes:")
    print("| degree | nodes | mean alpha | " + " | ".join(f"{Path(r).name} accuracy | confidence" for r in args.runs)
          + " |")
    print("|---|---|---|" + "---|---|" * len(args.runs))
    for g in range(args.groups):
        sel = group == g
        cells = []
        for run in args.runs:
            acc, conf = [], []
            for t in trials[run]:
                m = sel & (t["split"] == args.split)
                acc.append(float((t["predicted"][m] == t["labels"][m]).mean()))
                conf.append(float(t["probs"][m].max(1).mean()))
            cells += [_mean_std(acc), _mean_std(conf)]
        bounds = f"[{edges[g]:g}, {edges[g + 1]:g}" + ("]" if g == args.groups - 1 else ")")
        print(f"| {bounds} | {sel.sum()} | {alpha[sel].mean():.2f} | " + " | ".join(cells)
              + " |")


if __name__ == "__main__":
    main()
