"""Turn the ``gbpn:auto`` rows of an older grid's ``results.csv`` into the rows a grid keeps today.

Since the benchmark composes an auto row from its candidates' own rows (``gbpn``, ``gbpn:sign``,
...), a grid whose auto rows were trained whole (each recording its candidates' validation and
test scores as ``<candidate>__<score>`` columns) can gain a candidate without retraining the old
ones: this script writes one row per old candidate (``"imported"`` names the source; no time is
known for them) and, with ``--all``, the grid's other rows too. The auto rows themselves are not
copied: the benchmark recomposes them. Checks, for every old auto row, that choosing among the
imported candidates gives back the recorded choice, and that a candidate row already in the folder
(e.g. the plain ``gbpn`` model of the same grid) has the same scores.

    python benchmarks/split_auto_rows.py results/potentials/heterophily/results.csv runs/heterophily --all
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from gbpn.experiments.benchmark import auto_members
from gbpn.io import write_json
from gbpn.train.fit import select_by_validation

ID = ("dataset", "model", "trial", "seed", "split")


def _value(v: str):
    if v == "":
        return None
    try:
        return int(v) if v.isdigit() else float(v)
    except ValueError:
        return v


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", help="an older grid's results.csv")
    p.add_argument("folder", help="the grid folder to write rows/ into")
    p.add_argument("--all", action="store_true", help="also import the rows of every other model")
    p.add_argument("--models", nargs="*", default=None, help="with --all: only these other models")
    args = p.parse_args()
    rows_dir = Path(args.folder) / "rows"
    rows_dir.mkdir(parents=True, exist_ok=True)
    written = checked = 0
    rows = [{k: _value(v) for k, v in r.items()} for r in csv.DictReader(open(args.csv))]
    # the other models first, so that a candidate row the grid also ran on its own is checked
    for row in sorted(rows, key=lambda r: r["model"].endswith(":auto")):
        variant, _, potential = row["model"].partition(":")
        base = {k: row[k] for k in ID}
        if potential != "auto":
            if args.all and (args.models is None or row["model"] in args.models):
                path = rows_dir / f"{row['dataset']}__{row['model']}__{row['trial']}.json"
                if not path.exists():
                    keep = {k: v for k, v in row.items() if v is not None and "__" not in k}
                    write_json(path, {**keep, "imported": args.csv})
                    written += 1
            continue
        recorded = {k.split("__")[0] for k in row if "__" in k and row[k] is not None}
        names = [n for _, n in auto_members(row["model"]) if n in recorded]  # ties go to the earlier candidate
        if len(names) != len(recorded):
            raise SystemExit(f"{args.csv}: candidates {sorted(recorded - set(names))} are no longer auto's")
        metric = "roc_auc" if any(row.get(f"{n}__val_roc_auc") is not None for n in names) else "accuracy"
        pick = select_by_validation([row[f"{n}__val_{metric}"] for n in names])
        if names[pick] != row["potential"]:
            raise SystemExit(f"{row['dataset']} trial {row['trial']}: the recorded choice {row['potential']} is not "
                             f"the best validation {metric} ({names[pick]})")
        for n in names:
            scores = {k.split("__", 1)[1]: v for k, v in row.items() if k.startswith(f"{n}__") and v is not None}
            model = variant if n == "mlp" else f"{variant}:{n}"
            path = rows_dir / f"{row['dataset']}__{model}__{row['trial']}.json"
            if path.exists():
                old = json.loads(path.read_text())
                bad = {k: (v, old.get(k)) for k, v in scores.items() if old.get(k) != v}
                if bad:
                    raise SystemExit(f"{path} disagrees with the auto row's {n} candidate: {bad}")
                checked += 1
                continue
            write_json(path, {**base, "model": model, **scores, "potential": n, "imported": args.csv})
            written += 1
    print(f"{written} rows written, {checked} existing candidate rows agree, into {rows_dir}")


if __name__ == "__main__":
    main()
