"""The ``:published`` rows: residual-block GNNs (:class:`~gbpn.models.encoders.residual.ResidualGNN`) trained by
the protocol Platonov et al. (ICLR 2023) published for them, so that a grid compares GBPN with those models as the
literature reports them.

The protocol: width 512, dropout 0.2, AdamW at learning rate 3e-5 without weight decay, 1000 full-batch steps
with the best validation step kept, at each depth of 1-5 blocks; the depth with the best validation score is
reported. Validation alone chooses; test scores are recorded, never read.

============  =========================================
``resnet``    no graph (residual feed-forward blocks)
``gcn``       :math:`D^{-1/2} A D^{-1/2}` aggregation
``sage``      ego and neighbour mean, concatenated
``gat``       GAT attention
``gat-sep``   GAT attention, ego concatenated
``gt``        graph-transformer attention
``gt-sep``    graph-transformer attention, ego concatenated
============  =========================================
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.baselines.training import checked_inputs, start_full_batch
from gbpn.errors import GBPNError
from gbpn.models.encoders.residual import ResidualGNN

PUBLISHED: Dict[str, str] = {"resnet": "none", "gcn": "gcn", "sage": "sage", "gat": "gat", "gat-sep": "gat-sep",
                             "gt": "gt", "gt-sep": "gt-sep"}


@dataclass(frozen=True)
class Protocol:
    """The published training protocol (Platonov et al., 2023), every field as they give it."""

    hidden: int = 512
    dropout: float = 0.2
    lr: float = 3e-5
    weight_decay: float = 0.0
    steps: int = 1000
    depths: Tuple[int, ...] = (1, 2, 3, 4, 5)
    heads: int = 8


def fit_published(name: str, data, masks: Tuple[Tensor, Tensor, Tensor], seed: int = 0,
                  protocol: Protocol = Protocol(), metric: str = "accuracy", device: str = "cpu",
                  return_probs: bool = False, progress: bool = False):
    """Train the ``name`` model (one of :data:`PUBLISHED`) at every depth of ``protocol`` and keep the depth with
    the best validation ``metric`` (ties: the shallower).

    Returns that depth's metrics (``train/val/test_accuracy``, ``metric``'s too, ``best_epoch``,
    ``train_seconds`` summed over the depths), ``published__depth`` and every depth's validation and test
    score as ``depth<L>__val_<metric>`` / ``depth<L>__test_<metric>``; with ``return_probs`` also the kept
    model's class probabilities ``[N, c]`` (on the CPU)."""
    if name not in PUBLISHED:
        raise GBPNError(f"unknown published model {name!r}; choose one of {', '.join(PUBLISHED)}")
    masks, metric, dev, x, y, on_dev = checked_inputs(data, masks, metric, device)
    c = int(data.num_classes)
    inputs = ResidualGNN(1, 1, PUBLISHED[name], 8, 1, heads=1).precompute(x, data.edge_index.to(dev))
    best: Optional[Dict] = None
    per_depth: Dict[str, float] = {}
    seconds = 0.0
    for depth in protocol.depths:
        torch.manual_seed(seed)
        model = ResidualGNN(data.num_features, c, PUBLISHED[name], protocol.hidden, depth, protocol.dropout,
                            protocol.heads).to(dev)
        metrics, out = start_full_batch(model, lambda: model(inputs), y, on_dev, protocol.steps, protocol.lr,
                                        protocol.weight_decay, f"{name}:published [depth {depth}]", None,
                                        metric).finish(progress)
        seconds += metrics["train_seconds"]
        per_depth[f"depth{depth}__val_{metric}"] = metrics[f"val_{metric}"]
        per_depth[f"depth{depth}__test_{metric}"] = metrics[f"test_{metric}"]
        if best is None or metrics[f"val_{metric}"] > best["metrics"][f"val_{metric}"]:
            best = {"metrics": metrics, "out": out, "depth": depth}
    metrics = {**best["metrics"], **per_depth, "train_seconds": seconds, "published__depth": best["depth"],
               "baseline": f"{name}:published", "metric": metric,
               **{f"published__{k}": v for k, v in asdict(protocol).items() if k != "depths"}}
    return (metrics, F.softmax(best["out"], dim=-1).cpu()) if return_probs else metrics


# Luo, Shi & Wu (NeurIPS 2024): each model's published setting per data set (their medium_graph README and run
# script): lr, width, layers, dropout, normalisation, linear skip, epochs, weight decay; Adam, every epoch
# evaluated, the best validation epoch kept.
CLASSIC: Dict[Tuple[str, str], Dict] = {
    ("squirrel-filtered", "gcn"): dict(lr=0.01, hidden=256, num_layers=4, dropout=0.7, norm="batch", residual=True,
                                       epochs=500, weight_decay=5e-4),
    ("squirrel-filtered", "sage"): dict(lr=0.01, hidden=256, num_layers=3, dropout=0.7, norm="batch", residual=True,
                                        epochs=500, weight_decay=5e-4),
    ("squirrel-filtered", "gat"): dict(lr=0.005, hidden=512, num_layers=7, dropout=0.5, norm="batch", residual=True,
                                       epochs=500, weight_decay=5e-4),
    ("chameleon-filtered", "gcn"): dict(lr=0.005, hidden=512, num_layers=5, dropout=0.2, norm="none", residual=False,
                                        epochs=200, weight_decay=1e-3),
    ("chameleon-filtered", "sage"): dict(lr=0.01, hidden=256, num_layers=4, dropout=0.7, norm="batch", residual=True,
                                         epochs=200, weight_decay=1e-3),
    ("chameleon-filtered", "gat"): dict(lr=0.01, hidden=256, num_layers=2, dropout=0.7, norm="batch", residual=True,
                                        epochs=200, weight_decay=1e-3),
}
CLASSIC_MODELS: Tuple[str, ...] = ("gcn", "sage", "gat")


def classic_setting(name: str, dataset: str) -> Dict:
    """The published setting of the classic ``name`` (gcn, sage, gat) on ``dataset``, naming those that have one."""
    if name not in CLASSIC_MODELS:
        raise GBPNError(f"unknown classic model {name!r}; choose one of {', '.join(CLASSIC_MODELS)}")
    if (dataset, name) not in CLASSIC:
        known = sorted({d for d, _ in CLASSIC})
        raise GBPNError(f"{name}:classic runs the setting Luo et al. published per data set, and there is none for "
                        f"{dataset!r} (only {', '.join(known)}); use {name}:tuned to search one")
    return dict(CLASSIC[(dataset, name)])


def fit_classic(name: str, data, masks: Tuple[Tensor, Tensor, Tensor], seed: int = 0, metric: str = "accuracy",
                device: str = "cpu", return_probs: bool = False, progress: bool = False,
                setting: Optional[Dict] = None):
    """Train the deep classic ``name`` (gcn, sage, gat: :class:`~gbpn.models.encoders.classic.ClassicGNN`) with
    the setting Luo et al. published for ``data.name`` (or ``setting``) and return the best validation epoch's
    metrics, with the setting as ``classic__<option>`` columns (``return_probs``: and the class probabilities)."""
    from gbpn.models.encoders.classic import ClassicGNN

    p = setting if setting is not None else classic_setting(name, str(getattr(data, "name", "")))
    masks, metric, dev, x, y, on_dev = checked_inputs(data, masks, metric, device)
    torch.manual_seed(seed)
    model = ClassicGNN(data.num_features, int(data.num_classes), name, p["hidden"], p["num_layers"], p["dropout"],
                       p["residual"], p["norm"] == "layer", p["norm"] == "batch").to(dev)
    inputs = model.precompute(x, data.edge_index.to(dev))
    metrics, out = start_full_batch(model, lambda: model(inputs), y, on_dev, p["epochs"], p["lr"], p["weight_decay"],
                                    f"{name}:classic", None, metric, optimizer="adam").finish(progress)
    metrics.update({f"classic__{k}": v for k, v in p.items()}, baseline=f"{name}:classic", metric=metric)
    return (metrics, F.softmax(out, dim=-1).cpu()) if return_probs else metrics


PUBLISHED_MODELS: Tuple[str, ...] = (*(f"{n}:published" for n in PUBLISHED), *(f"{n}:classic" for n in CLASSIC_MODELS))


def run_published(model: str, data, masks, seed: int, metric: str = "auto", keep: bool = False, device: str = "cpu"):
    """One ``:published`` or ``:classic`` row (:data:`PUBLISHED_MODELS`) of a benchmark grid on one split: its
    metrics, and with ``keep`` ``(metrics, class probabilities)``."""
    name, _, kind = model.partition(":")
    fit = fit_published if kind == "published" else fit_classic
    return fit(name, data, masks, seed=seed, metric=metric, device=device, return_probs=keep)
