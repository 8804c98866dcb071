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
BatchNorm); the configuration it
keeps trains on to ``epochs`` (with ``patience``) from where its last rung stopped. Its validation scores alone choose: test scores are reported, never read.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.baselines.training import checked_inputs, start_full_batch
from gbpn.errors import GBPNError
from gbpn.models.encoders.gnn import GNNEncoder
from gbpn.train.config import check_space, default_dropout
from gbpn.train.search import (DEEP, NETWORK_SPACE, SWITCHES, at_fastest_lr, max_configurations, plan, sample,
                               successive_halving)
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
    """Search the ``name`` baseline (one of :data:`TUNED`) within ``budget`` plain runs of the configuration kept
    (:mod:`gbpn.train.search`: counted costs; a run counts ``epochs``, or ``2 * patience`` where fewer) and train
    that one on to the end.

    Returns the final training's metrics (``train/val/test_accuracy``, ``metric``'s too, ``best_epoch``,
    ``train_seconds``), the chosen options as ``tuned__<option>``, ``search_epochs`` (every epoch trained,
    the final ones included), ``search_seconds``, ``search_configurations`` and ``search`` (every
    configuration's options and validation score per rung); with ``return_probs`` also the final model's
    class probabilities ``[N, c]`` (on the CPU). ``units``: a folder keeping finished rungs (an interrupted search
    resumes there). ``device``: where the networks train (``cpu``, ``cuda``, ``cuda:N`` or ``auto``)."""
    if name not in TUNED:
        raise GBPNError(f"unknown tuned baseline {name!r}; choose one of {', '.join(TUNED)}")
    conv, separate = TUNED[name]
    space = {k: list(v) for k, v in (space or BASELINE_SPACE).items()}
    check_space(space, list(BASELINE_SPACE))
    masks, metric, dev, x, y, on_dev = checked_inputs(data, masks, metric, device)
    c = int(data.num_classes)
    schedule = plan(epochs, budget, patience)
    anchor = {**_TWO_LAYER, "dropout": default_dropout(data.num_features, int(masks[0].sum()))}
    anchors = [at_fastest_lr({k: v for k, v in {**anchor, **a}.items() if k in space}, space) for a in ({}, _DEEP)]
    configs = sample(space, max_configurations(schedule, len(anchors)), seed, anchors,
                     reads=lambda option, params: option != "batch_norm" or not params.get("layer_norm"))
    store = Units(units, {"baseline": name, "epochs": epochs, "budget": budget, "patience": patience, "metric": metric,
                          "weight_decay": weight_decay, "space": space}, seed, masks)
    inputs = GNNEncoder(1, 1, conv, 4, 1, separate=separate).precompute(x, data.edge_index.to(dev))  # once for all

    def start(index: int, params: Dict):
        p = {**anchor, **params}
        torch.manual_seed(seed)
        model = GNNEncoder(data.num_features, c, conv, p["hidden"], p["num_layers"], p["dropout"], p["residual"],
                           p["layer_norm"], separate, batch_norm=p.get("batch_norm", False)).to(dev)
        return start_full_batch(model, lambda: model(inputs), y, on_dev, epochs, p["lr"], weight_decay,
                                f"{name}:tuned [search {index}]", patience, metric)

    chosen, (metrics, out), search = successive_halving(configs, start, schedule, store, f"{name}:tuned")
    metrics.update({f"tuned__{k}": v for k, v in {**anchor, **configs[chosen]}.items()},
                   baseline=f"{name}:tuned", metric=metric, search_epochs=search["other_epochs"] + metrics["epochs_run"],
                   search_seconds=search["seconds"], search_configurations=search["admitted"],
                   search={"budget": budget, "run_epochs": schedule.run, "first_epochs": schedule.first,
                           "eta": schedule.eta, **search, "chosen": chosen})
    return (metrics, F.softmax(out, dim=-1).cpu()) if return_probs else metrics
