"""Scores of predicted log-beliefs against labels."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional

from gbpn.errors import GBPNError

if TYPE_CHECKING:
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


METRICS = ("accuracy", "macro_f1", "roc_auc")


def macro_f1(log_belief: Tensor, y: Tensor, mask: Tensor) -> float:
    """Unweighted mean of the per-class F1 scores (scikit-learn) over the classes present."""
    from sklearn.metrics import f1_score

    if not bool(mask.any()):
        return float("nan")
    return float(f1_score(y[mask].cpu().numpy(), log_belief[mask].argmax(-1).cpu().numpy(), average="macro",
                          zero_division=0))


def roc_auc(log_belief: Tensor, y: Tensor, mask: Tensor) -> float:
    """Area under the ROC curve of class 1's probability (binary labels; scikit-learn);
    NaN where the nodes hold one class only."""
    from sklearn.metrics import roc_auc_score

    yt = y[mask].cpu().numpy()
    if log_belief.size(-1) != 2:
        raise ValueError("ROC AUC is defined here for two classes")
    if len(set(yt.tolist())) < 2:
        return float("nan")
    return float(roc_auc_score(yt, log_belief[mask][:, 1].float().cpu().numpy()))


def score(metric: str, log_belief: Tensor, y: Tensor, mask: Tensor) -> float:
    """``metric`` (one of :data:`METRICS`) of ``log_belief`` on the nodes in ``mask``."""
    return {"accuracy": accuracy, "macro_f1": macro_f1, "roc_auc": roc_auc}[metric](log_belief, y, mask)


def check_metric(metric: str, num_classes: int, dataset: str = "the graph") -> None:
    """:class:`GBPNError` when ``metric`` is not defined for ``num_classes`` classes (ROC AUC here
    needs two)."""
    if metric == "roc_auc" and num_classes != 2:
        raise GBPNError(f"--metric roc_auc is defined here for two classes; {dataset} has {num_classes}: choose "
                        "accuracy, macro_f1 or auto")


def default_metric(y: Tensor, num_classes: int, mask: Optional[Tensor] = None) -> str:
    """``roc_auc`` for binary labels whose minority class is under 30% of the labelled nodes in
    ``mask`` (accuracy hides a poor ranking there), ``accuracy`` otherwise. Runs and grids read it
    once, from their first split's training and validation nodes (no test label takes part), so
    every trial and model of a run is scored alike; without ``mask``, every labelled node."""
    labels = y[y >= 0] if mask is None else y[mask & (y >= 0)]
    if num_classes != 2 or labels.numel() == 0:
        return "accuracy"
    share = float((labels == 1).float().mean())
    return "roc_auc" if min(share, 1 - share) < 0.3 else "accuracy"
