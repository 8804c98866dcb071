"""A search must not do worse than its own default: each ``M:tuned`` row of ``gbpn benchmark`` grids beside the
untuned ``M`` on the same trials, at each grid's ``--budget``.

Prints, per data set, model and budget: the test score (each row's own metric: ROC AUC on Election) of both, their
difference, whether it is at least minus half the untuned row's standard deviation, the mean validation scores, on
how many trials the untuned default was kept (the higher validation score wins) and the ``:tuned`` run's seconds.

    python benchmarks/tuned_vs_default.py --grids runs/repro/tuned-b2 runs/repro/tuned-v3 runs/repro/tuned-b8
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from gbpn.experiments.tables import read_rows


def _score(row, split: str) -> float:
    return 100 * row[f"{split}_{row.get('metric') or 'accuracy'}"]


def _std(values) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", nargs="+", type=Path, required=True)
    args = ap.parse_args()
    print("| data set | model | budget | n | untuned test | `:tuned` test | tuned − untuned | within half a std | "
          "untuned val | `:tuned` val | default kept | s per `:tuned` run |\n" + "|---" * 12 + "|")
    summary = {}  # budget -> [(difference, within, kept, trials, seconds)]
    for folder in args.grids:
        budget = json.loads((folder / "config.json").read_text())["budget"]
        rows = {(r["dataset"], r["model"], r["trial"]): r for r in read_rows(folder / "rows")}
        for ds, model in sorted({(d, m) for d, m, _ in rows if m.endswith(":tuned")}):
            base = model.removesuffix(":tuned")
            trials = sorted(t for d, m, t in rows if (d, m) == (ds, model) and (ds, base, t) in rows)
            if not trials:
                continue
            tuned = [rows[ds, model, t] for t in trials]
            plain = [rows[ds, base, t] for t in trials]
            t_test, p_test = [_score(r, "test") for r in tuned], [_score(r, "test") for r in plain]
            diff = statistics.mean(t_test) - statistics.mean(p_test)
            ok = diff >= -0.5 * _std(p_test)
            kept = sum(bool(r.get("tuned__default")) for r in tuned)
            seconds = statistics.median(r["seconds"] for r in tuned)
            summary.setdefault(budget, []).append((diff, ok, kept, len(trials), seconds))
            print(f"| {ds} | {base} | {budget:g} | {len(trials)} | {statistics.mean(p_test):.1f} ± {_std(p_test):.1f} | "
                  f"{statistics.mean(t_test):.1f} ± {_std(t_test):.1f} | {diff:+.1f} | {'yes' if ok else '**no**'} | "
                  f"{statistics.mean(_score(r, 'val') for r in plain):.1f} | "
                  f"{statistics.mean(_score(r, 'val') for r in tuned):.1f} | {kept}/{len(trials)} | "
                  f"{seconds:.0f} |")
    print("\n| budget | `:tuned` rows | tuned − untuned: lowest / mean / highest | within half a std | default kept "
          "| s per `:tuned` run (median of the rows') |\n" + "|---" * 6 + "|")
    for budget, entries in sorted(summary.items()):
        diffs = [e[0] for e in entries]
        print(f"| {budget:g} | {len(entries)} | {min(diffs):+.1f} / {statistics.mean(diffs):+.1f} / {max(diffs):+.1f} "
              f"| {sum(e[1] for e in entries)} of {len(entries)} | {sum(e[2] for e in entries)} of "
              f"{sum(e[3] for e in entries)} trials | {statistics.median(e[4] for e in entries):.0f} |")


if __name__ == "__main__":
    main()
