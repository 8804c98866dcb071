"""Tuned GNN baselines: GCN, SAGE and GAT whose depth, width, dropout, learning rate, residual connections and
normalisation (LayerNorm or BatchNorm) are searched on validation under the same budget as GBPN's ``--potential auto --budget``.

The network is :class:`~gbpn.models.encoders.gnn.GNNEncoder` (the stack GBPN's GNN potentials use) trained
alone with cross-entropy, as the strongest GNNs on heterophilous graphs are: an input map, ``L`` PyG
convolutions with optional residual connections and LayerNorm, an output map. ``-sep`` keeps a node's own
representation apart from its neighbours' (no self-loops; its own weight), as GCN-sep and GAT-sep do; SAGE
always does (its root weight).

===========  ======================================
``gcn``      GCN, self-loops (``A + I``)
``gcn-sep``  GCN, separate ego weight
``sage``     GraphSAGE (mean), its root weight
``gat``      GAT (4 heads), self-loops
``gat-sep``  GAT (4 heads), separate ego weight
===========  ======================================

The search (:mod:`gbpn.train.search`) starts from the two-layer setting (2 layers, 256 units, the paper's dropout
rule) and Luo et al.'s deep one (4 layers, residual connections, BatchNorm, dropout 0.7), both at
the space's largest learning rate, and draws the rest from :data:`BASELINE_SPACE` (up to 15 layers, LayerNorm or
BatchNorm); the configuration it keeps trains on to ``epochs`` (with ``patience``) from where its last rung stopped.

The untuned model is the search's incumbent: it trains in full, exactly as its plain row does (``gcn``, ``sage``,
``gat``: the two-layer baselines of :func:`gbpn.baselines.fit_baseline`; ``gcn-sep``, ``gat-sep``: the two-layer
setting at lr 1e-3), and the row keeps whichever of the two scores higher on validation, so a search never ends
below its own default there. Its run counts as one of the budget's: the search spends the other ``budget - 1``
(``budget < 2``: the default alone). Validation scores alone choose: test scores are reported, never read.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.baselines import BASELINES, fit_baseline
from gbpn.baselines.training import checked_inputs, start_full_batch
from gbpn.errors import GBPNError
from gbpn.models.encoders.gnn import GNNEncoder
from gbpn.train.config import check_budget, check_space, default_dropout
from gbpn.train.search import (DEEP, NETWORK_SPACE, SWITCHES, at_fastest_lr, max_configurations, plan, sample,
                               leading_anchors, successive_halving)
from gbpn.train.units import Units

logger = logging.getLogger("gbpn")

TUNED: Dict[str, Tuple[str, bool]] = {"gcn": ("gcn", False), "gcn-sep": ("gcn", True), "sage": ("sage", True),
                                      "gat": ("gat", False), "gat-sep": ("gat", True)}
BASELINE_SPACE: Dict[str, list] = {"num_layers": DEEP, "residual": SWITCHES, "layer_norm": SWITCHES,
                                   "batch_norm": SWITCHES, **NETWORK_SPACE}
_TWO_LAYER = {"num_layers": 2, "residual": False, "layer_norm": False, "batch_norm": False, "hidden": 256, "lr": 1e-3}
# the deep, normalised setting of Luo et al. (their Squirrel GCN): a second anchor
_DEEP = {"num_layers": 4, "residual": True, "layer_norm": False, "batch_norm": True, "hidden": 256, "dropout": 0.7}


def fit_tuned(name: str, data, masks: Tuple[Tensor, Tensor, Tensor], seed: int = 0, epochs: int = 500,
              budget: float = 2.0, patience: Optional[int] = None, metric: str = "accuracy",
              weight_decay: float = 2.5e-4, space: Optional[Dict[str, Sequence]] = None,
              units: Optional[str | Path] = None, return_probs: bool = False, device: str = "cpu"):
    """Search the ``name`` baseline (one of :data:`TUNED`) within ``budget - 1`` plain runs of the configuration kept
    (:mod:`gbpn.train.search`: counted costs; a run counts ``epochs``, or ``2 * patience`` where fewer), train that
    one on to the end, and keep it or the untuned default (the budget's other run), whichever scores higher on
    validation.

    Returns the final training's metrics (``train/val/test_accuracy``, ``metric``'s too, ``best_epoch``,
    ``train_seconds``), the chosen options as ``tuned__<option>`` (``tuned__default``: the default kept),
    ``search_epochs`` (every epoch trained, the final ones included), ``search_seconds``, ``search_configurations``
    (the default counted) and ``search`` (the default's validation score, every configuration's options and
    validation score per rung); with ``return_probs`` also the final model's
    class probabilities ``[N, c]`` (on the CPU). ``units``: a folder keeping finished rungs (an interrupted search
    resumes there). ``device``: where the networks train (``cpu``, ``cuda``, ``cuda:N`` or ``auto``)."""
    if name not in TUNED:
        raise GBPNError(f"unknown tuned baseline {name!r}; choose one of {', '.join(TUNED)}")
    conv, separate = TUNED[name]
    space = {k: list(v) for k, v in (space or BASELINE_SPACE).items()}
    check_space(space, list(BASELINE_SPACE))
    masks, metric, dev, x, y, on_dev = checked_inputs(data, masks, metric, device)
    c = int(data.num_classes)
    check_budget(budget)
    fixed = space.get("dropout", [])  # one choice: the grid's dropout for every model (the plain row's too)
    anchor = {**_TWO_LAYER, "dropout": fixed[0] if len(fixed) == 1 else default_dropout(data.num_features,
                                                                                       int(masks[0].sum()))}
    store = Units(units, {"baseline": name, "epochs": epochs, "budget": budget, "patience": patience, "metric": metric,
                          "weight_decay": weight_decay, "space": space}, seed, masks)
    inputs = GNNEncoder(1, 1, conv, 4, 1, separate=separate).precompute(x, data.edge_index.to(dev))  # once for all

    def start(index: int, params: Dict):
        p = {**anchor, **params}
        torch.manual_seed(seed)
        model = GNNEncoder(data.num_features, c, conv, p["hidden"], p["num_layers"], p["dropout"], p["residual"],
                           p["layer_norm"], separate, batch_norm=p.get("batch_norm", False)).to(dev)
        return start_full_batch(model, lambda: model(inputs), y, on_dev, epochs, p["lr"], weight_decay,
                                f"{name}:tuned [{f'search {index}' if index >= 0 else 'default'}]", patience, metric)

    began = time.perf_counter()
    default, default_probs = _default(name, data, tuple(m.cpu() for m in masks), seed, epochs, patience, metric,
                                      weight_decay, anchor, start, store)
    key = f"val_{metric}"
    record = {"budget": budget, "default": {"val": default[key], "kept": True}}
    metrics, probs = default, default_probs
    if budget >= 2:
        schedule = plan(epochs, budget - 1, patience)
        anchors = [at_fastest_lr({k: v for k, v in {**anchor, **a}.items() if k in space}, space) for a in ({}, _DEEP)]
        configs = sample(space, max_configurations(schedule, len(anchors)), seed, anchors,
                         reads=lambda option, params: option != "batch_norm" or not params.get("layer_norm"))
        chosen, (found, out), search = successive_halving(configs, start, schedule, store, f"{name}:tuned",
                                                          anchors=leading_anchors(configs, anchors))
        record.update(run_epochs=schedule.run, first_epochs=schedule.first, eta=schedule.eta, **search, chosen=chosen)
        kept = found[key] > default[key]  # a tie keeps the default: the search must earn its place
        record["default"]["kept"] = not kept
        logger.info(f"{name}:tuned: the search's configuration scores {100 * found[key]:.2f} on validation, the "
                    f"untuned default {100 * default[key]:.2f}: keeping {'the search' if kept else 'the default'}'s")
        if kept:
            metrics, probs = found, F.softmax(out, dim=-1).cpu()
            metrics.update({f"tuned__{k}": v for k, v in {**anchor, **configs[chosen]}.items()}, tuned__default=False)
        other = search["other_epochs"] + (default["epochs_run"] if kept else found["epochs_run"])
    else:
        other = 0
    metrics.update(baseline=f"{name}:tuned", metric=metric, search_epochs=other + metrics["epochs_run"],
                   search_seconds=time.perf_counter() - began, search_configurations=record.get("admitted", 0) + 1,
                   search=record)
    return (metrics, probs) if return_probs else metrics


def _default(name: str, data, masks, seed: int, epochs: int, patience: Optional[int], metric: str,
             weight_decay: float, anchor: Dict, start: Callable, store: Units) -> Tuple[Dict, Tensor]:
    """The untuned ``name``, trained in full as its plain row is (or read back from ``store``), with its options as
    ``tuned__<option>`` and ``tuned__default``; its metrics and class probabilities ``[N, c]`` (on the CPU)."""
    saved = store.get_torch("default")
    if saved is not None:
        return saved["metrics"], saved["probs"]
    if name in BASELINES:  # gcn, sage, gat: the plain row's own model
        metrics, probs = fit_baseline(name, data, masks, seed=seed, epochs=epochs, weight_decay=weight_decay,
                                      dropout=anchor["dropout"], patience=patience, metric=metric, return_probs=True)
        options = {"num_layers": 2, "hidden": 256, "lr": 1e-3, "dropout": metrics["dropout"]}
    else:  # the -sep variants have no plain row: the two-layer setting at its own learning rate
        metrics, out = start(-1, {}).finish(False)
        probs, options = F.softmax(out, dim=-1).cpu(), anchor
    metrics = {**{k: v for k, v in metrics.items() if k not in ("baseline", "dropout")},
               **{f"tuned__{k}": v for k, v in options.items()}, "tuned__default": True}
    store.put_torch("default", {"metrics": metrics, "probs": probs})
    return metrics, probs
