"""Accuracy against budget: budgeted ``auto``'s test score against the epochs it trained (every configuration's, the
kept one's included) per trial at each ``--budget``, with the wall time in the table, one panel per data set, beside the rows of fixed models (the published ones, GBPN on their encoders) run on the same splits.

Reads ``gbpn benchmark`` grids of ``gbpn:tuned`` (one per budget, their ``config.json`` says which) and any other
grids or ``gbpn train`` run folders to draw as reference lines, over the trials every budget has. Writes
``OUT.png``, ``OUT.svg`` and prints the table.

    python benchmarks/budget_curve.py --budgets runs/repro/auto-b{1,2,4,8} \\
        --references runs/repro/classic --datasets chameleon-filtered squirrel-filtered \
        --output results/published/budget_curve
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _rows(folder: Path):
    for path in sorted((folder / "rows").glob("*.json")):
        yield json.loads(path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", nargs="+", type=Path, required=True)
    ap.add_argument("--references", nargs="*", type=Path, default=[])
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--datasets", nargs="*", default=None, help="only these (default: every one the grids hold)")
    args = ap.parse_args()
    points = {}  # dataset -> budget -> {trial: (test %, seconds)}
    for folder in args.budgets:
        budget = json.loads((folder / "config.json").read_text())["budget"]
        for r in _rows(folder):
            points.setdefault(r["dataset"], {}).setdefault(budget, {})[r["trial"]] = (
                100 * r["test_accuracy"], r["seconds"], r["search_epochs"])
    refs = {}  # dataset -> model -> {trial: test %}
    for folder in args.references:
        for r in _rows(folder):
            refs.setdefault(r["dataset"], {}).setdefault(r["model"], {})[r["trial"]] = 100 * r["test_accuracy"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in sorted(points) if args.datasets is None or d in args.datasets]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    print("| data set | budget | trials | test accuracy % | epochs trained per trial | s per trial |\n"
          "|---|---|---|---|---|---|")
    for ax, ds in zip(axes[0], datasets):
        trials = set.intersection(*(set(t) for t in points[ds].values()))  # the trials every budget has
        xs, ys, es = [], [], []
        for budget in sorted(points[ds]):
            acc = [points[ds][budget][t][0] for t in sorted(trials)]
            sec = [points[ds][budget][t][1] for t in sorted(trials)]
            epochs = [points[ds][budget][t][2] for t in sorted(trials)]
            xs.append(statistics.mean(epochs))
            ys.append(statistics.mean(acc))
            es.append(statistics.stdev(acc) if len(acc) > 1 else 0.0)
            ax.annotate(f"B={budget:g}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), fontsize=8)
            print(f"| {ds} | {budget:g} | {len(acc)} | {ys[-1]:.1f} ± {es[-1]:.1f} | {xs[-1]:.0f} | "
                  f"{statistics.mean(sec):.0f} |")
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label="GBPN auto --budget B")
        for k, (model, cells) in enumerate(sorted(refs.get(ds, {}).items())):
            same = [cells[t] for t in sorted(trials) if t in cells]
            if same:
                ax.axhline(statistics.mean(same), ls="--", lw=1, color=f"C{k + 1}",
                           label=f"{model} ({len(same)} trials)")
        ax.set_xscale("log")
        ax.set_xlabel("epochs trained per trial, every configuration's (the search's cost)")
        ax.set_ylabel("test accuracy %")
        ax.set_title(f"{ds} ({len(trials)} trials)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(args.output.with_suffix(f".{ext}"), dpi=120)


if __name__ == "__main__":
    main()
