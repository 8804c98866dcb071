"""Replace recorded runs by a rerun's: every (dataset, model, trial) of ``FOLDER/results.csv`` takes
the place of the same run in the recorded ``results.csv``, which is rewritten together with the
``table.md`` beside it, and ``potentials.md`` where the grid has ``gbpn:auto`` runs (same formats
as ``gbpn benchmark``'s). Used after
``benchmarks/compare_runs.py`` has shown which runs moved::

    python benchmarks/merge_runs.py results/table3/results.csv runs/rerun/t3
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from gbpn.train.config import TrainConfig
from gbpn.experiments.benchmark import _table, potential_table
from gbpn.train.auto import auto_candidates, candidate_name
from gbpn.io import atomic_write


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", help="the recorded results.csv (rewritten)")
    p.add_argument("folder", help="a grid folder (gbpn benchmark --output) with its results.csv")
    args = p.parse_args()
    recorded_path = Path(args.csv)
    with open(recorded_path) as fh:
        reader = csv.DictReader(fh)
        fields, recorded = list(reader.fieldnames or []), list(reader)
    with open(Path(args.folder, "results.csv")) as fh:
        new = {(r["dataset"], r["model"], r["trial"]): r for r in csv.DictReader(fh)}
    replaced = 0
    for i, r in enumerate(recorded):
        got = new.get((r["dataset"], r["model"], r["trial"]))
        if got is not None:
            recorded[i] = {k: got.get(k, "") for k in fields}
            replaced += 1
    if replaced != len(new):
        raise SystemExit(f"{len(new) - replaced} run(s) of {args.folder} are not in {args.csv}: nothing written")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(recorded)
    atomic_write(recorded_path, lambda fh: fh.write(buf.getvalue()))
    # the table's models, data sets and trials are the grid's own (config.json beside the CSV)
    config = json.loads(recorded_path.with_name("config.json").read_text())
    models, datasets, trials = config["models"], config["datasets"], config["trials"]
    rows = [dict(r, test_accuracy=float(r["test_accuracy"])) for r in recorded
            if r["model"] in models and r["test_accuracy"]]
    total = sum(float(r["seconds"]) for r in rows if r.get("seconds"))
    table = _table(rows, models, datasets, trials)
    atomic_write(recorded_path.with_name("table.md"), lambda fh: fh.write(
        f"Test accuracy (%), mean ± std over trials; best per row in bold. {len(rows)} runs, "
        f"{total / 60:.1f} min of training in all.\n\n" + table))
    if any(r["model"] == "gbpn:auto" for r in recorded):
        order = {name: i for i, name in enumerate(candidate_name(c) for c in auto_candidates(TrainConfig()))}
        typed = [_typed(r, order) for r in recorded]
        atomic_write(recorded_path.with_name("potentials.md"), lambda fh: fh.write(
            "Test score (%), mean ± std; GBPN per encoder = the candidates inside the gbpn:auto runs "
            "(same seed and split); best per row in bold.\n\n" + potential_table(typed, datasets)))
    print(f"replaced {replaced} of {len(recorded)} runs in {args.csv}\n\n{table}")


def _typed(row: dict, order: dict) -> dict:
    """A CSV row as ``gbpn benchmark`` keeps it in its run JSON: numbers as numbers, empty cells
    absent, the auto candidates' columns in ``order`` (candidate -> rank; the CSV sorts them)."""
    text = ("dataset", "model", "split", "potential")
    items = sorted(row.items(), key=lambda kv: order.get(kv[0].split("__")[0], -1) if "__" in kv[0] else -1)
    out = {k: v if k in text else float(v) for k, v in items if v != ""}
    out["trial"] = int(row["trial"])
    return out


if __name__ == "__main__":
    main()
