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
from torch import Tensor
from tqdm.auto import tqdm

from gbpn.bp.layer import BeliefPropagation, warm_up
from gbpn.bp.numerics import REFUSE
from gbpn.bp.validation import NonFinitePotentialError
from gbpn.errors import GBPNError
from gbpn.progress import step as progress_step
from gbpn.train.metrics import score

logger = logging.getLogger("gbpn")


def optimizer_step(opt: torch.optim.Optimizer, loss: Tensor) -> float:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


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
    train_mask, val_mask, test_mask = masks
    select = metric
    if metric == "roc_auc" and y[val_mask].unique().numel() == 1:
        select = "accuracy"  # NaN every epoch would keep the first epoch, whatever it scores
        logger.warning(f"{desc}: the validation nodes hold one class, so their ROC AUC is undefined: epochs are "
                       "selected on validation accuracy")
    key = f"val_{select}"
    best: Dict[str, float] = {key: -math.inf}
    best_state, best_out = None, None
    history: List[Dict[str, float]] = []
    bp = getattr(model, "bp", None)
    if isinstance(bp, BeliefPropagation) and bp.coupling.log_H.device.type == "cpu":
        warm_up(bp.num_classes)  # the CPU kernels' one-time load is not training time
    start = time.perf_counter()
    bar = tqdm(range(epochs), desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True)
    diverged_at = None
    for epoch in bar:
        progress_step(epoch + 1, epochs)  # for the heartbeat line of a long run in a log (gbpn.progress)
        why = None
        try:
            model.train()
            loss = train_epoch(epoch)
            if not math.isfinite(loss):
                why = diverged(model) or f"the loss is {loss}"
            else:
                model.eval()
                with torch.no_grad():
                    out = evaluate(epoch)
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
            if best_state is None:
                raise GBPNError(f"{desc}: training diverged at epoch {epoch + 1} ({why}); {advice}")
            logger.warning(f"{desc}: training diverged at epoch {epoch + 1} ({why}): stopped there, keeping the best "
                           f"epoch before it ({best['epoch'] + 1}); {advice}")
            diverged_at = epoch + 1
            break
        row = {"epoch": epoch, "loss": loss}
        for name in dict.fromkeys(("accuracy", metric)):
            for split, mask in zip(("train", "val", "test"), masks):
                row[f"{split}_{name}"] = score(name, out, y, mask)
        history.append(row)
        if row[key] > best[key] or best_state is None:
            best, best_out = dict(row), out
            best_state = copy.deepcopy(model.state_dict())
        bar.set_postfix(loss=f"{row['loss']:.3f}", val=f"{100 * row[key]:.1f}%", best=f"{100 * best[key]:.1f}%")
        if patience is not None and epoch - best["epoch"] >= patience:
            break
    bar.close()
    metrics = {k: v for k, v in best.items() if k not in ("epoch", "loss")}
    metrics.update(best_epoch=best["epoch"], epochs_run=len(history), train_seconds=time.perf_counter() - start)
    if metric != "accuracy":
        metrics["metric"] = metric
    if select != metric:
        metrics["selected_on"] = select
    if diverged_at is not None:
        metrics["diverged_at"] = diverged_at
    model.load_state_dict(best_state)
    return metrics, best_out, history


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
