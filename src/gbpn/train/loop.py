"""The training loop shared by GBPN and the baselines: epochs, model selection on validation, divergence.

``train_with_selection`` runs ``train_epoch`` / ``evaluate`` callbacks and keeps the parameters of the
best validation epoch; what an epoch is (full batch, sampled trees, a baseline's own step) is the
caller's (:mod:`gbpn.train.fit`, :mod:`gbpn.train.minibatch`, :mod:`gbpn.baselines`).
"""
from __future__ import annotations

import copy
import logging
import math
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from gbpn.bp.layer import BeliefPropagation, warm_up
from gbpn.bp.numerics import REFUSE
from gbpn.bp.validation import NonFinitePotentialError
from gbpn.errors import GBPNError
from gbpn.progress import epoch_done, step as progress_step
from gbpn.train.cost import uncounted
from gbpn.train.metrics import score

logger = logging.getLogger("gbpn")

# A loss this many times the first epoch's (or 1, if that was below 1) is divergence: a mean cross-entropy
# in the thousands means logits hundreds apart on the wrong class, which no learning rate worth keeping gives.
LOSS_GROWTH = 1e3


def optimizer_step(opt: torch.optim.Optimizer, loss: Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


class StepScores:
    """The training steps' own log-beliefs on the nodes their loss read, gathered over an epoch's batches. GBPN's
    evaluation clamps every training label, so a training score taken from it is 1 by construction; these rows
    (the unclamped half, in training mode) give the one that says something."""

    def __init__(self) -> None:
        self.parts: List[Tuple[Tensor, Tensor]] = []

    def record(self, log_belief: Tensor, index: Tensor) -> None:
        self.parts.append((log_belief.detach(), index.to(log_belief.device)))

    def take(self) -> Optional[Tuple[Tensor, Tensor]]:
        """This epoch's ``(log_belief, index)`` rows (None when nothing was recorded), then forget them."""
        parts, self.parts = self.parts, []
        if not parts:
            return None
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def train_with_selection(
    model: torch.nn.Module,
    train_epoch: Callable[[int], float],
    evaluate: Callable[[int], Tensor],
    y: Tensor,
    masks: Tuple[Tensor, Tensor, Tensor],
    epochs: int,
    progress: bool = False,
    desc: str = "train",
    patience: Optional[int] = None,
    metric: str = "accuracy",
) -> Tuple[Dict[str, float], Tensor, List[Dict[str, float]]]:
    """The loop shared by GBPN and the baselines: ``train_epoch(epoch)`` takes the epoch's
    optimiser step(s) in train mode and returns its loss, then ``evaluate(epoch)`` (eval mode,
    no grad) gives ``[N, c]`` scores.
    The parameters of the epoch with the highest validation ``metric`` (see
    :func:`gbpn.train.metrics.score`) are restored at the end (ties keep the earlier epoch). With
    ``patience``, training stops once that many epochs in a row bring no higher validation score
    (``epochs`` is then a ceiling).

    Returns the best epoch's metrics (``train/val/test_accuracy``, the same for ``metric`` when
    it is not accuracy, ``best_epoch``, ``train_seconds``), its evaluation output and the
    per-epoch history.
    """
    return Selection(model, train_epoch, evaluate, y, masks, epochs, desc, patience, metric).advance(
        epochs, progress).result()


class Selection:
    """:func:`train_with_selection` that can stop between epochs and go on later: :meth:`advance` trains up to an
    epoch, :attr:`val` is the best validation score so far, :meth:`result` restores the best epoch's parameters.
    A budgeted search (:mod:`gbpn.train.search`) trains many of these a few epochs each and continues the best."""

    def __init__(self, model: torch.nn.Module, train_epoch: Callable[[int], float], evaluate: Callable[[int], Tensor],
                 y: Tensor, masks: Tuple[Tensor, Tensor, Tensor], epochs: int, desc: str = "train",
                 patience: Optional[int] = None, metric: str = "accuracy", step_scores: Optional[StepScores] = None):
        self.model, self.train_epoch, self.evaluate, self.y, self.masks = model, train_epoch, evaluate, y, masks
        self.step_scores = step_scores
        self.epochs, self.desc, self.patience, self.metric = epochs, desc, patience, metric
        self.select = metric
        if metric == "roc_auc" and y[masks[1]].unique().numel() == 1:
            self.select = "accuracy"  # NaN every epoch would keep the first epoch, whatever it scores
            logger.warning(f"{desc}: the validation nodes hold one class, so their ROC AUC is undefined: epochs are "
                           "selected on validation accuracy")
        self.key = f"val_{self.select}"
        self.best: Dict[str, float] = {self.key: -math.inf}
        self.best_state, self.best_out = None, None
        self.history: List[Dict[str, float]] = []
        self.epoch, self.stopped, self.seconds, self.diverged_at = 0, False, 0.0, None
        bp = getattr(model, "bp", None)
        if isinstance(bp, BeliefPropagation) and bp.coupling.log_H.device.type == "cpu":
            warm_up(bp.num_classes)  # the CPU kernels' one-time load is not training time

    @property
    def done(self) -> bool:
        return self.stopped or self.epoch >= self.epochs

    @property
    def val(self) -> float:
        """The best validation score so far (``-inf`` before the first epoch)."""
        return self.best[self.key]

    @property
    def val_loss(self) -> float:
        """The lowest validation cross-entropy so far (``inf`` before the first epoch): a budgeted search's early
        ranking, finer than a score that many configurations share after a few epochs."""
        return min((r.get("val_loss", math.inf) for r in self.history), default=math.inf)

    def advance(self, until: int, progress: bool = False) -> "Selection":
        """Train epochs ``epoch .. until - 1`` (at most ``epochs``; none once stopped by patience or divergence)."""
        start = time.perf_counter()
        stop = min(until, self.epochs)
        bar = tqdm(range(self.epoch, stop), desc=self.desc, disable=None if progress else True, leave=False,
                   dynamic_ncols=True)
        for epoch in bar:
            if self.stopped:
                break
            self._epoch(epoch)
            bar.set_postfix(loss=f"{self.history[-1]['loss']:.3f}" if self.history else "",
                            val=f"{100 * self.history[-1][self.key]:.1f}%" if self.history else "",
                            best=f"{100 * self.val:.1f}%")
        bar.close()
        self.seconds += time.perf_counter() - start
        return self

    def _epoch(self, epoch: int) -> None:
        progress_step(epoch + 1, self.epochs)  # for the heartbeat line of a long run in a log (gbpn.progress)
        model, why = self.model, None
        self.epoch = epoch + 1
        start = time.perf_counter()
        try:
            model.train()
            loss = self.train_epoch(epoch)
            step = self.step_scores.take() if self.step_scores is not None else None
            if not math.isfinite(loss):
                why = diverged(model) or f"the loss is {loss}"
            elif self.history and loss > LOSS_GROWTH * max(self.history[0]["loss"], 1.0):
                # finite but exploded (1e31 at lr 1e5): its weights are garbage long before they reach inf
                why = diverged(model) or f"the loss grew from {self.history[0]['loss']:.3g} to {loss:.3g}"
            else:
                model.eval()
                with torch.no_grad():
                    out = self.evaluate(epoch)
                if bool((out.isnan() | out.isposinf()).any()):  # a NaN model must not become the best epoch
                    why = diverged(model) or "its output holds NaN or inf"  # (-inf, log 0, is a clamp's)
        except ValueError as err:  # the layers' input checks see a NaN potential or a coupling out of range
            # features were checked finite before training, so a non-finite potential is the weights'
            why = diverged(model) or ("the encoder's output overflowed" if isinstance(err, NonFinitePotentialError)
                                      else None)
            if why is None:
                raise
        if why is not None:
            advice = "lower the learning rate: lr (--lr), or coupling_lr (--coupling-lr) where the coupling ran away"
            if self.best_state is None:
                raise GBPNError(f"{self.desc}: training diverged at epoch {epoch + 1} ({why}); {advice}")
            logger.warning(f"{self.desc}: training diverged at epoch {epoch + 1} ({why}): stopped there, keeping the "
                           f"best epoch before it ({self.best['epoch'] + 1}); {advice}")
            self.diverged_at, self.stopped = epoch + 1, True
            return
        row = {"epoch": epoch, "loss": loss}
        with uncounted():  # a search's counted cost must not follow the labels scored here
            for name in dict.fromkeys(("accuracy", self.metric)):
                for split, mask in zip(("train", "val", "test"), self.masks):
                    row[f"{split}_{name}"] = score(name, out, self.y, mask)
                if step is not None:  # the training step's unclamped nodes, not evaluation's clamped ones
                    rows, index = step
                    row[f"train_{name}"] = score(name, rows, self.y[index], torch.ones_like(index, dtype=torch.bool))
            row["val_loss"] = validation_loss(out, self.y, self.masks[1])
        row["seconds"] = time.perf_counter() - start  # this epoch's training and scoring
        self.history.append(row)
        epoch_done(self.desc, row)  # to a listener, if any (--tensorboard)
        if row[self.key] > self.val or self.best_state is None:
            self.best, self.best_out = dict(row), out
            self.best_state = copy.deepcopy(self.model.state_dict())
        if logger.isEnabledFor(logging.DEBUG):  # -v: a line per epoch, as PyG's examples print
            logger.debug(f"{self.desc}: epoch {epoch + 1}/{self.epochs}: loss {loss:.4f}, train "
                         f"{100 * row[f'train_{self.select}']:.2f}%, val {100 * row[self.key]:.2f}% (best "
                         f"{100 * self.val:.2f}% at epoch {self.best['epoch'] + 1}), {row['seconds']:.2f} s")
        if self.patience is not None and epoch - self.best["epoch"] >= self.patience:
            self.stopped = True

    def result(self) -> Tuple[Dict[str, float], Tensor, List[Dict[str, float]]]:
        """The best epoch's metrics, evaluation output and the history; the model gets the best epoch's
        parameters (train no further after this)."""
        metrics = {k: v for k, v in self.best.items() if k not in ("epoch", "loss", "seconds")}
        metrics.update(best_epoch=self.best["epoch"], epochs_run=len(self.history), train_seconds=self.seconds)
        if self.metric != "accuracy":
            metrics["metric"] = self.metric
        if self.select != self.metric:
            metrics["selected_on"] = self.select
        if self.diverged_at is not None:
            metrics["diverged_at"] = self.diverged_at
        self.model.load_state_dict(self.best_state)
        return metrics, self.best_out, self.history

    _STATE = ("best", "best_state", "best_out", "history", "epoch", "stopped", "seconds", "diverged_at")

    def state_dict(self) -> Dict:
        """What :meth:`load_state_dict` needs to go on where this one is (the model's and optimiser's own state
        are the caller's)."""
        return {k: getattr(self, k) for k in self._STATE}

    def load_state_dict(self, state: Dict) -> None:
        for k in self._STATE:
            setattr(self, k, state[k])


def validation_loss(out: Tensor, y: Tensor, mask: Tensor) -> float:
    """Cross-entropy of ``out`` (logits or log-probabilities ``[N, c]``) on ``mask``'s nodes; ``inf`` where it is
    not finite or ``mask`` holds none."""
    if not bool(mask.any()):
        return math.inf
    loss = float(F.cross_entropy(out[mask].float(), y[mask]))
    return loss if math.isfinite(loss) else math.inf


def diverged(model: torch.nn.Module) -> Optional[str]:
    """Why ``model``'s parameters can no longer be trained or evaluated (NaN or inf weights, a BP
    coupling spread beyond what float32 messages compute), or ``None``."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            return f"{name} holds NaN or inf"
    coupling = getattr(getattr(model, "bp", None), "coupling", None)
    if coupling is not None:
        log_H = coupling.log_H.detach()
        spread = float(log_H.max() - log_H.min())
        if spread > REFUSE.get(log_H.dtype, math.inf):
            return f"log H spans {spread:.0f}"
    triangle = getattr(getattr(model, "bp", None), "triangle", None)  # a triangle model's T (gbpn.bp.motifs)
    if triangle is not None:
        spread = triangle.spread()
        if spread > REFUSE.get(triangle.weight.dtype, math.inf):
            return f"the triangle factor's log spans {spread:.0f}"
    return None
