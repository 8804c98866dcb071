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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gbpn.baselines.published import classic_setting
from gbpn.bp.layer import warm_up
from gbpn.data.datasets import check_dataset_name, dataset_name, load_dataset
from gbpn.data.splits import node_splits, split_from_record, trial_split
from gbpn.errors import DatasetNotFoundError, GBPNError
from gbpn.experiments.grid_models import LARGE_MODELS, auto_members, check_model, compose_auto, run_one
from gbpn.experiments.lock import holder, is_held, release, try_lock
from gbpn.experiments.runner import data_source, save_trial_outputs, trial_meta
from gbpn.experiments.tables import read_rows, score_note, write_results
from gbpn.io import atomic_write, check_writable, read_json, versions, write_json, write_predictions
from gbpn.progress import Progress
from gbpn.train.config import check_budget, resolve_device
from gbpn.train.session import TrialResult
from gbpn.train.metrics import check_metric, default_metric

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


@dataclass
class Grid:
    """One benchmark grid: every model of ``models`` on every data set of ``datasets``, ``trials`` times (trial ``t``
    with seed ``seed + t`` and its split), into the folder ``output``; the other fields say how each run trains.

    ``epochs``, ``batch_size`` (GBPN on sampled trees), ``patience``, ``dropout`` (None: the default rule) and
    ``budget`` (the full trainings a ``:tuned`` model's search spends) are those of :func:`run_one`. ``metric``
    selects every full-batch model's epoch (and LP / C&S their alphas) on validation and is reported beside accuracy
    (``auto``: ROC AUC for imbalanced binary labels, else accuracy); the mini-batch baselines select on accuracy.

    ``device`` is where GBPN and the ``:tuned`` models train (the other baselines train on the CPU); it is recorded in
    ``config.json`` and is not part of the grid's identity (a grid resumes on another device). ``data_dir``: the
    folder of the data sets; ``skip_missing``: a data set whose files are absent leaves the grid with a warning
    instead of stopping it before it starts.

    ``save_predictions`` also writes every run's class probabilities on every node,
    ``predictions/<dataset>__<model>__<trial>.csv`` (GBPN: evidence as in evaluation), and each GBPN
    run's checkpoint, ``checkpoints/<dataset>__<model>__<trial>.pt`` (``gbpn predict`` reads it); the
    mini-batch baselines have no per-node output."""

    models: Sequence[str]
    datasets: Sequence[str]
    trials: int
    output: str | Path
    epochs: int = 500
    seed: int = 0
    batch_size: Optional[int] = None
    patience: Optional[int] = None
    metric: str = "auto"
    dropout: Optional[float] = None
    budget: float = 2.0
    device: str = "cpu"
    data_dir: Optional[str] = None
    skip_missing: bool = False
    save_predictions: bool = False

    def identity(self) -> Dict:
        """What ``config.json`` records of the grid (a rerun into its folder must match it)."""
        return {"models": list(self.models), "datasets": list(self.datasets), "trials": self.trials,
                "epochs": self.epochs, "seed": self.seed, "batch_size": self.batch_size, "patience": self.patience,
                "metric": self.metric, "dropout": self.dropout, "budget": self.budget}


def run_grid(grid: Grid, progress: bool = True, log: Callable[[str], None] = print, table_only: bool = False) -> str:
    """Run every (dataset, model, trial) of ``grid`` not yet on disk (none with ``table_only``); return the Markdown
    table (:mod:`gbpn.experiments.tables`).

    A data set whose files are absent stops the grid before it starts (:class:`GBPNError`), or with
    ``grid.skip_missing`` leaves the grid with a warning. ``progress`` shows a bar on a terminal and
    elsewhere a line per finished run with the time spent and left (:class:`gbpn.progress.Progress`)."""
    check_grid(grid)
    cells = _Cells(grid)
    todo = cells.plan(table_only, log)
    with Progress(len(todo), "benchmark", unit="run", enabled=progress, log=log) as bar:
        for d, m, t in todo:
            bar.start(f"{d} {m} trial {t}")
            cells.run(d, m, t)  # another worker may have finished or locked it meanwhile
            row = cells.row(d, m, t)
            bar.done(score_note(read_json(row)) if row.is_file() else "held by another worker")
    if not table_only:
        cells.check_finished()
    return cells.results(table_only)


def check_grid(grid: Grid) -> None:
    """Refuse a grid that cannot run, before anything is written or trained: an unknown model, a budget out of range,
    a folder holding another grid, a misspelt data set or a published setting it lacks, a GPU this machine lacks, a
    folder that cannot be written."""
    out = Path(grid.output)
    for m in grid.models:
        check_model(m)
    check_budget(grid.budget)  # a budget of 1e9 would search for ever
    if (out / "config.json").is_file():
        old, new = read_json(out / "config.json"), grid.identity()
        # grids recorded before the metric option resume with any metric
        if (any(old.get(k) != new[k] for k in ("epochs", "seed", "batch_size", "patience"))
                or old.get("metric", grid.metric) != grid.metric or old.get("dropout", grid.dropout) != grid.dropout
                or old.get("budget", grid.budget) != grid.budget):
            raise GBPNError(f"{out} holds a grid with other epochs/seed/batch size/patience/metric/dropout; choose a new "
                           "--output folder")
    for d in grid.datasets:  # a misspelt name fails now, not after the grid's earlier data sets have run
        check_dataset_name(d)
        for m in grid.models:  # and a published setting the data set lacks
            if m.endswith(":classic"):
                classic_setting(m.partition(":")[0], dataset_name(d))
    resolve_device(grid.device)
    check_writable(out)  # before the grid says what it will run


class _Cells:
    """A grid's runs on disk (``rows/<dataset>__<model>__<trial>.json``), the data sets they read (one loaded at a
    time, each checked once) and the running of one under its lock."""

    def __init__(self, grid: Grid):
        self.grid, self.out = grid, Path(grid.output)
        self.rows_dir = self.out / "rows"
        # a bring-your-own folder is named by its last path component in rows and tables
        self.source = {dataset_name(d): d for d in grid.datasets}
        self.datasets = list(self.source)
        # an auto model is chosen from its candidates' own rows, run first: a grid resumes per candidate,
        # shares them with the same models asked for on their own, and a new candidate trains only itself
        self.members = {m: auto_members(m, grid.batch_size) for m in grid.models}
        self.models = list(dict.fromkeys(g for m in grid.models for g in [*(c for c, _ in self.members[m] or []), m]))
        self.loaded: Dict = {}
        self.skipped: set = set()
        self.resolved: Dict[str, str] = {}  # the selection metric per data set
        self.recorded = False

    def row(self, d: str, m: str, t: int) -> Path:
        return self.rows_dir / f"{d}__{m}__{t}.json"

    def every(self) -> List[Tuple[str, str, int]]:
        """Every run of the grid, auto models' candidates included, trial by trial: a grid stopped early holds the
        same trials for every model of a data set."""
        return [(d, m, t) for d in self.datasets for t in range(self.grid.trials) for m in self.models]

    def plan(self, table_only: bool, log: Callable[[str], None]) -> List[Tuple[str, str, int]]:
        """The runs left to do (none with ``table_only``), every data set they read loaded and checked first."""
        todo = [c for c in self.every() if not self.row(*c).is_file()]
        if self.grid.save_predictions:
            self._warn_unsaved()
        if not table_only:
            # every data set with runs to do loads now (seconds each; the sampled synth-* grids cannot be absent):
            # an absent one stops the grid before hours of the others, and the count below holds only real runs.
            # Last first, so that the first one stays loaded for its runs
            for d in reversed(list(dict.fromkeys(d for d, _, _ in todo))):
                if not d.lower().startswith("synth-"):
                    self.dataset(d)
            todo = [(d, m, t) for d, m, t in todo if d not in self.skipped]
        finished = sum(self.row(*c).is_file() for c in self.every())
        if table_only:
            if not finished:
                raise GBPNError(f"no finished runs of this grid in {self.out}: run it without --table-only first")
            log(f"the table from the {finished} finished runs in {self.out}")
            return []
        skipped = self.skipped
        shape = (f"{len(self.datasets) - len(skipped)} data set(s) x {len(self.models)} model(s) x {self.grid.trials} "
                 "trial(s)" + (f", without {', '.join(sorted(skipped))}" if skipped else ""))
        log(f"{len(todo)} runs to do ({shape}), {finished} already finished in {self.out}")
        return todo

    def _warn_unsaved(self) -> None:
        unsaved = [f"{d}__{m}__{t}" for d, m, t in self.every() if m not in LARGE_MODELS and self.row(d, m, t).is_file()
                   and not (self.out / "predictions" / f"{d}__{m}__{t}.csv").is_file()]
        if unsaved:
            logging.getLogger(__name__).warning(
                f"--save-predictions: {len(unsaved)} run(s) finished earlier without it (e.g. {unsaved[0]}) and are "
                "not rerun, so their predictions are not written: use a new --output to keep every run's")

    def dataset(self, d: str):
        """Data set ``d``, loaded and checked once (its selection metric resolved); None where it was skipped."""
        g = self.grid
        if d not in self.loaded and d not in self.skipped:
            try:
                self.loaded.clear()
                self.loaded[d] = data = load_dataset(self.source[d], g.data_dir)
                check_metric(g.metric, int(data.num_classes), repr(d))
                if g.metric == "auto":  # once per data set, from trial 0's training and validation labels
                    first_train, first_val, _ = trial_split(data, 0, g.seed)[0]
                    self.resolved[d] = default_metric(data.y, int(data.num_classes), first_train | first_val)
                else:
                    self.resolved[d] = g.metric
            except DatasetNotFoundError as err:
                if not g.skip_missing:
                    raise GBPNError(f"{err} (or give --skip-missing to run the grid without {d})") from None
                logging.getLogger(__name__).warning(f"skipping {d}: {err}")
                self.skipped.add(d)
        return self.loaded.get(d)

    def record_config(self) -> None:
        """``config.json``, written once a data set has loaded: bad input leaves no folder behind."""
        if not self.recorded:
            write_json(self.out / "config.json", {**self.grid.identity(), "protocol": "AdamW lr 1e-3 wd 2.5e-4, val "
                                                  "model selection", "device": self.grid.device, "versions": versions()})
            self.recorded = True

    def run(self, d: str, m: str, t: int) -> bool:
        """Run (d, m, t) unless its row exists; False while another worker holds it."""
        name = self.rows_dir / f"{d}__{m}__{t}"
        if name.with_suffix(".json").is_file() or d in self.skipped:
            return True
        data = self.dataset(d)  # loaded (and checked) before anything is written
        if data is None:
            return True
        self.record_config()
        lock = try_lock(name.with_suffix(".lock"))
        if lock is None:
            return False
        try:  # whatever happens once locked (an error, an interruption), the lock is released
            if name.with_suffix(".json").is_file():  # finished by another worker since the check above
                return True
            write_json(name.with_suffix(".json"), self._row(data, d, m, t))
            shutil.rmtree(self.out / "units" / name.name, ignore_errors=True)
        finally:  # no lock file left behind, finished or interrupted: whoever locks the path next sees the row
            release(lock)
        return True

    def _row(self, data, d: str, m: str, t: int) -> Dict:
        """The row of run (d, m, t): an auto model's composed from its candidates' rows, any other model trained."""
        g, stem, s = self.grid, f"{d}__{m}__{t}", self.grid.seed + t
        masks, record = trial_split(data, t, s)
        split = f"public split {record['index']}" if record["kind"] == "public" else f"random 30/20/50 seed {s}"
        warm_up(int(data.num_classes))  # the kernels' one-time load is no trial's time
        start = time.perf_counter()
        if self.members.get(m):
            metrics = self._compose(d, m, t)
        else:
            # a :tuned run keeps its finished rungs until its row is written: a rerun resumes there
            metrics = run_one(m, data, masks, s, g.epochs, g.batch_size, g.patience, self.resolved[d],
                              keep=g.save_predictions, dropout=g.dropout, budget=g.budget, units=self.out / "units" / stem,
                              device=g.device)
            if g.save_predictions:
                metrics, kept = metrics
                _save_outputs(self.out, stem, data, kept, s, record, data_source(self.source[d], g.data_dir))
            metrics["seconds"] = time.perf_counter() - start
        return {"dataset": d, "model": m, "trial": t, "seed": s, "split": split,
                # the selection metric (the mini-batch baselines select on accuracy whatever is asked)
                "metric": "accuracy" if m in LARGE_MODELS else self.resolved[d],
                # numbers, the chosen potential's name and lists (the learned H)
                **{k: v for k, v in metrics.items() if isinstance(v, (int, float, list)) or k == "potential"}}

    def _compose(self, d: str, m: str, t: int) -> Dict:
        """An auto run's metrics from its candidates' rows, each run first where it is not (another worker's waited
        for)."""
        cands = []
        for g, _ in self.members[m]:
            while not self.run(d, g, t):  # another worker is running it
                time.sleep(5)
            cands.append(read_json(self.row(d, g, t)))
        metrics = compose_auto(self.members[m], cands, self.resolved[d])
        if self.grid.save_predictions:
            chosen = {n: g for g, n in self.members[m]}[metrics["potential"]]
            _copy_outputs(self.out, f"{d}__{chosen}__{t}", f"{d}__{m}__{t}")
        return metrics

    def check_finished(self) -> None:
        """Warn of runs other workers hold (the table lacks them); refuse a grid whose every data set was skipped."""
        held = [n.stem for n in self.rows_dir.glob("*.lock") if not n.with_suffix(".json").is_file() and is_held(n)] \
            if self.rows_dir.is_dir() else []
        if held:
            logging.getLogger(__name__).warning(
                f"{len(held)} run(s) are held by other workers (e.g. {held[0]}: "
                f"{holder(self.rows_dir / (held[0] + '.lock'))}): the table lacks them until those finish; rerun then")
        if self.skipped and set(self.datasets) <= self.skipped:
            raise GBPNError(f"every data set of the grid was skipped ({', '.join(sorted(self.skipped))}: see above); "
                            "set --data-dir or GBPN_DATA to the folder holding them")

    def results(self, table_only: bool) -> str:
        """The grid's results from every finished row of it (:func:`gbpn.experiments.tables.write_results`)."""
        g = self.grid
        rows = [r for r in read_rows(self.rows_dir)
                if r["dataset"] in self.datasets and r["model"] in self.models and r["trial"] < g.trials]
        # training time: every run once (an auto row's time is its candidates')
        runs = [r for r in rows if not self.members.get(r["model"])]
        total, untimed = sum(r.get("seconds", 0.0) for r in runs), sum("seconds" not in r for r in runs)
        rows = [r for r in rows if r["model"] in g.models]
        if table_only and not rows:
            raise GBPNError(f"no finished runs of this grid in {self.out}: run it without --table-only first")
        return write_results(self.out, rows, g.models, self.datasets, g.trials, total, untimed)


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


def run_preset(name: str, output: str | Path, quick: bool = False, progress: bool = True,
               log: Callable[[str], None] = print, table_only: bool = False, **kw) -> str:
    """The grid of the preset ``name`` (:data:`PRESETS`; ``quick``: its smoke test) into ``output``; ``kw``: the
    other fields of its :class:`Grid` (seed, data folder, metric, device, ...)."""
    if name not in PRESETS:
        raise GBPNError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    p = dict(PRESETS[name])
    smaller = p.pop("quick", {})
    if quick:
        p.update(QUICK, **smaller)
        # gbpn:auto trains every candidate encoder per run (half of table3's quick time): not a smoke test
        p["models"] = [m for m in p["models"] if not m.endswith(":auto")]
    grid = Grid(p["models"], p["datasets"], p["trials"], output, epochs=p["epochs"], patience=p.get("patience"),
                dropout=p.get("dropout"), **kw)
    return run_grid(grid, progress=progress, log=log, table_only=table_only)


__all__ = ["PRESETS", "Grid", "run_grid", "run_preset", "run_one"]
