"""Learning curves of a run: each trial's per-epoch history in ``history.csv``, their figure, and TensorBoard.

``history.csv`` in a run folder holds one row per epoch of every finished trial:
``trial`` (as in ``metrics.json`` and ``splits/trial_K.npz``), ``epoch`` (from 0, as ``best_epoch`` in
``metrics.json``), ``loss`` (the epoch's training loss), ``train_<score>`` and ``val_<score>`` for accuracy
and, where the run selects on another metric, for that one, ``val_loss`` (cross-entropy on the validation
nodes) and ``seconds`` (the epoch's training and scoring). Test scores are left out: a curve is for choosing settings, which the test split must not see.
It is rewritten atomically after each trial, before ``metrics.json`` records the trial, and keeps only the
rows of trials that ``metrics.json`` lists: a run resumed after an interruption has each trial's rows once.

With ``--tensorboard DIR`` the same scalars go to TensorBoard as each epoch ends (:func:`tensorboard_log`).
"""
from __future__ import annotations

import contextlib
import csv
import math
import re
import shutil
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

from gbpn.errors import GBPNError
from gbpn.io import pyplot, read_json, save_figure, write_csv
from gbpn.progress import listen

HISTORY = "history.csv"


def history_rows(trial: int, history: Sequence[Dict[str, float]]) -> List[Dict[str, float]]:
    """One trial's per-epoch history (:attr:`gbpn.train.loop.Selection.history`) as ``history.csv`` rows."""
    return [{"trial": trial, "epoch": int(h["epoch"]), "loss": h["loss"],
             **{k: v for k, v in h.items() if k.startswith(("train_", "val_"))},
             "seconds": h.get("seconds", math.nan)} for h in history]


def read_history(path: str | Path) -> List[Dict[str, float]]:
    """The rows of a ``history.csv`` (numbers as numbers; an empty cell as NaN); none when it is absent."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        with open(path, newline="") as fh:
            return [{k: (int(v) if k in ("trial", "epoch") else float(v) if v != "" else math.nan)
                     for k, v in row.items()} for row in csv.DictReader(fh)]
    except (OSError, ValueError, TypeError) as err:
        raise GBPNError(f"{path} is not a gbpn history file ({err}); delete it (it is written again from the "
                        "trials that finish next) or choose another run folder") from None


def write_history(out: str | Path, trial: int, history: Sequence[Dict[str, float]], finished: Iterable[int]) -> None:
    """Add ``trial``'s rows to ``out/history.csv``, keeping those of the ``finished`` trials only (a trial
    interrupted after its rows were written, and so run again, has its rows once)."""
    path = Path(out) / HISTORY
    keep = set(finished) - {trial}
    rows = [r for r in read_history(path) if r["trial"] in keep] + history_rows(trial, history)
    rows.sort(key=lambda r: (r["trial"], r["epoch"]))
    columns = list(dict.fromkeys(k for r in rows for k in r))  # a resumed run's trials all have the same ones
    columns.remove("seconds")
    columns.append("seconds")
    write_csv(path, [{k: r.get(k, "") for k in columns} for r in rows])


def _metric(trials: Sequence[Dict], rows: Sequence[Dict]) -> str:
    """The score a run selected its epochs on (``metrics.json``), accuracy where that is not in the history."""
    chosen = next((t.get("selected_on", t.get("metric", "accuracy")) for t in trials), "accuracy")
    return chosen if rows and f"val_{chosen}" in rows[0] else "accuracy"


def plot_run(run: str | Path, output: Optional[str | Path] = None) -> Path:
    """Draw a run folder's learning curves: the training loss and the validation and training score (the run's
    selection metric) of every trial against the epoch, each trial's kept (best) epoch marked; written as
    ``<output>.png`` and ``.svg`` (default ``<run>/curves``). Returns the stem written."""
    run = Path(run)
    if not run.is_dir():
        raise GBPNError(f"{run} is not a folder; give the run folder gbpn train wrote (it holds {HISTORY})")
    rows = read_history(run / HISTORY)
    if not rows:
        raise GBPNError(f"{run} holds no {HISTORY}: no trial of it has finished, or it was trained by a gbpn "
                        "from before learning curves were recorded (train it again into a new --output)")
    record = read_json(run / "metrics.json") if (run / "metrics.json").is_file() else {}
    trials = {t["trial"]: t for t in record.get("trials", []) if isinstance(t, dict) and "trial" in t}
    metric = _metric(list(trials.values()), rows)
    plt = pyplot()
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 4))
    for k, trial in enumerate(sorted({r["trial"] for r in rows})):
        mine = [r for r in rows if r["trial"] == trial]
        epochs = [r["epoch"] for r in mine]
        colour = f"C{k % 10}"
        ax_loss.plot(epochs, [r["loss"] for r in mine], color=colour, lw=1, label=f"trial {trial}")
        if "val_loss" in mine[0]:
            ax_loss.plot(epochs, [r["val_loss"] for r in mine], color=colour, lw=1, ls="--")
        val = [100 * r[f"val_{metric}"] for r in mine]
        ax_val.plot(epochs, val, color=colour, lw=1, label=f"trial {trial}")
        if f"train_{metric}" in mine[0]:  # GBPN's on the nodes each step left unclamped
            ax_val.plot(epochs, [100 * r[f"train_{metric}"] for r in mine], color=colour, lw=0.8, ls="--")
        best = trials.get(trial, {}).get("best_epoch")
        at = next((i for i, e in enumerate(epochs) if e == best), None)
        if at is None:  # no metrics.json row: the highest validation score, the earliest of ties
            at = max(range(len(val)), key=lambda i: (val[i] if val[i] == val[i] else -math.inf, -i))
        ax_val.plot([epochs[at]], [val[at]], "o", color=colour, ms=6)
        ax_loss.axvline(epochs[at], color=colour, lw=0.6, ls=":")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="training loss" + (" (dashed: validation)" if "val_loss" in rows[0]
                                                                          else ""))
    ax_val.set(xlabel="epoch", ylabel=f"{metric.replace('_', ' ')} (%)",
               title=f"validation {metric.replace('_', ' ')} (dashed: training)\ndot: the epoch kept")
    ax_val.legend(fontsize="small", loc="lower right")
    fig.suptitle(str(read_json(run / "config.json").get("dataset", run.name)) if (run / "config.json").is_file()
                 else run.name)
    fig.tight_layout()
    stem = Path(output) if output is not None else run / "curves"
    save_figure(fig, stem)
    return stem


def summary_writer():
    """``torch.utils.tensorboard.SummaryWriter``, or a :class:`GBPNError` saying how to install TensorBoard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise GBPNError("--tensorboard needs the tensorboard package, which is not installed: pip install tensorboard")\
            from None
    return SummaryWriter


class TensorBoardLog:
    """One trial's epochs as TensorBoard scalars in ``folder``: ``loss/train``, ``loss/val``, ``<score>/train``,
    ``<score>/val`` and ``seconds/epoch`` at step ``epoch`` (from 0, as in ``history.csv``). A trial that trains several models
    (``--potential auto``) gives each its own run, in a sub-folder named after it. ``folder`` is emptied first: a
    trial run again after an interruption starts its curves again."""

    def __init__(self, folder: str | Path, desc: str):
        self.writer_class = summary_writer()
        self.folder, self.desc, self.writers = Path(folder), desc, {}
        shutil.rmtree(self.folder, ignore_errors=True)

    def __call__(self, desc: str, row: Dict[str, float]) -> None:
        if desc not in self.writers:  # "cora trial 1/5 [search 3: sage]" -> folder/search_3_sage
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", desc[len(self.desc):] if desc.startswith(self.desc) else desc)
            self.writers[desc] = self.writer_class(str(self.folder / name.strip("_")))
        writer, step = self.writers[desc], int(row["epoch"])
        writer.add_scalar("loss/train", row["loss"], step)
        for key, value in row.items():
            split, _, score = key.partition("_")
            if split in ("train", "val") and score:  # test scores stay out of the curves, as in history.csv
                writer.add_scalar(f"{score}/{split}", value, step)
        writer.add_scalar("seconds/epoch", row.get("seconds", math.nan), step)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


@contextlib.contextmanager
def tensorboard_log(folder: Optional[str | Path], trial: int, desc: str) -> Iterator[None]:
    """While in this block, every training epoch of trial ``trial`` (``desc``: its loops' description) goes to
    TensorBoard under ``folder/trial_<trial>``; nothing when ``folder`` is None."""
    if folder is None:
        yield
        return
    log = TensorBoardLog(Path(folder) / f"trial_{trial}", desc)
    try:
        with listen(log):
            yield
    finally:
        log.close()
