"""``--potential auto``: the candidate encoders, their names, the choice on validation alone, and the training
of every candidate (:func:`fit_auto`) or of a budgeted search over encoders and hyper-parameters
(:func:`fit_budgeted`, ``--budget``)."""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Callable, Dict, List, Sequence

from gbpn.errors import GBPNError
from gbpn.io import score_or_nan
from gbpn.train.config import OPTIONS, TrainConfig, check_space
from gbpn.train.cost import counted
from gbpn.train.search import (GBPN_SPACE, SEARCH_ANCHORS, applies, at_fastest_lr, leading_anchors,
                               max_configurations, plan, sample, successive_halving)
from gbpn.train.session import TrialResult
from gbpn.train.units import Units

logger = logging.getLogger("gbpn")


def auto_candidates(config: TrainConfig) -> List[TrainConfig]:
    """The configurations ``--potential auto`` compares (:data:`gbpn.models.encoders.AUTO_CANDIDATES`);
    with ``batch_size`` only those that train on sampled trees."""
    from gbpn.models import encoders  # read at call time: tests and studies swap the candidates

    out = []
    for cand in encoders.AUTO_CANDIDATES:
        if config.batch_size is not None and not encoders.spec(cand["potential"]).mini_batch:
            continue
        out.append(replace(config, potential=cand["potential"], separate=cand.get("separate", True)))
    return out


def candidate_name(config: TrainConfig) -> str:
    """``mlp``, ``sign``, ``sign-mixed``, ``sage``, ...: an encoder and whether its channels are separate."""
    mixed = config.potential != "mlp" and not config.separate
    return config.potential + ("-mixed" if mixed else "")


def select_by_validation(val_scores: Sequence[float]) -> int:
    """Index of the best validation score (ties: the earlier, i.e. simpler, candidate; NaN never
    wins). Only validation scores are passed in: test labels never take part."""
    # NaN (e.g. one class in validation; null once read back from JSON) never wins
    vals = [v if v == v else -math.inf for v in map(score_or_nan, val_scores)]
    return max(range(len(vals)), key=lambda i: (vals[i], -i))


def select_candidate(rows: Sequence[Dict], metric: str) -> int:
    """Index of the candidate run with the best validation ``metric``; on validation accuracy where
    no candidate's is defined (ROC AUC of a validation split holding one class), as their epochs were."""
    scores = [score_or_nan(r.get(f"val_{metric}")) for r in rows]
    if all(v != v for v in scores):
        scores = [r.get("val_accuracy") for r in rows]
    return select_by_validation(scores)


def candidate_record(name: str, metrics: Dict, metric: str) -> Dict:
    """What an auto run records of one candidate: its name, validation and test scores (for the
    report; the choice reads validation only)."""
    keys = dict.fromkeys((f"val_{metric}", "val_accuracy", f"test_{metric}", "test_accuracy"))
    return {"potential": name, **{k: metrics[k] for k in keys}}


def candidate_columns(record: Dict) -> Dict:
    """A :func:`candidate_record` as flat columns of a results row: ``<candidate>__<score>``."""
    return {f"{record['potential']}__{k}": v for k, v in record.items() if k != "potential"}


def search_space(config: TrainConfig) -> Dict[str, list]:
    """The space ``--budget`` searches: ``config.search_space``, or :data:`~gbpn.train.search.GBPN_SPACE`;
    with mini-batch training, only the encoders that train on sampled trees."""
    from gbpn.models import encoders

    space = {k: list(v) for k, v in (config.search_space or GBPN_SPACE).items()}
    check_space(space, list(OPTIONS))
    if "potential" not in space:
        raise GBPNError("the search space of --potential auto must list the encoders to try (\"potential\")")
    if config.batch_size is not None:
        space["potential"] = [p for p in space["potential"] if (encoders.spec(p) or encoders.spec("sign")).mini_batch]
    return space


def fit_auto(data, config: TrainConfig, seed: int, masks, progress: bool, desc: str, on_epoch,
             units: Units, fit_one: Callable, start_one: Callable) -> TrialResult:
    """``--potential auto``: every candidate of :func:`auto_candidates` trained in full (``config.budget``
    None), or a search within ``config.budget`` full trainings (:func:`fit_budgeted`). Finished candidates
    and rungs are kept in ``units`` and not trained again."""
    if config.budget is not None:
        return fit_budgeted(data, config, seed, masks, progress, desc, units, start_one)
    candidates, results = auto_candidates(config), []
    for k, cand in enumerate(candidates):
        name = candidate_name(cand)
        saved = units.get_torch(name)
        if saved is not None:
            res = TrialResult(saved["model"], saved["metrics"], masks, saved["history"], cand)
        else:
            res = fit_one(data, cand, seed, masks, progress, f"{desc} [{name}]", on_epoch)
            units.put_torch(name, {"model": res.model, "metrics": res.metrics, "history": res.history})
        results.append(res)
        m = res.metrics  # a line per candidate: one trial of auto trains several models
        logger.info(f"{desc}: potential candidate {k + 1}/{len(candidates)} {name}: val {config.metric} "
                    f"{100 * m[f'val_{config.metric}']:.2f}% ({m['train_seconds']:.0f} s{', kept from before' if saved else ''})")
    best = results[select_candidate([r.metrics for r in results], config.metric)]
    best.metrics["auto_candidates"] = [candidate_record(candidate_name(r.config), r.metrics, config.metric)
                                       for r in results]
    best.metrics["auto_seconds"] = sum(r.metrics["train_seconds"] for r in results)
    return best


def fit_budgeted(data, config: TrainConfig, seed: int, masks, progress: bool, desc: str, units: Units,
                 start_one: Callable) -> TrialResult:
    """Successive halving (:mod:`gbpn.train.search`) over :func:`search_space` within ``config.budget`` full
    trainings, the exhaustive candidates' settings first (at the space's largest learning rate); the configuration left trains on to ``config.epochs``.
    Its metrics record every configuration tried (``auto_search``)."""
    space = search_space(config)
    schedule = plan(config.epochs, config.budget, config.patience)
    anchors = [at_fastest_lr(_params(c, space), space) for c in auto_candidates(config)
               if c.potential in space["potential"]]
    anchors += [at_fastest_lr(_anchor(config, a, space), space) for a in SEARCH_ANCHORS
                if a["potential"] in space["potential"]]
    configs = sample(space, max_configurations(schedule, len(anchors)), seed, anchors,
                     reads=lambda name, params: applies(name, params.get("potential", "mlp"), params))
    logger.info(f"{desc}: searching within {config.budget:g} runs of {schedule.run} epochs: up to {len(configs)} "
                f"configurations, each admitted after its first epoch (which measures its cost) while the planned rungs "
                f"fit; each rung keeps the best 1/{schedule.eta} by validation loss (rounded up) and the best by "
                f"score, the first at epoch {schedule.first}")

    def start(index: int, params: Dict):
        cand = _configured(config, params, config.epochs)
        return start_one(data, cand, seed, masks, f"{desc} [search {index}: {candidate_name(cand)}]")

    chosen, res, search = successive_halving(configs, start, schedule, units, desc, progress, _measure,
                                             anchors=leading_anchors(configs, anchors))
    res.metrics["auto_search"] = {"budget": config.budget, "run_epochs": schedule.run, "first_epochs": schedule.first,
                                  "eta": schedule.eta, **search, "chosen": {"id": chosen, "params": configs[chosen]}}
    res.metrics["search_epochs"] = search["other_epochs"] + res.metrics["epochs_run"]
    res.metrics["auto_seconds"] = search["seconds"]
    res.metrics["search_configurations"] = search["admitted"]
    return res


def _measure(fn: Callable):
    """:func:`~gbpn.train.cost.counted`; under ``torchrun`` rank 0's count, so that every rank admits the same
    configurations (each rank's trees differ, and so do their counts)."""
    from gbpn.distributed import broadcast_object, rank_and_world

    out, cost = counted(fn)
    return out, (broadcast_object(cost) if rank_and_world()[1] > 1 else cost)


def _params(config: TrainConfig, space: Dict[str, list]) -> Dict:
    """The values ``config`` gives the options of ``space`` that its encoder reads."""
    return {name: getattr(config, name) for name in space if applies(name, config.potential)}


def _anchor(config: TrainConfig, anchor: Dict, space: Dict[str, list]) -> Dict:
    """An anchor (:data:`~gbpn.train.search.SEARCH_ANCHORS`) as a search configuration:
    ``config``'s values of the other options ``space`` holds, those its encoder reads."""
    params = {**_params(replace(config, potential=anchor["potential"]), space), **anchor}
    return {k: v for k, v in params.items() if k in space and applies(k, anchor["potential"], params)}


def _configured(config: TrainConfig, params: Dict, epochs: int) -> TrainConfig:
    """``config`` with a search configuration's options and ``epochs``, as one encoder trains."""
    return replace(config, **params, epochs=epochs, budget=None, search_space=None)
