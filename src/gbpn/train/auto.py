"""``--potential auto``: the candidate encoders, their names, and the choice on validation alone."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Sequence

from gbpn.io import score_or_nan
from gbpn.train.config import TrainConfig


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
