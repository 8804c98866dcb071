"""The models a benchmark grid can name, and one run of one: GBPN variants (``gbpn``, ``gbpn-i``, ``gbpn:<potential>``,
``gbpn-triangle``), the baselines (full batch and mini-batch), the ``:tuned``, published and exact-BP models; an auto
model's row composed from its candidates' rows.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from gbpn.baselines.published import PUBLISHED_MODELS, run_published
from gbpn.errors import GBPNError
from gbpn.experiments.motifs import EXACT_MODELS, exact_bp, triangle_fit, triangle_variant
from gbpn.experiments.tuned import TUNED_MODELS, run_tuned
from gbpn.models.encoders.registry import BLOCK_ENCODERS
from gbpn.train.auto import auto_candidates, candidate_columns, candidate_name, candidate_record, select_candidate
from gbpn.train.config import TrainConfig
from gbpn.train.fit import fit

GBPN_MODELS = ("gbpn-i", "gbpn")
# a GBPN variant per potential encoder: "gbpn:sign", "gbpn-i:sage", "gbpn:gcn-mixed", "gbpn:auto", ...
POTENTIALS = ("mlp", "sign", "sign-mixed", "gcn", "gcn-mixed", "sage", "gat", "gat-mixed", "classic-gcn", "classic-sage",
              "classic-gat", *BLOCK_ENCODERS, "dagnn", "linkx", "auto")


def gbpn_config(model: str, **kw) -> Optional[TrainConfig]:
    """The :class:`TrainConfig` of a GBPN model name (``gbpn``, ``gbpn-i``, ``gbpn:<potential>``),
    or None for a baseline's name."""
    variant, _, potential = model.partition(":")
    motifs = triangle_variant(variant)  # gbpn-triangle[<cap>]: the same with --motifs triangle (gbpn.experiments.motifs)
    if motifs is not None:
        variant, cap = motifs
        kw = {**kw, "motifs": "triangle", "max_triangles_per_node": cap}
    if variant not in GBPN_MODELS or (potential and potential not in POTENTIALS):
        return None
    potential = potential or "mlp"
    return TrainConfig(variant=variant, potential=potential.removesuffix("-mixed"),
                       separate=not potential.endswith("-mixed"), **kw)
BASELINE_MODELS = ("mlp", "gcn", "sage", "gat", "gmnn", "dagnn", "lp", "cs")
LARGE_MODELS = ("sage-sampled", "gat-sampled", "cluster-gcn")  # mini-batch; --epochs counts passes over the data



def run_one(model: str, data, masks, seed: int, epochs: int, batch_size: Optional[int] = None,
            patience: Optional[int] = None, metric: str = "auto", keep: bool = False,
            dropout: Optional[float] = None, budget: float = 2.0, units: Optional[Path] = None, device: str = "cpu"):
    """Train and score one model on one split; returns its metrics. ``batch_size`` trains
    GBPN on sampled trees (T = 2, d = 5) instead of full-batch; ``patience`` stops full-batch
    runs early; ``dropout`` overrides the default rule for every model. With ``keep``, returns ``(metrics, kept)``: GBPN's :class:`~gbpn.train.fit.TrialResult`,
    a full-batch baseline's class probabilities ``[N, c]``, ``None`` for the mini-batch baselines.
    ``budget``: the full trainings a ``:tuned`` model's search spends (:mod:`gbpn.experiments.tuned`), ``units``
    the folder keeping its finished rungs (an interrupted run resumes there). ``device``: where GBPN and the
    ``:tuned`` models train (the other baselines train on the CPU)."""
    if model in PUBLISHED_MODELS:
        return run_published(model, data, masks, seed, metric, keep, device)
    if model in TUNED_MODELS:
        return run_tuned(model, data, masks, seed, epochs, budget, patience, metric, keep, dropout, units, device)
    config = gbpn_config(model, epochs=epochs, batch_size=batch_size, num_hops=2 if batch_size else None,
                         patience=patience, metric=metric, dropout=dropout, device=device)
    if model in EXACT_MODELS:
        metrics = exact_bp(model, data, masks)
        return (metrics, None) if keep else metrics
    if config is not None:
        res = fit(data, config, seed=seed, masks=masks)
        metrics = {**res.metrics, **triangle_fit(res.model, data)}
        # the candidates of --potential auto as numeric columns (the choice stays a name)
        for cand in metrics.pop("auto_candidates", []):
            metrics.update(candidate_columns(cand))
        return (metrics, res) if keep else metrics
    if model in BASELINE_MODELS:
        from gbpn.baselines import fit_baseline

        return fit_baseline(model, data, masks, seed=seed, epochs=epochs, patience=patience, metric=metric,
                            return_probs=keep, dropout=dropout)
    if model in LARGE_MODELS:
        from gbpn.baselines.large import fit_large_baseline

        metrics = fit_large_baseline(model, data, masks, seed=seed, epochs=epochs, batch_size=batch_size or 1024)
        return (metrics, None) if keep else metrics
    raise GBPNError(f"unknown model {model!r}; choose from {', '.join(_model_names())}")


def auto_members(model: str, batch_size: Optional[int] = None) -> Optional[List[Tuple[str, str]]]:
    """For ``<variant>:auto``: ``(grid model, candidate name)`` of every candidate it chooses from
    (the MLP candidate is the plain variant, ``gbpn``); None for any other model."""
    config = gbpn_config(model, batch_size=batch_size)
    if config is None or config.potential != "auto":
        return None
    names = [candidate_name(c) for c in auto_candidates(config)]
    return [(config.variant if n == "mlp" else f"{config.variant}:{n}", n) for n in names]


def compose_auto(members: List[Tuple[str, str]], rows: List[Dict], metric: str) -> Dict:
    """The metrics of an auto run from its candidates' rows (same seed and split): the candidate
    with the best validation ``metric`` (:func:`~gbpn.train.auto.select_candidate`), its name as
    ``potential``, and every candidate's scores as ``<candidate>__<score>`` columns."""
    pick = select_candidate(rows, metric)
    skip = ("dataset", "model", "trial", "seed", "split", "seconds", "imported")
    metrics = {k: v for k, v in rows[pick].items() if k not in skip}
    metrics["potential"] = members[pick][1]
    for (_, name), r in zip(members, rows):
        metrics.update(candidate_columns(candidate_record(name, r, metric)))
    if all("seconds" in r for r in rows):
        metrics["seconds"] = sum(r["seconds"] for r in rows)
    return metrics


def _model_names() -> List[str]:
    return [*GBPN_MODELS, *(f"{v}:<{'|'.join(POTENTIALS)}>" for v in GBPN_MODELS), *BASELINE_MODELS, *LARGE_MODELS,
            *TUNED_MODELS, *PUBLISHED_MODELS]


def check_model(model: str) -> None:
    """Refuse a name that is no model of a grid, listing the names there are."""
    known = BASELINE_MODELS + LARGE_MODELS + TUNED_MODELS + EXACT_MODELS + PUBLISHED_MODELS
    if gbpn_config(model) is None and model not in known:
        raise GBPNError(f"unknown model {model!r}; choose from {', '.join(_model_names())}")
