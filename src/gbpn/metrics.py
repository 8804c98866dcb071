"""Scores of predicted log-beliefs against labels."""
from __future__ import annotations

from typing import Dict

from torch import Tensor


def f1_with_val_threshold(log_belief: Tensor, y: Tensor, val_mask: Tensor, test_mask: Tensor,
                          positive: int = 1) -> Dict[str, float]:
    """F1 of the ``positive`` class with the decision threshold on its probability chosen to
    maximise F1 on the validation nodes, then applied to the test nodes (paper, Table 5)."""
    from sklearn.metrics import f1_score, precision_recall_curve

    p = log_belief[:, positive].exp().numpy()
    yv, yt = (y[val_mask] == positive).numpy(), (y[test_mask] == positive).numpy()
    prec, rec, thr = precision_recall_curve(yv, p[val_mask.numpy()])
    f1 = 2 * prec * rec / (prec + rec + 1e-12)
    k = int(f1[:-1].argmax()) if thr.size else 0
    t = float(thr[k]) if thr.size else 0.5
    return {"threshold": t, "val_f1": float(f1[k]),
            "test_f1": float(f1_score(yt, p[test_mask.numpy()] >= t, zero_division=0))}


def accuracy(log_belief: Tensor, y: Tensor, mask: Tensor) -> float:
    if not bool(mask.any()):
        return float("nan")
    return float((log_belief[mask].argmax(-1) == y[mask]).float().mean())
