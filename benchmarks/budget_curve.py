"""Score against budget: budgeted ``auto``'s test score (each row's own metric: ROC AUC on Election) against the
epochs it trained (every configuration's, the kept one's included) per trial at each ``--budget``, with the wall time
in the table, one panel per data set, beside the rows of fixed models (the published ones, GBPN on their encoders)
run on the same splits, and the published protocol's own cost (5 depths x 1000 steps) as a point where a grid of
``:published`` rows holds the data set, a marked line where not.

Reads ``gbpn benchmark`` grids of ``gbpn:tuned`` (one per budget, their ``config.json`` says which) and any other
grids to draw as reference lines, over the trials every budget has. Writes ``OUT.png``, ``OUT.svg`` and prints the
table.

    python benchmarks/budget_curve.py --budgets runs/repro/curve-b{1,2} runs/repro/b4-final \\
        --references runs/repro/classic runs/repro/published-gcn --output results/published/budget_curve
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


PUBLISHED_STEPS = 5 * 1000  # Platonov et al.'s protocol: depths 1-5, 1000 full-batch steps each


def _rows(folder: Path):
    for path in sorted((folder / "rows").glob("*.json")):
        yield json.loads(path.read_text())


def _score(row) -> float:
    """The row's test score (%) by its own metric."""
    return 100 * row[f"test_{row.get('metric', 'accuracy')}"]


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
                _score(r), r["seconds"], r["search_epochs"])
    refs = {}  # dataset -> model -> {trial: test %}
    for folder in args.references:
        for r in _rows(folder):
            refs.setdefault(r["dataset"], {}).setdefault(r["model"], {})[r["trial"]] = _score(r)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    datasets = [d for d in sorted(points) if args.datasets is None or d in args.datasets]
    cols = min(3, len(datasets))
    lines = (len(datasets) + cols - 1) // cols
    fig, grid = plt.subplots(lines, cols, figsize=(5.5 * cols, 4 * lines), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(datasets):]:
        ax.axis("off")
    print("| data set | budget | trials | test score % | epochs trained per trial | s per trial |\n"
          "|---|---|---|---|---|---|")
    for ax, ds in zip(axes, datasets):
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
        published = False
        for k, (model, cells) in enumerate(sorted(refs.get(ds, {}).items())):
            same = [cells[t] for t in sorted(trials) if t in cells]
            if not same:
                continue
            if model.endswith(":published"):  # a cost of its own: a point, not a line
                published = True
                ax.errorbar([PUBLISHED_STEPS], [statistics.mean(same)],
                            yerr=[statistics.stdev(same) if len(same) > 1 else 0.0], marker="s", capsize=3,
                            color=f"C{k + 1}", label=f"{model}, its protocol ({len(same)} trials)")
            else:
                ax.axhline(statistics.mean(same), ls="--", lw=1, color=f"C{k + 1}",
                           label=f"{model} ({len(same)} trials)")
        if not published:
            ax.axvline(PUBLISHED_STEPS, ls=":", lw=1, color="grey", label="the published protocol's cost (not run)")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # the minor ticks' labels overlap on a short log axis
        ax.set_xlabel("epochs trained per trial, every configuration's (the search's cost)")
        ax.set_ylabel("test score % (Election: ROC AUC)" if ds == "election" else "test accuracy %")
        ax.set_title(f"{ds} ({len(trials)} trials)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(args.output.with_suffix(f".{ext}"), dpi=120)


if __name__ == "__main__":
    main()
