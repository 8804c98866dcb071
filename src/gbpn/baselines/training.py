"""Shared pieces of the baseline training loops: input dropout, soft cross-entropy and
full-batch training with model selection on validation accuracy.

The protocol is the paper's (section 4.2, appendix A.2): AdamW, full-batch steps,
negative log-likelihood on the training nodes, and the parameters of the epoch
with the best validation accuracy are kept (ties keep the earlier epoch).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.train.metrics import accuracy, score
from gbpn.models.mlp import dropout as _dropout
from gbpn.train.loop import Selection, optimizer_step
from gbpn.train.session import Session

Masks = Tuple[Tensor, Tensor, Tensor]


def feature_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout (:func:`gbpn.models.mlp.dropout`) that also accepts sparse COO features
    (only stored values are dropped)."""
    return _dropout(x, p, training)


def soft_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    r"""Mean of :math:`-\sum_y t_i(y) \log \mathrm{softmax}(z_i)_y` over the rows (``target`` rows sum to 1)."""
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def split_metrics(out: Tensor, y: Tensor, masks: Masks, metric: str = "accuracy") -> Dict[str, float]:
    """Accuracy of ``out.argmax(-1)`` on the train / validation / test masks, and ``metric``
    (:func:`gbpn.train.metrics.score`) there too when it is another one."""
    out_metrics = {f"{split}_accuracy": accuracy(out, y, m) for split, m in zip(("train", "val", "test"), masks)}
    if metric != "accuracy":
        out_metrics.update({f"{split}_{metric}": score(metric, out, y, m)
                            for split, m in zip(("train", "val", "test"), masks)})
    return out_metrics


def better(row: Dict[str, float], best: Optional[Dict[str, float]], metric: str = "accuracy") -> bool:
    """Strictly higher validation ``metric`` than ``best`` (``None``: always)."""
    return best is None or row[f"val_{metric}"] > best[f"val_{metric}"]


def checked_inputs(data, masks: Masks, metric: str, device: str = "cpu"):
    """What a full-batch baseline trains on, checked: ``(masks, metric, device, x, y, masks on the device)``. The
    masks cover ``data.y``; ``metric`` ``"auto"`` resolves (:func:`gbpn.train.metrics.default_metric`) and an
    unknown one is refused; ``x`` holds the prepared features (:func:`gbpn.data.features.prepare_features`)."""
    from gbpn.data.features import prepare_features
    from gbpn.data.splits import check_masks
    from gbpn.errors import GBPNError
    from gbpn.train.config import resolve_device
    from gbpn.train.metrics import METRICS, default_metric

    masks = check_masks(masks, data.y)
    if metric == "auto":
        metric = default_metric(data.y, int(data.num_classes), masks[0] | masks[1])
    if metric not in METRICS:
        raise GBPNError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)} or auto")
    dev = resolve_device(device)
    return masks, metric, dev, prepare_features(data.x).to(dev), data.y.to(dev), tuple(m.to(dev) for m in masks)


def train_full_batch(
    model: nn.Module,
    forward: Callable[[], Tensor],
    y: Tensor,
    masks: Masks,
    epochs: int,
    lr: float,
    weight_decay: float,
    progress: bool = False,
    desc: str = "baseline",
    patience: Optional[int] = None,
    metric: str = "accuracy",
) -> Tuple[Dict[str, float], Tensor]:
    """Full-batch AdamW on the NLL of the training nodes; keep the best validation epoch
    (by ``metric``, see :func:`gbpn.train.loop.train_with_selection`).

    Args:
        model: the network; its parameters are optimised and, at the end, reset
            to those of the best validation epoch.
        forward: computes logits (or log-probabilities) ``[N, c]`` for every node
            with ``model`` in its current mode.
        y: labels ``[N]``.
        masks: ``(train, val, test)`` boolean masks.
        patience: stop after this many epochs without a better validation accuracy.

    Returns:
        The metrics of the best epoch (``train/val/test_accuracy``, ``best_epoch``,
        ``train_seconds``) and the evaluation-mode output of that epoch.
    """
    return start_full_batch(model, forward, y, masks, epochs, lr, weight_decay, desc, patience, metric).finish(progress)


def start_full_batch(model: nn.Module, forward: Callable[[], Tensor], y: Tensor, masks: Masks, epochs: int, lr: float,
                     weight_decay: float, desc: str = "baseline", patience: Optional[int] = None,
                     metric: str = "accuracy", optimizer: str = "adamw") -> Session:
    """:func:`train_full_batch`, built and not yet trained (seed torch before): ``.finish()`` trains it and returns
    its ``(metrics, best_out)``; a budgeted search advances it a few epochs at a time. ``optimizer``: ``adamw``
    (decoupled weight decay) or ``adam`` (weight decay as an L2 term in the gradient, as some published
    protocols train)."""
    train_idx = masks[0].nonzero().view(-1)
    opt = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer](model.parameters(), lr=lr,
                                                                           weight_decay=weight_decay)
    selection = Selection(model, lambda epoch: optimizer_step(opt, F.cross_entropy(forward()[train_idx], y[train_idx])),
                          lambda epoch: forward(), y, masks, epochs, desc, patience, metric)
    return Session(selection, model, opt, lambda sel: sel.result()[:2], cuda=y.is_cuda)
