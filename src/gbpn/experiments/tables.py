"""A benchmark grid's results: its finished rows read back, ``results.csv``, ``table.md`` (the test score by each
data set's selection metric) and ``potentials.md`` (``gbpn:auto``'s encoders beside the best baseline).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from gbpn.errors import GBPNError
from gbpn.experiments.grid_models import BASELINE_MODELS
from gbpn.io import atomic_write, is_score, read_json, score_or_nan, write_csv

# what results.csv holds of every row, before the auto runs' per-candidate scores
CSV_KEYS = ["dataset", "model", "trial", "seed", "split", "test_accuracy", "val_accuracy", "train_accuracy",
            "test_roc_auc", "val_roc_auc", "test_macro_f1", "val_macro_f1", "metric", "potential", "seconds"]


def write_results(out: Path, rows: List[Dict], models: Sequence[str], datasets: Sequence[str], trials: int,
                  seconds: float, untimed: int) -> str:
    """``results.csv``, ``table.md`` and, with ``gbpn:auto`` rows, ``potentials.md`` in ``out`` from the finished
    ``rows`` of ``models``; ``seconds`` of training in all (``untimed`` rows imported without a time). Returns the
    Markdown table."""
    if rows:
        # and the auto runs' per-candidate scores, so the encoder table can be rebuilt from the CSV alone
        keys = CSV_KEYS + sorted({k for r in rows for k in r if "__" in k and not isinstance(r[k], list)})
        write_csv(out / "results.csv", rows, keys)  # data-set folder names may read as formulas
    table = grid_table(rows, models, datasets, trials)
    if any(r["model"] == "gbpn:auto" for r in rows):
        atomic_write(out / "potentials.md", lambda fh: fh.write(
            "Test score (%), mean ± std; GBPN per encoder = the candidates inside the gbpn:auto runs "
            "(same seed and split); best per row in bold.\n\n" + potential_table(rows, datasets)))
    atomic_write(out / "table.md", lambda fh: fh.write(
        f"Test score (%) by each data set's selection metric (accuracy unless its row names another), mean ± std "
        f"over trials; best per row in bold. {len(rows)} runs, "
        f"{seconds / 60:.1f} min of training in all" + (f" ({untimed} imported rows without a time)" if untimed else "")
        + ".\n\n" + table))
    return table


def read_rows(rows_dir: Path) -> List[Dict]:
    """The finished runs in ``rows_dir``; a file that is not one (hand-edited, stray) is named."""
    rows = []
    for p in sorted(rows_dir.glob("*.json")) if rows_dir.is_dir() else []:
        r = read_json(p)
        if not (isinstance(r, dict) and isinstance(r.get("dataset"), str) and isinstance(r.get("model"), str)
                and isinstance(r.get("trial"), int) and "test_accuracy" in r and is_score(r["test_accuracy"])):
            raise GBPNError(f"{p} is not a finished run of a grid (a dataset, model, trial and test_accuracy); "
                            "delete it (the run it stands for is redone) or move it out of rows/")
        rows.append(r)
    return rows


def _selection_metric(rows: List[Dict], dataset: str) -> str:
    """The metric ``dataset``'s runs selected their epochs on (the one most of them name; accuracy where none does,
    or where a run did not record its test score under it)."""
    names = [r.get("metric") or "accuracy" for r in rows if r["dataset"] == dataset]
    metric = max(set(names), key=names.count) if names else "accuracy"
    mine = [r for r in rows if r["dataset"] == dataset]
    return metric if all(f"test_{metric}" in r for r in mine) else "accuracy"


def grid_table(rows: List[Dict], models: Sequence[str], datasets: Sequence[str], trials: int) -> str:
    """Markdown: a row per data set, its test score by the metric its runs selected on (a ROC AUC row says so)."""
    cells: Dict = {}
    metrics = {ds: _selection_metric(rows, ds) for ds in datasets}
    for r in rows:
        cells.setdefault((r["dataset"], r["model"]), []).append(
            100 * score_or_nan(r[f"test_{metrics.get(r['dataset'], 'accuracy')}"]))
    lines = ["| dataset | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for ds in datasets:
        stats = {m: cells.get((ds, m)) for m in models}
        if not any(stats.values()):
            continue
        means = {m: float(np.mean(v)) for m, v in stats.items() if v}
        best = max(means.values())
        out = []
        for m in models:
            v = stats[m]
            if not v:
                out.append("–")
                continue
            txt = f"{np.mean(v):.1f}" + (f" ± {np.std(v, ddof=1):.1f}" if len(v) > 1 else "")  # no spread of one
            if len(v) < trials:
                txt += f" (n={len(v)})"  # an unfinished cell says how many trials it holds
            out.append(f"**{txt}**" if means[m] == best else txt)
        name = ds if metrics[ds] == "accuracy" else f"{ds} ({METRIC_NAMES.get(metrics[ds], metrics[ds])})"
        lines.append(f"| {name} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


METRIC_NAMES = {"roc_auc": "ROC AUC", "macro_f1": "macro F1"}


def _cell(values: List[float]) -> str:
    v = 100 * np.asarray(values, dtype=float)  # null (an undefined score) reads as NaN
    return f"{v.mean():.1f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.1f}"


def potential_table(rows: List[Dict], datasets: Sequence[str], auto_model: str = "gbpn:auto") -> str:
    """Markdown: per dataset, the best baseline, every encoder tried by ``auto_model``'s runs (each
    candidate's test score, recorded beside its validation score; same seeds and splits), ``auto``
    itself and how often it chose each encoder, over the trials the auto runs have finished (the
    baselines on the same trials). Best mean per row in bold. Where the auto runs
    selected on ROC AUC (binary labels, minority under 30%), a second line gives ROC AUC."""
    auto = [r for r in rows if r["model"] == auto_model]
    cands = list(dict.fromkeys(k.split("__")[0] for r in auto for k in r if k.endswith("__test_accuracy")))
    baselines = [m for m in BASELINE_MODELS if any(r["model"] == m for r in rows)]
    head = ["dataset", "metric", "best baseline", *[f"GBPN {c}" for c in cands], "GBPN auto", "auto chose"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for ds in datasets:
        ar = [r for r in auto if r["dataset"] == ds]
        if not ar:
            continue
        for metric in ("accuracy", "roc_auc"):
            if not all(f"test_{metric}" in r for r in ar):
                continue
            # rows imported from an older results.csv may lack the candidates' scores
            cells = {f"GBPN {c}": [r[f"{c}__test_{metric}"] for r in ar if f"{c}__test_{metric}" in r]
                     for c in cands}
            cells["GBPN auto"] = [r[f"test_{metric}"] for r in ar]
            trials = {r["trial"] for r in ar}  # baselines on the same splits as the auto runs
            base = {m: [r[f"test_{metric}"] for r in rows if r["dataset"] == ds and r["model"] == m
                        and f"test_{metric}" in r and r["trial"] in trials] for m in baselines}
            base = {m: v for m, v in base.items() if v}
            best_base = max(base, key=lambda m: np.mean(np.asarray(base[m], dtype=float))) if base else None
            means = {k: float(np.mean(np.asarray(v, dtype=float))) for k, v in cells.items() if v}
            if best_base:
                means["base"] = float(np.mean(np.asarray(base[best_base], dtype=float)))
            top = max(means.values())
            bold = lambda key, txt: f"**{txt}**" if means.get(key) == top else txt  # noqa: E731
            chose = ", ".join(f"{c} {n}" for c, n in sorted(
                {c: sum(r.get("potential") == c for r in ar) for c in cands}.items(), key=lambda kv: -kv[1]) if n)
            out = [ds, f"{metric} (n={len(ar)})",
                   bold("base", f"{best_base} {_cell(base[best_base])}") if best_base else "–",
                   *[bold(k, _cell(v) + ("" if len(v) == len(ar) else f" (n={len(v)})")) if v else "–"
                     for k, v in cells.items()],
                   chose]
            lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def score_note(row: Dict) -> str:
    """A finished run's test score in per cent, for its progress line."""
    acc = score_or_nan(row.get("test_accuracy"))
    note = f"test accuracy {100 * acc:.1f}%"
    if row.get("metric") == "roc_auc" and "test_roc_auc" in row:
        note += f", ROC AUC {100 * score_or_nan(row['test_roc_auc']):.1f}%"
    return note
