"""Grids of models x datasets x trials with one result file per run and resumable progress.

Layout of an output folder::

    rows/<dataset>__<model>__<trial>.json   one finished run each (written atomically)
    rows/<dataset>__<model>__<trial>.lock   a run's lock (filelock), held while it runs; gone once it finished
    results.csv                             every finished run
    table.md                                mean ± std of the test score (%) by the selection metric, best per row in bold
    config.json                             the grid, protocol and library versions

Interrupted, the same command skips every run whose row file exists. Several workers may
share one folder: each locks a run before starting it and skips runs another worker holds
(the operating system drops a dead worker's locks). Runs go trial by trial, so a grid stopped
early holds the same trials for every model of a dataset.
"""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gbpn.train.config import TrainConfig, check_budget, resolve_device
from gbpn.data.datasets import check_dataset_name, dataset_name, load_dataset
from gbpn.data.splits import node_splits, split_from_record, trial_split
from gbpn.errors import DatasetNotFoundError, GBPNError
from gbpn.experiments.lock import holder, is_held, release, try_lock
from gbpn.experiments.motifs import EXACT_MODELS, exact_bp, triangle_fit, triangle_variant
from gbpn.experiments.runner import data_source, save_trial_outputs, trial_meta
from gbpn.experiments.tuned import TUNED_MODELS, run_tuned
from gbpn.baselines.published import PUBLISHED_MODELS, classic_setting, run_published
from gbpn.io import (atomic_write, check_writable, is_score, read_json, score_or_nan, versions, write_csv, write_json,
                     write_predictions)
from gbpn.progress import Progress
from gbpn.train.metrics import check_metric, default_metric
from gbpn.bp.layer import warm_up
from gbpn.models.encoders.registry import BLOCK_ENCODERS
from gbpn.train.auto import auto_candidates, candidate_name, candidate_record, select_candidate
from gbpn.train.fit import TrialResult, fit

GBPN_MODELS = ("gbpn-i", "gbpn")
# a GBPN variant per potential encoder: "gbpn:sign", "gbpn-i:sage", "gbpn:gcn-mixed", "gbpn:auto", ...
POTENTIALS = ("mlp", "sign", "sign-mixed", "gcn", "gcn-mixed", "sage", "gat", "gat-mixed", "classic-gcn", "classic-sage",
              "classic-gat", *BLOCK_ENCODERS, "dagnn", "linkx", "auto")


def gbpn_config(model: str, **kw) -> Optional[TrainConfig]:
    """The :class:`TrainConfig` of a GBPN model name (``gbpn``, ``gbpn-i``, ``gbpn:<potential>``),
    or None for a baseline's name."""
    variant, _, potential = model.partition(":")
    motifs = triangle_variant(variant)  # gbpn-triangle[<cap>]: the same with --motifs triangle (gbpn.experiments.motifs)
    if motifs is not None:
        variant, cap = motifs
        kw = {**kw, "motifs": "triangle", "max_triangles_per_node": cap}
    if variant not in GBPN_MODELS or (potential and potential not in POTENTIALS):
        return None
    potential = potential or "mlp"
    return TrainConfig(variant=variant, potential=potential.removesuffix("-mixed"),
                       separate=not potential.endswith("-mixed"), **kw)
BASELINE_MODELS = ("mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "lp", "cs")
LARGE_MODELS = ("sage-sampled", "gat-sampled", "cluster-gcn")  # mini-batch; --epochs counts passes over the data

PRESETS: Dict[str, Dict] = {
    "table2": {
        "models": ["mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "gbpn-i", "gbpn"],
        "datasets": ["ising+", "ising-", "mrf+", "mrf-", "synth-ising+", "synth-ising-", "synth-mrf+", "synth-mrf-"],
        "trials": 10,
        "epochs": 500,
        # --quick: the reference grids only; sampling the synth-* grids alone takes minutes
        "quick": {"datasets": ["ising+", "ising-", "mrf+", "mrf-"]},
    },
    "table3": {
        "models": ["mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "lp", "cs", "gbpn-i", "gbpn", "gbpn:auto"],
        "datasets": ["cora", "citeseer", "pubmed", "cs", "physics", "election", "sexual"],
        "trials": 10,
        "epochs": 500,
    },
    # issue 50: pairwise against triangle GBPN on the triangle MRF, with BP on the true factors for reference
    "motifs": {
        "models": ["exact-bp", "gbpn", "gbpn-triangle", "exact-bp-i", "gbpn-i", "gbpn-i-triangle"],
        "datasets": ["synth-triangle"],
        "trials": 10,
        "epochs": 500,
        "patience": 100,
    },
    # ... and on real graphs, at most 50 triangles per node (Squirrel has 9.6 million triangles)
    "motifs-real": {
        "models": ["gbpn", "gbpn-triangle50"],
        "datasets": ["cora", "citeseer", "chameleon-filtered", "squirrel-filtered", "chameleon", "squirrel"],
        "trials": 10,
        "epochs": 500,
        "patience": 100,
    },
    "heterophily": {
        "models": ["mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "lp", "cs", "gbpn-i", "gbpn", "gbpn:auto"],
        # the filtered graphs (no duplicate nodes across splits) first: they are the fair test
        "datasets": ["chameleon-filtered", "squirrel-filtered", "chameleon", "squirrel"],
        "trials": 10,
        "epochs": 500,
        # unfiltered Squirrel costs GAT and GBPN minutes per 100 epochs on 2 cores
        "patience": 100,
        # the protocol these tables were measured with (the feature-count rule would give 0.3-0.6)
        "dropout": 0.1,
    },
}
QUICK = {"trials": 2, "epochs": 100}


def run_one(model: str, data, masks, seed: int, epochs: int, batch_size: Optional[int] = None,
            patience: Optional[int] = None, metric: str = "auto", keep: bool = False,
            dropout: Optional[float] = None, budget: float = 2.0, units: Optional[Path] = None, device: str = "cpu"):
    """Train and score one model on one split; returns its metrics. ``batch_size`` trains
    GBPN on sampled trees (T = 2, d = 5) instead of full-batch; ``patience`` stops full-batch
    runs early; ``dropout`` overrides the default rule for every model. With ``keep``, returns ``(metrics, kept)``: GBPN's :class:`~gbpn.train.fit.TrialResult`,
    a full-batch baseline's class probabilities ``[N, c]``, ``None`` for the mini-batch baselines.
    ``budget``: the full trainings a ``:tuned`` model's search spends (:mod:`gbpn.experiments.tuned`), ``units``
    the folder keeping its finished rungs (an interrupted run resumes there). ``device``: where GBPN and the
    ``:tuned`` models train (the other baselines train on the CPU)."""
    if model in PUBLISHED_MODELS:
        return run_published(model, data, masks, seed, metric, keep, device)
    if model in TUNED_MODELS:
        return run_tuned(model, data, masks, seed, epochs, budget, patience, metric, keep, dropout, units, device)
    config = gbpn_config(model, epochs=epochs, batch_size=batch_size, num_hops=2 if batch_size else None,
                         patience=patience, metric=metric, dropout=dropout, device=device)
    if model in EXACT_MODELS:
        metrics = exact_bp(model, data, masks)
        return (metrics, None) if keep else metrics
    if config is not None:
        res = fit(data, config, seed=seed, masks=masks)
        metrics = {**res.metrics, **triangle_fit(res.model, data)}
        # flatten the candidates of --potential auto into numeric columns (the choice stays a name)
        for cand in metrics.pop("auto_candidates", []):
            for k, v in cand.items():
                if k != "potential":
                    metrics[f"{cand['potential']}__{k}"] = v
        return (metrics, res) if keep else metrics
    if model in BASELINE_MODELS:
        from gbpn.baselines import fit_baseline

        return fit_baseline(model, data, masks, seed=seed, epochs=epochs, patience=patience, metric=metric,
                            return_probs=keep, dropout=dropout)
    if model in LARGE_MODELS:
        from gbpn.baselines.large import fit_large_baseline

        metrics = fit_large_baseline(model, data, masks, seed=seed, epochs=epochs, batch_size=batch_size or 1024)
        return (metrics, None) if keep else metrics
    raise GBPNError(f"unknown model {model!r}; choose from {', '.join(_model_names())}")


def auto_members(model: str, batch_size: Optional[int] = None) -> Optional[List[Tuple[str, str]]]:
    """For ``<variant>:auto``: ``(grid model, candidate name)`` of every candidate it chooses from
    (the MLP candidate is the plain variant, ``gbpn``); None for any other model."""
    config = gbpn_config(model, batch_size=batch_size)
    if config is None or config.potential != "auto":
        return None
    names = [candidate_name(c) for c in auto_candidates(config)]
    return [(config.variant if n == "mlp" else f"{config.variant}:{n}", n) for n in names]


def compose_auto(members: List[Tuple[str, str]], rows: List[Dict], metric: str) -> Dict:
    """The metrics of an auto run from its candidates' rows (same seed and split): the candidate
    with the best validation ``metric`` (:func:`~gbpn.train.auto.select_candidate`), its name as
    ``potential``, and every candidate's scores as ``<candidate>__<score>`` columns."""
    pick = select_candidate(rows, metric)
    skip = ("dataset", "model", "trial", "seed", "split", "seconds", "imported")
    metrics = {k: v for k, v in rows[pick].items() if k not in skip}
    metrics["potential"] = members[pick][1]
    for (_, name), r in zip(members, rows):
        metrics.update({f"{name}__{k}": v for k, v in candidate_record(name, r, metric).items() if k != "potential"})
    if all("seconds" in r for r in rows):
        metrics["seconds"] = sum(r["seconds"] for r in rows)
    return metrics


def _model_names() -> List[str]:
    return [*GBPN_MODELS, *(f"{v}:<{'|'.join(POTENTIALS)}>" for v in GBPN_MODELS), *BASELINE_MODELS, *LARGE_MODELS,
            *TUNED_MODELS, *PUBLISHED_MODELS]


def _read_rows(rows_dir: Path) -> List[Dict]:
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


def _table(rows: List[Dict], models: Sequence[str], datasets: Sequence[str], trials: int) -> str:
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


def run_grid(
    models: Sequence[str],
    datasets: Sequence[str],
    trials: int,
    output: str | Path,
    epochs: int = 500,
    seed: int = 0,
    data_dir: Optional[str] = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    table_only: bool = False,
    skip_missing: bool = False,
    batch_size: Optional[int] = None,
    patience: Optional[int] = None,
    metric: str = "auto",
    save_predictions: bool = False,
    dropout: Optional[float] = None,
    budget: float = 2.0,
    device: str = "cpu",
) -> str:
    """Run every (dataset, model, trial) not yet on disk (none with ``table_only``); return the Markdown table.

    ``save_predictions`` also writes every run's class probabilities on every node,
    ``predictions/<dataset>__<model>__<trial>.csv`` (GBPN: evidence as in evaluation), and each GBPN
    run's checkpoint, ``checkpoints/<dataset>__<model>__<trial>.pt`` (``gbpn predict`` reads it); the
    mini-batch baselines have no per-node output.

    ``metric`` selects every full-batch model's epoch (and LP / C&S their alphas) on validation and is
    reported beside accuracy (``auto``: ROC AUC for imbalanced binary labels, else accuracy); the
    mini-batch baselines select on accuracy.

    A data set whose files are absent stops the grid before it starts (:class:`GBPNError`), or with
    ``skip_missing`` leaves the grid with a warning. ``progress`` shows a bar on a terminal and
    elsewhere a line per finished run with the time spent and left (:class:`gbpn.progress.Progress`).

    ``device`` is where GBPN and the ``:tuned`` models train (the other baselines train on the CPU); it is recorded in
    ``config.json`` and is not part of the grid's identity (a grid resumes on another device)."""
    out = Path(output)
    for m in models:
        known = BASELINE_MODELS + LARGE_MODELS + TUNED_MODELS + EXACT_MODELS + PUBLISHED_MODELS
        if gbpn_config(m) is None and m not in known:
            raise GBPNError(f"unknown model {m!r}; choose from {', '.join(_model_names())}")
    check_budget(budget)  # before anything is written: a budget of 1e9 would search for ever
    grid = {"models": list(models), "datasets": list(datasets), "trials": trials, "epochs": epochs, "seed": seed,
            "batch_size": batch_size, "patience": patience, "metric": metric, "dropout": dropout, "budget": budget}
    if (out / "config.json").is_file():
        old = read_json(out / "config.json")
        # grids recorded before the metric option resume with any metric
        if (any(old.get(k) != grid[k] for k in ("epochs", "seed", "batch_size", "patience"))
                or old.get("metric", metric) != metric or old.get("dropout", dropout) != dropout
                or old.get("budget", budget) != budget):
            raise GBPNError(f"{out} holds a grid with other epochs/seed/batch size/patience/metric/dropout; choose a new "
                           "--output folder")
    for d in datasets:  # a misspelt name fails now, not after the grid's earlier data sets have run
        check_dataset_name(d)
        for m in models:  # and a published setting the data set lacks
            if m.endswith(":classic"):
                classic_setting(m.partition(":")[0], dataset_name(d))
    resolve_device(device)  # and a GPU this machine lacks
    check_writable(out)  # and a folder that cannot be written, before the grid says what it will run
    recorded = False

    def record_config() -> None:
        """``config.json``, written once a data set has loaded: bad input leaves no folder behind."""
        nonlocal recorded
        if not recorded:
            write_json(out / "config.json", {**grid, "protocol": "AdamW lr 1e-3 wd 2.5e-4, val model selection",
                                             "device": device, "versions": versions()})
            recorded = True
    # a bring-your-own folder is named by its last path component in rows and tables
    source = {dataset_name(d): d for d in datasets}
    datasets = list(source)
    # an auto model is chosen from its candidates' own rows, run first: a grid resumes per candidate,
    # shares them with the same models asked for on their own, and a new candidate trains only itself
    members = {m: auto_members(m, batch_size) for m in models}
    run_models = list(dict.fromkeys(g for m in models for g in [*(c for c, _ in members[m] or []), m]))
    rows_dir = out / "rows"
    todo = [(d, m, t) for d in datasets for t in range(trials) for m in run_models
            if not (rows_dir / f"{d}__{m}__{t}.json").is_file()]
    loaded: Dict = {}
    skipped = set()
    resolved: Dict[str, str] = {}  # the selection metric per data set
    if save_predictions:
        unsaved = [f"{d}__{m}__{t}" for d in datasets for t in range(trials) for m in run_models
                   if m not in LARGE_MODELS and (rows_dir / f"{d}__{m}__{t}.json").is_file()
                   and not (out / "predictions" / f"{d}__{m}__{t}.csv").is_file()]
        if unsaved:
            logging.getLogger(__name__).warning(
                f"--save-predictions: {len(unsaved)} run(s) finished earlier without it (e.g. {unsaved[0]}) and are "
                "not rerun, so their predictions are not written: use a new --output to keep every run's")

    def dataset(d: str):
        if d not in loaded and d not in skipped:
            try:
                loaded.clear()
                loaded[d] = data = load_dataset(source[d], data_dir)
                check_metric(metric, int(data.num_classes), repr(d))
                if metric == "auto":  # once per data set, from trial 0's training and validation labels
                    first_train, first_val, _ = trial_split(data, 0, seed)[0]
                    resolved[d] = default_metric(data.y, int(data.num_classes), first_train | first_val)
                else:
                    resolved[d] = metric
            except DatasetNotFoundError as err:
                if not skip_missing:
                    raise GBPNError(f"{err} (or give --skip-missing to run the grid without {d})") from None
                logging.getLogger(__name__).warning(f"skipping {d}: {err}")
                skipped.add(d)
        return loaded.get(d)

    if not table_only:
        # every data set with runs to do loads now (seconds each; the sampled synth-* grids cannot be absent):
        # an absent one stops the grid before hours of the others, and the count below holds only real runs.
        # Last first, so that the first one stays loaded for its runs
        for d in reversed(list(dict.fromkeys(d for d, _, _ in todo))):
            if not d.lower().startswith("synth-"):
                dataset(d)
        todo = [(d, m, t) for d, m, t in todo if d not in skipped]
    finished = sum((rows_dir / f"{d}__{m}__{t}.json").is_file()
                   for d in datasets for t in range(trials) for m in run_models)
    if table_only:
        if not finished:
            raise GBPNError(f"no finished runs of this grid in {out}: run it without --table-only first")
        todo = []
        log(f"the table from the {finished} finished runs in {out}")
    else:
        shape = (f"{len(datasets) - len(skipped)} data set(s) x {len(run_models)} model(s) x {trials} trial(s)"
                 + (f", without {', '.join(sorted(skipped))}" if skipped else ""))
        log(f"{len(todo)} runs to do ({shape}), {finished} already finished in {out}")

    def cell(d: str, m: str, t: int) -> bool:
        """Run (d, m, t) unless its row exists; False while another worker holds it."""
        name = rows_dir / f"{d}__{m}__{t}"
        if name.with_suffix(".json").is_file() or d in skipped:
            return True
        data = dataset(d)  # loaded (and checked) before anything is written
        if data is None:
            return True
        record_config()
        lock = try_lock(name.with_suffix(".lock"))
        if lock is None:
            return False
        try:  # whatever happens once locked (an error, an interruption), the lock is released
            if name.with_suffix(".json").is_file():  # finished by another worker since the check above
                return True
            s = seed + t
            masks, record = trial_split(data, t, s)
            split = f"public split {record['index']}" if record["kind"] == "public" else f"random 30/20/50 seed {s}"
            warm_up(int(data.num_classes))  # the kernels' one-time load is no trial's time
            start = time.perf_counter()
            if members.get(m):
                cands = []
                for g, _ in members[m]:
                    while not cell(d, g, t):  # another worker is running it
                        time.sleep(5)
                    cands.append(read_json(rows_dir / f"{d}__{g}__{t}.json"))
                metrics = compose_auto(members[m], cands, resolved[d])
                if save_predictions:
                    chosen = {n: g for g, n in members[m]}[metrics["potential"]]
                    _copy_outputs(out, f"{d}__{chosen}__{t}", name.name)
            else:
                # a :tuned run keeps its finished rungs until its row is written: a rerun resumes there
                metrics = run_one(m, data, masks, s, epochs, batch_size, patience, resolved[d], keep=save_predictions,
                                  dropout=dropout, budget=budget, units=out / "units" / name.name, device=device)
                if save_predictions:
                    metrics, kept = metrics
                    _save_outputs(out, name.name, data, kept, s, record, data_source(source[d], data_dir))
                metrics["seconds"] = time.perf_counter() - start
            row = {"dataset": d, "model": m, "trial": t, "seed": s, "split": split,
                   # the selection metric (the mini-batch baselines select on accuracy whatever is asked)
                   "metric": "accuracy" if m in LARGE_MODELS else resolved[d],
                   # numbers, the chosen potential's name and lists (the learned H)
                   **{k: v for k, v in metrics.items() if isinstance(v, (int, float, list)) or k == "potential"}}
            write_json(name.with_suffix(".json"), row)
            shutil.rmtree(out / "units" / name.name, ignore_errors=True)
        finally:  # a finished run's lock file goes: whoever locks it next sees the row above
            release(lock, remove=name.with_suffix(".json").is_file())
        return True

    with Progress(len(todo), "benchmark", unit="run", enabled=progress, log=log) as bar:
        for d, m, t in todo:
            bar.start(f"{d} {m} trial {t}")
            cell(d, m, t)  # another worker may have finished or locked it meanwhile
            row = rows_dir / f"{d}__{m}__{t}.json"
            bar.done(_score_note(read_json(row)) if row.is_file() else "held by another worker")
    held = [n.stem for n in rows_dir.glob("*.lock") if not n.with_suffix(".json").is_file() and is_held(n)] \
        if rows_dir.is_dir() else []
    if held and not table_only:
        logging.getLogger(__name__).warning(
            f"{len(held)} run(s) are held by other workers (e.g. {held[0]}: {holder(rows_dir / (held[0] + '.lock'))}): "
            "the table lacks them until those finish; rerun then")
    if skipped and not table_only and set(datasets) <= skipped:
        raise GBPNError(f"every data set of the grid was skipped ({', '.join(sorted(skipped))}: see above); set "
                        "--data-dir or GBPN_DATA to the folder holding them")
    rows = _read_rows(rows_dir)
    rows = [r for r in rows if r["dataset"] in datasets and r["model"] in run_models and r["trial"] < trials]
    # training time: every run once (an auto row's time is its candidates')
    runs = [r for r in rows if not members.get(r["model"])]
    total, untimed = sum(r.get("seconds", 0.0) for r in runs), sum("seconds" not in r for r in runs)
    rows = [r for r in rows if r["model"] in models]
    if table_only and not rows:
        raise GBPNError(f"no finished runs of this grid in {out}: run it without --table-only first")
    if rows:
        keys = ["dataset", "model", "trial", "seed", "split", "test_accuracy", "val_accuracy", "train_accuracy",
                "test_roc_auc", "val_roc_auc", "test_macro_f1", "val_macro_f1", "metric", "potential", "seconds"]
        # and the auto runs' per-candidate scores, so the encoder table can be rebuilt from the CSV alone
        keys += sorted({k for r in rows for k in r if "__" in k and not isinstance(r[k], list)})
        write_csv(out / "results.csv", rows, keys)  # data-set folder names may read as formulas
    table = _table(rows, models, datasets, trials)
    if any(r["model"] == "gbpn:auto" for r in rows):
        atomic_write(out / "potentials.md", lambda fh: fh.write(
            "Test score (%), mean ± std; GBPN per encoder = the candidates inside the gbpn:auto runs "
            "(same seed and split); best per row in bold.\n\n" + potential_table(rows, datasets)))
    atomic_write(out / "table.md", lambda fh: fh.write(
        f"Test score (%) by each data set's selection metric (accuracy unless its row names another), mean ± std "
        f"over trials; best per row in bold. {len(rows)} runs, "
        f"{total / 60:.1f} min of training in all" + (f" ({untimed} imported rows without a time)" if untimed else "")
        + ".\n\n" + table))
    return table


def _score_note(row: Dict) -> str:
    """A finished run's test score in per cent, for its progress line."""
    acc = score_or_nan(row.get("test_accuracy"))
    note = f"test accuracy {100 * acc:.1f}%"
    if row.get("metric") == "roc_auc" and "test_roc_auc" in row:
        note += f", ROC AUC {100 * score_or_nan(row['test_roc_auc']):.1f}%"
    return note


def _save_outputs(out: Path, stem: str, data, kept, seed: int, split: Dict, source: Dict) -> None:
    """A run's per-node probabilities (and a GBPN run's checkpoint) under ``out``; see :func:`run_grid`."""
    if isinstance(kept, TrialResult):
        save_trial_outputs(out, stem, data, kept, trial_meta(data, kept, source, 0, seed, split))
    elif kept is not None:
        write_predictions(out / "predictions" / f"{stem}.csv", kept.numpy(), list(data.class_names),
                          np.zeros(data.num_nodes, dtype=bool), labels=data.y.numpy(),
                          split=node_splits(data.y, split_from_record(data, split)))


def _copy_outputs(out: Path, source_stem: str, stem: str) -> None:
    """Copy a candidate run's saved predictions and checkpoint to the auto run that chose it."""
    for folder, ext in (("predictions", ".csv"), ("checkpoints", ".pt")):
        src = out / folder / f"{source_stem}{ext}"
        if src.is_file():
            data = src.read_bytes()
            atomic_write(out / folder / f"{stem}{ext}", lambda fh: fh.write(data), mode="wb")


def run_preset(name: str, output: str | Path, quick: bool = False, **kw) -> str:
    if name not in PRESETS:
        raise GBPNError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    p = dict(PRESETS[name])
    smaller = p.pop("quick", {})
    if quick:
        p.update(QUICK, **smaller)
        # gbpn:auto trains every candidate encoder per run (half of table3's quick time): not a smoke test
        p["models"] = [m for m in p["models"] if not m.endswith(":auto")]
    return run_grid(p["models"], p["datasets"], p["trials"], output, epochs=p["epochs"],
                    patience=p.get("patience"), dropout=p.get("dropout"), **kw)


__all__ = ["PRESETS", "run_grid", "run_preset", "run_one"]
