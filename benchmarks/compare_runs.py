"""Compare a benchmark grid's finished runs with the runs recorded in a ``results.csv``.

For every run in ``FOLDER/rows/`` that the CSV also holds (same data set, model and trial), prints
whether the test score is the same to the last digit, and each difference in points; then the
counts per data set and model. Used to check that a rerun at the current code gives the recorded
numbers before the recorded table is kept::

    python benchmarks/compare_runs.py results/heterophily/results.csv runs/het-baselines
"""
from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", help="the recorded results.csv")
    p.add_argument("folder", help="a grid folder (gbpn benchmark --output) with rows/*.json")
    p.add_argument("--score", default="test_accuracy", help="the column to compare (default: test_accuracy)")
    args = p.parse_args()
    recorded = {(r["dataset"], r["model"], int(r["trial"])): r for r in csv.DictReader(open(args.csv))}
    same, moved, missing = Counter(), Counter(), 0
    for path in sorted(Path(args.folder, "rows").glob("*.json")):
        run = json.loads(path.read_text())
        key = (run["dataset"], run["model"], int(run["trial"]))
        old = recorded.get(key)
        if old is None or old.get(args.score) in (None, "") or run.get(args.score) is None:
            missing += 1
            continue
        a, b = float(old[args.score]), float(run[args.score])
        if a == b:
            same[key[:2]] += 1
        else:
            moved[key[:2]] += 1
            print(f"{key[0]} {key[1]} trial {key[2]}: {100 * a:.2f} -> {100 * b:.2f} ({100 * (b - a):+.2f} points)")
    for cell in sorted(set(same) | set(moved)):
        print(f"{cell[0]:20s} {cell[1]:12s} {same[cell]:3d} identical, {moved[cell]:3d} moved")
    print(f"{sum(same.values())} runs identical, {sum(moved.values())} moved, {missing} not comparable "
          f"(not in {args.csv} or no {args.score})")


if __name__ == "__main__":
    main()
