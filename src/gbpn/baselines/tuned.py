"""Tuned GNN baselines: GCN, SAGE and GAT whose depth, width, dropout, learning rate, residual connections and
LayerNorm are searched on validation under the same budget as GBPN's ``--potential auto --budget``.

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

The search (:mod:`gbpn.train.search`) starts from the two-layer setting (2 layers, 256 units, lr 1e-3, the
paper's dropout rule) and draws the rest from :data:`BASELINE_SPACE`; the configuration it keeps is trained
for the full ``epochs``. Its validation scores alone choose: test scores are reported, never read.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.baselines.training import train_full_batch
from gbpn.data.features import prepare_features
from gbpn.data.splits import check_masks
from gbpn.errors import GBPNError
from gbpn.models.encoders.gnn import GNNEncoder
from gbpn.train.config import default_dropout
from gbpn.train.metrics import METRICS, default_metric
from gbpn.train.search import DEPTHS, NETWORK_SPACE, SWITCHES, check_space, plan, sample, successive_halving
from gbpn.train.units import Units

logger = logging.getLogger("gbpn")

TUNED: Dict[str, Tuple[str, bool]] = {"gcn": ("gcn", False), "gcn-sep": ("gcn", True), "sage": ("sage", True),
                                      "gat": ("gat", False), "gat-sep": ("gat", True)}
BASELINE_SPACE: Dict[str, list] = {"num_layers": DEPTHS, "residual": SWITCHES, "layer_norm": SWITCHES, **NETWORK_SPACE}
_TWO_LAYER = {"num_layers": 2, "residual": False, "layer_norm": False, "hidden": 256, "lr": 1e-3}


def fit_tuned(name: str, data, masks: Tuple[Tensor, Tensor, Tensor], seed: int = 0, epochs: int = 500,
              budget: float = 2.0, patience: Optional[int] = None, metric: str = "accuracy",
              weight_decay: float = 2.5e-4, space: Optional[Dict[str, Sequence]] = None,
              units: Optional[str | Path] = None, return_probs: bool = False):
    """Search the ``name`` baseline (one of :data:`TUNED`) within ``budget`` plain runs' epochs
    (:func:`gbpn.train.search.plan`: a run counts ``epochs``, or ``2 * patience`` where fewer) and train the configuration kept in full.

    Returns the final training's metrics (``train/val/test_accuracy``, ``metric``'s too, ``best_epoch``,
    ``train_seconds``), the chosen options as ``tuned__<option>``, ``search_epochs`` (every epoch trained,
    the final ones included), ``search_seconds``, ``search_configurations`` and ``search`` (every
    configuration's options and validation score per rung); with ``return_probs`` also the final model's
    class probabilities ``[N, c]``. ``units``: a folder keeping finished rungs (an interrupted search
    resumes there)."""
    if name not in TUNED:
        raise GBPNError(f"unknown tuned baseline {name!r}; choose one of {', '.join(TUNED)}")
    conv, separate = TUNED[name]
    space = {k: list(v) for k, v in (space or BASELINE_SPACE).items()}
    check_space(space, list(BASELINE_SPACE))
    masks = check_masks(masks, data.y)
    c = int(data.num_classes)
    if metric == "auto":
        metric = default_metric(data.y, c, masks[0] | masks[1])
    if metric not in METRICS:
        raise GBPNError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)} or auto")
    schedule = plan(epochs, budget, patience)
    anchor = {**_TWO_LAYER, "dropout": default_dropout(data.num_features, int(masks[0].sum()))}
    configs = sample(space, schedule.configurations, seed, [{k: v for k, v in anchor.items() if k in space}])
    store = Units(units, {"baseline": name, "epochs": epochs, "budget": budget, "patience": patience, "metric": metric,
                          "weight_decay": weight_decay, "space": space}, seed, masks)
    x = prepare_features(data.x)
    inputs = GNNEncoder(1, 1, conv, 4, 1, separate=separate).precompute(x, data.edge_index)  # once for every run

    def train(params: Dict, run_epochs: int, desc: str):
        p = {**anchor, **params}
        torch.manual_seed(seed)
        model = GNNEncoder(data.num_features, c, conv, p["hidden"], p["num_layers"], p["dropout"], p["residual"],
                           p["layer_norm"], separate)
        return train_full_batch(model, lambda: model(inputs), data.y, masks, run_epochs, p["lr"], weight_decay,
                                False, desc, patience, metric)

    def rung(index: int, params: Dict, run_epochs: int) -> Dict:
        key = f"config{index}-epochs{run_epochs}"
        unit = store.get(key)
        if unit is None:
            try:
                m, _ = train(params, run_epochs, f"{name}:tuned [search {index}]")
                unit = {"val": m.get(f"val_{m.get('selected_on', metric)}"), "epochs_run": m["epochs_run"],
                        "seconds": m["train_seconds"]}
            except GBPNError as err:  # a diverging configuration loses; the search goes on
                logger.warning(f"{name}:tuned: search configuration {index} {params} failed: {err}")
                unit = {"val": None, "epochs_run": run_epochs, "seconds": 0.0, "error": str(err)}
            store.put(key, unit)
        return unit

    start = time.perf_counter()
    chosen, records = successive_halving(configs, schedule.rungs, rung, f"{name}:tuned")
    metrics, out = train(configs[chosen], epochs, f"{name}:tuned")
    searched = [u for r in records for u in r["rungs"]]
    metrics.update({f"tuned__{k}": v for k, v in {**anchor, **configs[chosen]}.items()},
                   baseline=f"{name}:tuned", metric=metric,
                   search_epochs=sum(u["epochs_run"] for u in searched) + metrics["epochs_run"],
                   search_seconds=time.perf_counter() - start, search_configurations=len(configs),
                   search={"budget": budget, "budget_epochs": schedule.budget_epochs,
                           "run_epochs": schedule.run,
                           "planned_epochs": schedule.epochs, "configurations": records, "chosen": chosen})
    return (metrics, F.softmax(out, dim=-1)) if return_probs else metrics
