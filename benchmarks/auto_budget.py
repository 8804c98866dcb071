"""Cost and accuracy of ``--potential auto --budget B`` against one plain run of the configuration it chose.

Per data set and trial (the split ``gbpn benchmark`` uses: the public split ``trial`` where the data set has
them, else a random 30/20/50 split seeded ``seed + trial``), in one process, one after the other:

1. ``fit`` with ``--potential auto --budget B`` (wall time of the whole search, its final training included);
2. ``fit`` of the configuration it chose, alone (wall time of one run).

The two alternate (A B A B ...), so both see the machine's load of the same minutes. The plain run is the
search's final training again (same seed, split and configuration): its scores must equal the search's,
which the script checks. Rows go to ``--output`` (one JSON line per trial, appended as each finishes;
a rerun skips the trials already there). ``--summarize`` prints the study's tables from those rows, the
``:tuned`` and two-layer baselines' grid and earlier exhaustive ``gbpn:auto`` grids (``--reference``).

    python benchmarks/auto_budget.py --datasets cora chameleon squirrel --trials 3 --patience 100 \\
        --data-dir ../shared/datasets --output results/auto-budget/cost.jsonl
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path


def _mean_std(values) -> str:
    import numpy as np

    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if v.size > 1 else f"{v.mean():.1f}"


def summarize(cost: Path, grids, reference) -> str:
    """Markdown tables: the cost of each search against one run of its choice, and the test accuracy of the
    budgeted search, of exhaustive ``gbpn:auto`` (``reference`` CSVs of earlier grids), of the ``:tuned``
    and two-layer baselines (``grids``' results.csv), each on the trials the budgeted search ran."""
    import statistics
    from collections import Counter

    rows = [json.loads(line) for line in cost.read_text().splitlines()]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    out = ["| dataset | trials | auto chose | configurations | epochs besides the final training | final epochs | "
           "counted cost ratio (median) | budgeted auto s | one run of its choice s | wall ratio (median, range) |",
           "|---" * 10 + "|"]
    for d in datasets:
        rs = [r for r in rows if r["dataset"] == d]
        ratios = [r["ratio"] for r in rs]
        chose = ", ".join(f"{k} {n}" for k, n in Counter(r["chosen"] for r in rs).most_common())
        out.append(f"| {d} | {len(rs)} | {chose} | {statistics.mean(r['configurations'] for r in rs):.1f} | "
                   f"{statistics.mean(r['search_epochs'] - r['final_epochs'] for r in rs):.0f} | "
                   f"{statistics.mean(r['final_epochs'] for r in rs):.0f} | "
                   f"{statistics.median(r['cost_ratio'] for r in rs):.2f} | "
                   f"{statistics.mean(r['auto_seconds'] for r in rs):.0f} | "
                   f"{statistics.mean(r['single_seconds'] for r in rs):.0f} | "
                   f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    out += ["", accuracy_table(rows, grids, reference, common=False), accuracy_table(rows, grids, reference, True)]
    return "\n".join(out) + "\n"


def _grid_rows(path: Path) -> list:
    """A grid's rows: its results.csv, or a grid folder's (rows/*.json of the runs it finished where it has none)."""
    import csv

    if path.is_dir() and not (path / "results.csv").is_file():
        return [{k: str(v) for k, v in json.loads(f.read_text()).items()} for f in sorted(path.glob("rows/*.json"))]
    return list(csv.DictReader(open(path / "results.csv" if path.is_dir() else path)))


TWO_LAYER = {"gcn:tuned": "gcn", "gcn-sep:tuned": "gcn", "sage:tuned": "sage", "gat:tuned": "gat", "gat-sep:tuned": "gat"}
BASELINES = ("mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "lp", "cs")  # the eight two-layer baselines


def accuracy_table(rows, grids, reference, common: bool) -> str:
    """Test scores (the metric each data set selects on): budgeted auto; exhaustive auto and the best of the eight
    two-layer baselines (``reference`` CSVs; a data set's rows from the last CSV holding it); the ``:tuned``
    baselines (``grids``). ``common``: on the trials every column has, with each tuned baseline's gain over its
    two-layer counterpart; else on every trial of the budgeted search."""
    import csv
    import statistics

    tuned_rows = [r for g in grids for r in _grid_rows(Path(g))]
    ref: dict = {}
    for g in reference:
        found = list(csv.DictReader(open(g)))
        for d in {r["dataset"] for r in found}:
            ref[d] = [r for r in found if r["dataset"] == d]
    tuned = [m for m in TWO_LAYER if any(r["model"] == m for r in tuned_rows)]
    head = ["dataset", "metric", "trials", "budgeted auto", "exhaustive auto", "best two-layer baseline"]
    if common:
        head += tuned + [f"{m} − {TWO_LAYER[m]}" for m in tuned if m in TWO_LAYER]
    out = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    walls: list = []
    for d in dict.fromkeys(r["dataset"] for r in rows):
        mine = {r["trial"]: r for r in rows if r["dataset"] == d}
        metric = next(iter(mine.values()))["metric"]
        key = f"test_{metric}"
        score = lambda rs, m: {int(r["trial"]): float(r[key]) for r in rs if r["model"] == m and r.get(key)}  # noqa: E731
        trials = set(mine)
        tuned_here = [r for r in tuned_rows if r["dataset"] == d]
        if common:  # the trials every tuned baseline run on this data set has
            for m in tuned:
                trials &= set(score(tuned_here, m)) if any(r["model"] == m for r in tuned_here) else trials
        trials = sorted(trials)
        if not trials:
            continue
        ref_d = ref.get(d, [])

        def cell(values) -> str:
            return _mean_std(values) if len(values) == len(trials) else "–"
        cells = [cell([mine[t][key] for t in trials])]
        exhaustive = score(ref_d, "gbpn:auto")
        cells.append(cell([exhaustive[t] for t in trials if t in exhaustive]))
        base = {m: score(ref_d, m) for m in BASELINES}
        base = {m: [v[t] for t in trials if t in v] for m, v in base.items()}
        base = {m: v for m, v in base.items() if len(v) == len(trials)}
        best = max(base, key=lambda m: statistics.mean(base[m])) if base else None
        cells.append(f"{best} {_mean_std(base[best])}" if best else "–")
        if common:
            for m in tuned:
                v = score(tuned_here, m)
                cells.append(cell([v[t] for t in trials if t in v]))
            for m in tuned:
                v, two = score(tuned_here, m), score(ref_d, TWO_LAYER[m])
                pairs = [(v[t], two[t]) for t in trials if t in v and t in two]
                cells.append(f"{100 * statistics.mean(a - b for a, b in pairs):+.1f}" if len(pairs) == len(trials)
                             else "–")
        out.append(f"| {d} | {metric} | {len(trials)} | " + " | ".join(cells) + " |")
        if common:
            secs = lambda rs, m: [float(r["seconds"]) for r in rs if r["model"] == m and int(r["trial"]) in trials]  # noqa: E731
            walls.append(f"| {d} | {len(trials)} | {statistics.mean(mine[t]['auto_seconds'] for t in trials):.0f} | "
                         f"{statistics.mean(mine[t]['single_seconds'] for t in trials):.0f} | "
                         + " | ".join(f"{statistics.mean(v):.0f}" if len(v := secs(src, m)) == len(trials) else "–"
                                      for src, m in [(tuned_here, m) for m in tuned]) + " |")
    if common:
        out += ["", "| dataset | trials | budgeted auto s | one run of its choice s | "
                + " | ".join(f"{m} s" for m in tuned) + " |", "|---" * (4 + len(tuned)) + "|", *walls]
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "chameleon", "squirrel"])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=2.0)
    p.add_argument("--epochs", type=int, default=500)
    p.add_argument("--patience", type=int, default=100)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output", required=True)
    p.add_argument("--summarize", nargs="*", metavar="GRID", default=None,
                   help="print the tables from --output and these :tuned grids (results.csv, or a grid folder: its "
                        "results.csv or finished rows) instead of running")
    p.add_argument("--reference", nargs="*", default=[],
                   help="with --summarize: results.csv files holding exhaustive gbpn:auto rows on the same trials")
    args = p.parse_args()
    if args.summarize is not None:
        print(summarize(Path(args.output), args.summarize, args.reference), end="")
        return

    import torch

    from gbpn.data import load_dataset
    from gbpn.data.splits import trial_split
    from gbpn.train.auto import candidate_name
    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit
    from gbpn.train.metrics import default_metric

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # the search's rung lines
    out = Path(args.output)
    def done() -> set:  # read again before each trial: several processes may share one --output
        return {(r["dataset"], r["trial"]) for r in map(json.loads, out.read_text().splitlines())} \
            if out.is_file() else set()

    for name in args.datasets:
        data = load_dataset(name, args.data_dir)
        first = trial_split(data, 0, args.seed)[0]
        metric = default_metric(data.y, int(data.num_classes), first[0] | first[1])
        for trial in range(args.trials):
            if (name, trial) in done():
                continue
            s = args.seed + trial
            masks, split = trial_split(data, trial, s)
            config = TrainConfig(potential="auto", budget=args.budget, epochs=args.epochs, patience=args.patience,
                                 metric=metric)
            start = time.perf_counter()
            auto = fit(data, config, seed=s, masks=masks)
            auto_wall = time.perf_counter() - start
            chosen = auto.config
            start = time.perf_counter()
            single = fit(data, chosen, seed=s, masks=masks)
            single_wall = time.perf_counter() - start
            search = auto.metrics["auto_search"]
            same = all(auto.metrics[k] == single.metrics[k] for k in ("val_accuracy", "test_accuracy", "best_epoch"))
            row = {"dataset": name, "trial": trial, "seed": s, "split": split, "metric": metric, "budget": args.budget,
                   "chosen": candidate_name(chosen), "chosen_params": auto.metrics["auto_search"]["chosen"]["params"],
                   "configurations": auto.metrics["search_configurations"],
                   "search_epochs": auto.metrics["search_epochs"], "final_epochs": auto.metrics["epochs_run"],
                   "rungs": search["rungs"], "cost_ratio": (search["spent_cost"] + search["run_cost"]) / search["run_cost"],
                   "auto_seconds": auto_wall, "single_seconds": single_wall, "ratio": auto_wall / single_wall,
                   "same_as_single": same,
                   **{f"{k}": auto.metrics[k] for k in ("val_accuracy", "test_accuracy") if k in auto.metrics},
                   **{f"{k}": auto.metrics[k] for k in (f"val_{metric}", f"test_{metric}") if k in auto.metrics}}
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"{name} trial {trial}: chose {row['chosen']} ({row['configurations']} configurations, "
                  f"{row['search_epochs']} epochs); auto {auto_wall:.0f} s, one run {single_wall:.0f} s, ratio "
                  f"{row['ratio']:.2f}; test {100 * row['test_accuracy']:.1f}; same as the plain run: {same}",
                  flush=True)


if __name__ == "__main__":
    main()
