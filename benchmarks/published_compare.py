"""Our runs of the published models beside the numbers their papers report, on the same 10 public splits.

Reads the finished runs (``rows/*.json``) of ``gbpn benchmark`` grids (rows ``<model>:published``, ``<model>:classic``, and any
GBPN row) and the ``metrics.json`` of ``gbpn train`` run folders, and prints one Markdown table per data set: our
mean ± std (test accuracy %, over the trials each row has), the published mean ± std, their difference, and whether
ours lies within one published standard deviation.

    python benchmarks/published_compare.py --grids runs/repro/classic --runs runs/repro/gbpn-classic-*

The published numbers (test accuracy %, mean ± std over the 10 filtered splits of Platonov et al.):

* ``:published``: Platonov et al., ICLR 2023, Table of the filtered Squirrel and Chameleon (as copied, identically
  for the five new data sets, by Finkelshtein et al. ICML 2024 Table 2 and Ribeiro et al. 2025 Table 1);
* ``:classic``: Luo, Shi & Wu, NeurIPS 2024, the per-data-set results listed with their settings in the
  ``medium_graph`` README of their code (LUOyk1999/tunedGNN).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

PUBLISHED = {  # (data set, row) -> (mean, std), test accuracy %
    ("squirrel-filtered", "gcn:published"): (39.47, 1.47), ("chameleon-filtered", "gcn:published"): (40.89, 4.12),
    ("squirrel-filtered", "sage:published"): (36.09, 1.99), ("chameleon-filtered", "sage:published"): (37.77, 4.14),
    ("squirrel-filtered", "gat:published"): (35.62, 2.06), ("chameleon-filtered", "gat:published"): (39.21, 3.08),
    ("squirrel-filtered", "gat-sep:published"): (35.46, 3.10),
    ("chameleon-filtered", "gat-sep:published"): (39.26, 2.50),
    ("squirrel-filtered", "gt:published"): (36.30, 1.98), ("chameleon-filtered", "gt:published"): (38.87, 3.66),
    ("squirrel-filtered", "gt-sep:published"): (36.66, 1.63), ("chameleon-filtered", "gt-sep:published"): (40.31, 3.01),
    ("squirrel-filtered", "gcn:classic"): (45.01, 1.63), ("chameleon-filtered", "gcn:classic"): (46.29, 3.40),
    ("squirrel-filtered", "sage:classic"): (40.78, 1.47), ("chameleon-filtered", "sage:classic"): (44.81, 4.74),
    ("squirrel-filtered", "gat:classic"): (41.73, 2.07), ("chameleon-filtered", "gat:classic"): (44.13, 4.17),
}


def _grid_rows(folder: Path):
    """A grid's finished runs (``rows/*.json``: also those of a grid still running)."""
    budget = json.loads((folder / "config.json").read_text()).get("budget")
    for path in sorted((folder / "rows").glob("*.json")):
        r = json.loads(path.read_text())
        tuned = r["model"].endswith(":tuned") and budget is not None
        yield r["dataset"], r["model"] + (f" (budget {budget:g})" if tuned else ""), float(r["test_accuracy"])


def _run_rows(folder: Path):
    config = json.loads((folder / "config.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    train = config["train"]
    name = f"gbpn:{train['encoder']['potential']} ({folder.name})"
    for t in metrics["trials"]:
        yield config["dataset"], name, float(t["test_accuracy"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", nargs="*", default=[], type=Path)
    ap.add_argument("--runs", nargs="*", default=[], type=Path)
    args = ap.parse_args()
    cells = {}
    for rows in [*map(_grid_rows, args.grids), *map(_run_rows, args.runs)]:
        for ds, model, acc in rows:
            cells.setdefault((ds, model), []).append(100 * acc)
    for ds in sorted({d for d, _ in cells}):
        print(f"\n{ds}\n\n| row | ours | n | published | ours − published | within 1 std |\n|---|---|---|---|---|---|")
        for (d, model), v in sorted(cells.items()):
            if d != ds:
                continue
            ours = f"{statistics.mean(v):.1f} ± {statistics.stdev(v) if len(v) > 1 else 0.0:.1f}"
            pub = PUBLISHED.get((ds, model))
            if pub is None:
                print(f"| {model} | {ours} | {len(v)} | – | – | – |")
                continue
            diff = statistics.mean(v) - pub[0]
            print(f"| {model} | {ours} | {len(v)} | {pub[0]:.2f} ± {pub[1]:.2f} | {diff:+.1f} | "
                  f"{'yes' if abs(diff) <= pub[1] else 'no'} |")


if __name__ == "__main__":
    main()
