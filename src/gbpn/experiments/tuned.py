"""The ``:tuned`` rows of a benchmark grid: a model searched on validation within a budget of plain runs.

``gbpn:tuned`` (and ``gbpn-i:tuned``) is GBPN with ``--potential auto --budget B``: encoders and their
hyper-parameters, K and the coupling's learning rate searched by successive halving. ``gcn:tuned``,
``gcn-sep:tuned``, ``sage:tuned``, ``gat:tuned`` and ``gat-sep:tuned`` are the GNN baselines searched the
same way (:mod:`gbpn.baselines.tuned`). Every row spends at most ``B`` plain runs' epochs (a run counts
``epochs``, or ``2 * patience`` where fewer), its final training counted as one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

from gbpn.baselines.tuned import BASELINE_SPACE, TUNED, fit_tuned
from gbpn.train.auto import search_space
from gbpn.train.config import TrainConfig
from gbpn.train.fit import fit

SUFFIX = ":tuned"
TUNED_MODELS: Tuple[str, ...] = ("gbpn:tuned", "gbpn-i:tuned", *(f"{n}{SUFFIX}" for n in TUNED))


def run_tuned(model: str, data, masks, seed: int, epochs: int, budget: float, patience: Optional[int] = None,
              metric: str = "auto", keep: bool = False, dropout: Optional[float] = None, units: Optional[Path] = None,
              device: str = "cpu"):
    """Search and train one ``:tuned`` row (:data:`TUNED_MODELS`) on one split; its metrics, the chosen
    options as ``tuned__<option>`` columns (GBPN's encoder as ``potential``). ``dropout`` fixes the dropout
    instead of searching it; ``units`` keeps finished rungs (a rerun resumes there); ``device`` is where it trains. With ``keep``,
    ``(metrics, kept)`` as :func:`~gbpn.experiments.grid_models.run_one`."""
    base = model.removesuffix(SUFFIX)
    if base in ("gbpn", "gbpn-i"):
        config = TrainConfig(variant=base, potential="auto", budget=budget, epochs=epochs, patience=patience,
                             metric=metric, dropout=dropout, device=device)
        if dropout is not None:
            config.search_space = {**search_space(config), "dropout": [dropout]}
        res = fit(data, config, seed=seed, masks=masks, units=units)
        metrics = dict(res.metrics)
        chosen = metrics.pop("auto_search")["chosen"]["params"]
        metrics.update({f"tuned__{k}": v for k, v in chosen.items() if k != "potential" and v is not None})
        return (metrics, res) if keep else metrics
    space = None if dropout is None else {**BASELINE_SPACE, "dropout": [dropout]}
    out = fit_tuned(base, data, masks, seed=seed, epochs=epochs, budget=budget, patience=patience, metric=metric,
                    space=space, units=units, return_probs=keep, device=device)
    if keep:
        out[0].pop("search")
        return out
    out.pop("search")
    return out
