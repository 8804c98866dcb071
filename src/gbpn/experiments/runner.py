"""Repeated, seeded training trials with a run directory that survives interruption.

A run directory holds ``config.json`` (dataset, split, hyper-parameters,
library versions), ``metrics.json`` (one entry per finished trial, rewritten
atomically after each), ``splits/trial_K.npz`` (the boolean masks used) and
``history.csv`` (every finished trial's per-epoch loss and scores, :mod:`gbpn.experiments.curves`),
``model.pt`` (the checkpoint of the trial with the best validation score, by the run's
selection metric; it remembers
its data set and data folder, so ``gbpn predict --checkpoint`` needs nothing else), and with
``save_trials`` every trial's ``checkpoints/trial_K.pt`` and ``predictions/trial_K.csv``.
Hyper-parameters are recorded resolved (the dropout and metric the run used, not ``None`` or ``"auto"``), so
``gbpn train --config <run>/config.json`` reruns the run exactly. Running again with the same output folder and configuration skips the trials
already finished.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from gbpn.train.config import TrainConfig, default_dropout, resolve_device
from gbpn.data.byo import find_byo_file
from gbpn.data.datasets import data_root, load_dataset
from gbpn.data.splits import node_splits, trial_split
from gbpn.distributed import broadcast_object, rank_and_world
from gbpn.errors import GBPNError
from gbpn.experiments.curves import summary_writer, tensorboard_log, write_history
from gbpn.experiments.lock import folder_busy, lock_folder, release
from gbpn.io import atomic_write, is_score, read_json, score_or_nan, versions, write_json, write_predictions
from gbpn.progress import Progress
from gbpn.train.auto import search_space
from gbpn.train.checkpoint import save_checkpoint
from gbpn.train.metrics import check_metric, default_metric
from gbpn.train.fit import fit, model_args, predict

logger = logging.getLogger(__name__)


def data_source(dataset: str, data_dir: Optional[str], header: Optional[bool] = None) -> Dict[str, Optional[str]]:
    """Where a run's graph came from, as absolute paths: enough to load it again from any folder.
    The data folder is recorded when one was given (``data_dir`` or ``$GBPN_DATA``), else ``None``:
    the default cache then stays the default; a bring-your-own folder's ``header`` when one was given."""
    folder = Path(dataset).expanduser()
    given = data_dir or os.environ.get("GBPN_DATA")
    out = {"dataset": str(folder.resolve()) if folder.is_dir() else dataset,
           "data_dir": str(data_root(given).resolve()) if given else None}
    if header is not None and folder.is_dir():
        out["header"] = header
    return out


def labels_fingerprint(y) -> str:
    """A digest of the node labels, so that a split rebuilt from its seed is known to be the same one."""
    return hashlib.sha1(np.ascontiguousarray(y.numpy().astype(np.int64)).tobytes()).hexdigest()


def _summary(trials: list) -> Dict[str, float]:
    out: Dict[str, float] = {"num_trials": len(trials)}
    for key in ("test_accuracy", "test_f1", "test_roc_auc", "test_macro_f1"):
        vals = np.array([t[key] for t in trials if key in t], dtype=float)
        if vals.size:
            out[f"{key}_mean"] = float(vals.mean())
            out[f"{key}_std"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    if "test_accuracy_mean" not in out:
        out["test_accuracy_mean"], out["test_accuracy_std"] = math.nan, 0.0
    return out


def _validation(trial: Dict, metric: str) -> float:
    """A trial's validation ``metric`` (the model-selection one; accuracy where the trial fell back to
    it) for choosing ``model.pt``: NaN, null or missing ranks below any number."""
    v = score_or_nan(trial.get(f"val_{trial.get('selected_on', metric)}"))
    return -math.inf if v != v else v


def _finished_trials(path: Path) -> list:
    """The per-trial rows of an earlier ``metrics.json``, checked enough to resume from."""
    record = read_json(path)
    trials = record.get("trials") if isinstance(record, dict) else None
    if not isinstance(trials, list) or not all(
            isinstance(t, dict) and isinstance(t.get("trial"), int) and t["trial"] >= 0 and "val_accuracy" in t
            and is_score(t["val_accuracy"]) and is_score(t.get("test_accuracy")) for t in trials) \
            or len({t["trial"] for t in trials}) != len(trials):
        raise GBPNError(f"{path} is not a gbpn metrics file (a list of finished trials, each numbered once, with "
                        "numeric scores); delete it to rerun every trial, or choose a new --output folder")
    return trials


def trial_meta(data, res, source: Dict[str, str], sample: int, seed: int, split: Dict) -> Dict:
    """What a checkpoint of one trained model records besides its weights."""
    return {
        "model_args": model_args(data.num_features, int(data.num_classes), res.config, res.metrics["dropout"],
                                 data.num_nodes, seed),
        "variant": res.config.variant, "dataset": data.name, "source": source, "sample": sample, "seed": seed,
        "split": split, "labels_sha1": labels_fingerprint(data.y),
        "class_names": list(getattr(data, "class_names", [])), "metrics": res.metrics,
        "true_coupling": data.true_H.tolist() if hasattr(data, "true_H") else None,
        **({"true_triangle": data.true_T.tolist()} if hasattr(data, "true_T") else {}),
    }


def save_trial_outputs(out: Path, stem: str, data, res, meta: Dict) -> Tuple[str, str]:
    """``checkpoints/<stem>.pt`` and ``predictions/<stem>.csv`` of one trained model (evidence: the
    training labels for GBPN, none for GBPN-I); their paths relative to ``out``."""
    save_checkpoint(out / "checkpoints" / f"{stem}.pt", res.model, meta)
    known = res.masks[0] if res.config.variant == "gbpn" else None
    probs = predict(res.model, data, known).exp().numpy()
    write_predictions(out / "predictions" / f"{stem}.csv", probs, meta["class_names"],
                      np.zeros(len(probs), dtype=bool) if known is None else known.numpy(), labels=data.y.numpy(),
                      split=node_splits(data.y, res.masks))
    return f"checkpoints/{stem}.pt", f"predictions/{stem}.csv"


def _kept_note(row: Dict) -> str:
    """Which epoch's model a trial kept (1-based, as the epochs are counted in every message) and why."""
    if "diverged_at" in row:
        return (f"kept epoch {row['best_epoch'] + 1}, the best before training diverged at epoch "
                f"{row['diverged_at']}")
    of = f" of {row['epochs_run']}" if "epochs_run" in row else ""
    return f"best epoch {row['best_epoch'] + 1}{of}"


def _implicit_note(row: Dict) -> str:
    """Convergence of implicit BP's training passes, for the trial's log line."""
    if "implicit_forward_converged_frac" not in row:
        return ""
    note = (f"; BP converged in {100 * row['implicit_forward_converged_frac']:.1f}% of forward passes "
            f"(mean {row['implicit_forward_steps_mean']:.1f} steps)")
    if "implicit_adjoint_converged_frac" in row:
        note += (f", {100 * row['implicit_adjoint_converged_frac']:.1f}% of adjoint solves "
                 f"(mean {row['implicit_adjoint_steps_mean']:.1f} steps); "
                 f"truncated-gradient fallback in {100 * row['implicit_fallback_frac']:.1f}%")
    return note


def run_trials(
    dataset: str,
    config: TrainConfig,
    trials: int = 1,
    seed: int = 0,
    output: str | Path = "runs/latest",
    data_dir: Optional[str] = None,
    sample: int = 0,
    progress: bool = True,
    log: Callable[[str], None] = logger.info,
    header: Optional[bool] = None,
    save_trials: bool = False,
    wait: bool = False,
    tensorboard: Optional[str | Path] = None,
) -> Dict:
    """Train ``trials`` models (seeds ``seed, seed+1, ...``, each with its own random split, or
    the data set's public splits where it has them, see :func:`gbpn.data.splits.trial_split`).

    ``save_trials`` keeps every trial's checkpoint and per-node class probabilities (evidence:
    the training labels for GBPN, none for GBPN-I), not only the best trial's checkpoint. ``wait``:
    when another run holds the output folder, wait for it instead of raising :class:`GBPNError`. ``tensorboard``: a
    folder where every epoch's loss and scores go to TensorBoard as it ends (``trial_K`` apart).

    Returns the contents of ``metrics.json``: ``trials`` (per-trial metrics with
    ``test_accuracy`` in [0, 1]) and ``summary`` (mean and sample std). ``header`` is passed to
    :func:`~gbpn.data.load_dataset` for a bring-your-own folder.
    """
    config.validate()
    if tensorboard is not None:
        summary_writer()  # not installed: said before anything loads or trains
    if trials < 1:
        raise GBPNError(f"trials must be at least 1, got {trials}")
    data = _trainable(dataset, data_dir, sample, header, config.metric)
    defaults = _defaults(data, config, seed)
    config = _resolved(config, defaults)  # record the values the run uses, not None or "auto"
    source = data_source(dataset, data_dir, header)
    run = _TrialRun(data, config, Path(output), _run_config(data, config, source, sample, seed, trials), log)
    try:
        run.open(defaults, wait)
        run.warn_kept(save_trials)
        run.train(progress, save_trials, tensorboard)
        result = run.result()
    except BaseException:
        run.abort()
        raise
    finally:
        run.close()
    return result


def _trainable(dataset: str, data_dir: Optional[str], sample: int, header: Optional[bool], metric: str):
    """The data set, refused where no classifier can train on it (too few labels, one class) or ``metric`` does not
    apply to its labels."""
    data = load_dataset(dataset, data_dir, sample=sample, header=header)
    if int((data.y >= 0).sum()) < 3:
        if Path(dataset).expanduser().is_dir() and find_byo_file(Path(dataset).expanduser(), "labels") is None:
            raise GBPNError(f"no labels file found in {dataset} (expected labels.csv or labels.npy, one class id "
                            "per node, -1 where unknown)")
        raise GBPNError(f"dataset {dataset!r} has fewer than 3 labelled nodes: nothing to train on")
    check_metric(metric, int(data.num_classes), repr(dataset))
    seen = data.y[data.y >= 0].unique()
    if seen.numel() < 2:  # accuracy would be 100% by construction
        raise GBPNError(f"every labelled node of {dataset!r} has class {int(seen[0])}: a classifier needs "
                        "labelled nodes of at least two classes")
    return data


def _defaults(data, config: TrainConfig, seed: int) -> Dict:
    """The dropout and metric a run uses where ``config`` leaves them to their rules, from trial 0's split."""
    first_train, first_val, _ = trial_split(data, 0, seed, config.train_frac, config.val_frac)[0]
    return {"dropout": default_dropout(data.num_features, int(first_train.sum())),
            "metric": default_metric(data.y, int(data.num_classes), first_train | first_val)}


def _run_config(data, config: TrainConfig, source: Dict, sample: int, seed: int, trials: int) -> Dict:
    """``config.json`` of a run (without the library versions)."""
    _, world = rank_and_world()
    return {
        "dataset": data.name,
        "source": source,
        "sample": sample,
        "seed": seed,
        "trials": trials,
        "split": ({"kind": "public", "index": "trial mod number of public splits"}
                  if getattr(data, "public_splits", None) is not None else
                  {"kind": "random", "train": config.train_frac, "val": config.val_frac, "seed": "seed + trial"}),
        "graph": {"num_nodes": data.num_nodes, "num_edges": int(data.edge_index.size(1)),
                  "num_features": data.num_features, "num_classes": int(data.num_classes)},
        "train": config.to_dict(),
        "device_used": str(resolve_device(config.device)),  # where "auto" ran; not part of the run's identity
        "world_size": world,  # processes under torchrun: data-parallel training is another run
    }


class _TrialRun:
    """The trials of one run into its folder. Rank 0 holds the folder's lock for the whole run (another run into it
    fails at once, naming the holder), reads what is finished, and every rank learns it (or the same error): the
    output folder need not be shared between machines. Every rank trains; rank 0 writes. A run that fails before
    any trial is recorded leaves nothing of itself."""

    def __init__(self, data, config: TrainConfig, out: Path, run_config: Dict, log: Callable[[str], None]):
        self.data, self.config, self.out, self.run_config, self.log = data, config, out, run_config, log
        self.metrics_path = out / "metrics.json"
        self.rank, self.world = rank_and_world()
        self.lock, self.done, self.bar, self.fresh, self.created = None, None, None, False, False

    def open(self, defaults: Dict, wait: bool) -> None:
        """Lock the folder (rank 0), read the trials an earlier run finished, write ``config.json``."""
        error = None
        if self.rank == 0:
            try:
                self.created = not os.path.lexists(self.out)
                self.lock = lock_folder(self.out, wait=wait)
                self.done, error = ([], folder_busy(self.out, "--output folder")) if self.lock is None else \
                    _resume_state(self.out, self.metrics_path, self.run_config, self.run_config["trials"], self.log,
                                  defaults)
            except GBPNError as err:  # an output path that cannot be written: every rank stops with it
                error = str(err)
        self.done, error = broadcast_object((self.done, error))
        if error:
            raise GBPNError(error)
        if self.rank == 0:
            self.fresh = not (self.out / "config.json").is_file()
            write_json(self.out / "config.json", {**self.run_config, "versions": versions()})

    def warn_kept(self, save_trials: bool) -> None:
        """Say what the finished trials lack that this run will not write (they are not rerun)."""
        if not self.done or self.rank != 0:
            return
        if not (self.out / "model.pt").is_file():
            logger.warning(f"{self.out / 'model.pt'} is missing: the finished trials are not rerun, so it is written "
                           "again only if a new trial validates better; rerun into a new --output to have it")
        unsaved = [t["trial"] for t in self.done if "checkpoint" not in t]
        if save_trials and unsaved:
            logger.warning(f"--save-trials: trial(s) {', '.join(str(t) for t in unsaved)} finished earlier without it "
                           "and are not rerun, so their checkpoints and predictions are not written: rerun into a new "
                           "--output to keep every trial's")

    def train(self, progress: bool, save_trials: bool, tensorboard: Optional[str | Path]) -> None:
        """Train every trial not finished yet, each recorded as it ends."""
        data, config, trials = self.data, self.config, self.run_config["trials"]
        progress = progress and self.rank == 0
        finished = {t["trial"] for t in self.done}
        best_val = max((_validation(t, config.metric) for t in self.done), default=None)
        # a bar over the trials on a terminal; in a log, each trial's line says the time spent and left
        self.bar = Progress(trials - len(finished), data.name, unit="trial", enabled=progress, log=self.log)
        if progress and trials > len(finished):  # what the command will do, before its first (silent) minutes
            self.log(f"{trials - len(finished)} trial(s) to train on {data.name} ({data.num_nodes} nodes, "
                     f"{int(data.edge_index.size(1))} directed edges), up to {config.epochs} epochs each, into "
                     f"{self.out}")
        for trial in range(trials):
            if trial in finished:
                continue
            self.bar.start(f"trial {trial}")  # numbered from 0, as trial_K files, metrics.json and grids number them
            s = self.run_config["seed"] + trial
            masks, split = trial_split(data, trial, s, config.train_frac, config.val_frac)
            # an auto trial's finished candidates (or search rungs) are kept until the trial is: a rerun resumes there
            # (fit decides what auto trains and keeps; one process only: data-parallel ranks must train the same units)
            units = self.out / "units" / f"trial_{trial}"
            desc = f"{data.name} trial {trial}"
            with tensorboard_log(tensorboard if self.rank == 0 else None, trial, desc):
                res = fit(data, config, seed=s, masks=masks, progress=progress, desc=desc,
                          units=units if self.world == 1 else None)
            if self.rank != 0:  # every rank trains; rank 0 writes
                continue
            row = self._record(trial, s, split, res, save_trials, best_val)
            if best_val is None or _validation(row, config.metric) > best_val:
                best_val = _validation(row, config.metric)
            shutil.rmtree(units, ignore_errors=True)
            timing = self.bar.done(say=False)
            self.log(_trial_line(trial, s, row) + (f"; {timing}" if progress else ""))

    def _record(self, trial: int, seed: int, split: Dict, res, save_trials: bool, best_val: Optional[float]) -> Dict:
        """Write a finished trial: its split, history, checkpoints (``model.pt`` where it validates best so far) and
        its row of ``metrics.json``, which it returns."""
        out, data = self.out, self.data
        train, val, test = res.masks
        buf = io.BytesIO()
        np.savez_compressed(buf, train=train.numpy(), val=val.numpy(), test=test.numpy())
        atomic_write(out / "splits" / f"trial_{trial}.npz", lambda fh: fh.write(buf.getvalue()), mode="wb")
        row = {"trial": trial, "seed": seed, "split": f"splits/trial_{trial}.npz", **res.metrics}
        write_history(out, trial, res.history, [t["trial"] for t in self.done])  # before metrics.json lists it
        meta = trial_meta(data, res, self.run_config["source"], self.run_config["sample"], seed, split)
        if save_trials:
            row["checkpoint"], row["predictions"] = save_trial_outputs(out, f"trial_{trial}", data, res, meta)
        if best_val is None or _validation(row, self.config.metric) > best_val:  # the first trial's is kept in any case
            save_checkpoint(out / "model.pt", res.model, meta)
        self.done.append(row)
        self.done.sort(key=lambda t: t["trial"])
        write_json(self.metrics_path, {"trials": self.done, "summary": _summary(self.done)})
        return row

    def result(self) -> Dict:
        """``metrics.json``'s contents, written (rank 0) once every trial has."""
        result = {"trials": self.done, "summary": _summary(self.done)}
        if self.rank == 0:
            write_json(self.metrics_path, result)
        return result

    def abort(self) -> None:
        """No trial ran to the end (out of memory, diverged, ...): no record of a run."""
        if self.rank == 0 and self.fresh and not self.done:
            (self.out / "config.json").unlink(missing_ok=True)

    def close(self) -> None:
        """Close the bar; release the lock, and remove what a run that created the folder wrote if it recorded no
        trial."""
        if self.bar is not None:
            self.bar.close()
        unrecorded = self.lock is not None and self.created and not self.metrics_path.is_file()
        if unrecorded:
            _remove_unrecorded(self.out)
        if self.lock is not None:
            release(self.lock)  # no empty lock file left in the run folder
        if unrecorded:
            with contextlib.suppress(OSError):  # a folder this command made and left empty (units/ of a search stay)
                self.out.rmdir()


def _trial_line(trial: int, seed: int, row: Dict) -> str:
    """A finished trial's log line."""
    extra = f", ROC AUC {100 * row['test_roc_auc']:.2f}%" if "test_roc_auc" in row else ""
    return (f"trial {trial} (seed {seed}): test accuracy {100 * row['test_accuracy']:.2f}%{extra} "
            f"(val {100 * row['val_accuracy']:.2f}%, {_kept_note(row)}, potential {row['potential']})"
            + _implicit_note(row))


def _remove_unrecorded(out: Path) -> None:
    """What a run that created ``out`` wrote before it failed with no trial recorded in ``metrics.json``:
    nothing of it would be resumed (the splits are drawn again from their seeds), so none of it stays."""
    for name in ("splits", "checkpoints", "predictions"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("config.json", "history.csv", "model.pt"):
        (out / name).unlink(missing_ok=True)


def _resolved(config: TrainConfig, defaults: Dict) -> TrainConfig:
    """``config`` with the values a run uses in place of its defaults: ``dropout`` (None) and ``metric``
    ("auto") from ``defaults``, the tree depth ``num_hops`` (None: ``num_steps``) where trees are sampled.
    ``device`` stays as asked ("auto" reruns anywhere); ``config.json`` records the one used apart."""
    return dataclasses.replace(
        config,
        dropout=defaults["dropout"] if config.dropout is None else config.dropout,
        metric=defaults["metric"] if config.metric == "auto" else config.metric,
        search_space=search_space(config) if config.budget is not None and config.search_space is None
        else config.search_space,
        num_hops=(config.num_steps if config.num_hops is None and config.batch_size is not None and config.num_steps >= 1
                  else config.num_hops))


def _differences(old: Dict, new: Dict, prefix: str = "") -> List[str]:
    """``"key: old -> new"`` for every setting that differs, nested dicts by their dotted keys."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def _resume_state(out: Path, metrics_path: Path, run_config: Dict, trials: int, log: Callable[[str], None],
                  defaults: Dict) -> Tuple[list, Optional[str]]:
    """The trials an earlier run in ``out`` finished, or why the folder cannot be resumed."""
    if not (metrics_path.is_file() and (out / "config.json").is_file()):
        return [], None
    previous = {"world_size": 1, **read_json(out / "config.json")}  # runs from before world_size was recorded
    if isinstance(previous.get("train"), dict):  # runs from before defaults were recorded resolved
        try:
            # by flat names, so that a difference reads as the option (and a flat config.json of an older
            # version, read into the parts, compares alike)
            previous["train"] = _resolved(TrainConfig.from_dict(previous["train"]), defaults).flat_dict()
        except GBPNError:  # another version's fields, or hand-edited ones: the comparison below names them
            pass
    ignore = ("trials", "versions", "source", "device_used")  # the same run, wherever its files are read from
    current = {**run_config, "train": TrainConfig.from_dict(run_config["train"]).flat_dict()}
    differ = _differences({k: v for k, v in previous.items() if k not in ignore},
                          {k: v for k, v in current.items() if k not in ignore})
    if differ:
        return [], (f"{out} holds a run with another configuration ({'; '.join(differ[:4])}); choose a new --output "
                    "folder, or rerun with the recorded settings (gbpn train --config " f"{out / 'config.json'})")
    try:
        done = _finished_trials(metrics_path)
    except GBPNError as err:
        return [], str(err)
    metric = current["train"]["metric"]
    other = [t["trial"] for t in done if t.get("metric", "accuracy") != metric]
    if other:  # folders from before --metric auto was one choice per run: a trial may have chosen otherwise
        return [], (f"{out} holds trial(s) {', '.join(str(t) for t in other)} selected on another metric than "
                    f"this run's {metric}; choose a new --output folder")
    beyond = sorted(t["trial"] for t in done if t["trial"] >= trials)
    if beyond:  # rewriting metrics.json would drop them while model.pt may come from one
        return [], (f"{out} already holds {len(done)} finished trials (up to trial {beyond[-1]}); "
                    f"--trials {trials} would drop some: rerun with --trials {beyond[-1] + 1} or more "
                    "to keep them, or choose a new --output folder")
    if done:
        log(f"resuming {out}: {len(done)} of {trials} trials already finished")
    return done, None
