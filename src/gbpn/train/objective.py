"""The training objective: the (degree-tempered) marginal likelihood of known labels (paper 2.2, 2.4)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.graph.degree import degree


def degree_temperature(edge_index: Tensor, num_nodes: int) -> Tensor:
    r""":math:`\alpha_i = d_i^{-1/2}` (isolated nodes get 1)."""
    return degree(edge_index, num_nodes).clamp_min(1).float().pow(-0.5)


def marginal_nll(log_belief: Tensor, y: Tensor, alpha: Optional[Tensor] = None,
                 class_weight: Optional[Tensor] = None) -> Tensor:
    r"""Mean negative log marginal likelihood of ``y``.

    With ``alpha`` the belief is re-weighted as in paper section 2.4,
    :math:`\log p'_i(y) \cong \alpha_i \log p_i(y)` (then normalised), which
    tempers the confidence that BP builds up on high-degree nodes. ``class_weight``
    ``[c]`` weights each node's term by its class (for imbalanced labels).
    """
    if alpha is not None:
        log_belief = F.log_softmax(alpha.unsqueeze(-1) * log_belief, dim=-1)
    return F.nll_loss(log_belief, y, weight=class_weight)


def balanced_class_weight(y: Tensor, num_classes: int) -> Tensor:
    """``n / (c * n_k)`` for each class ``k`` among the given labels (classes absent get 0)."""
    counts = torch.bincount(y, minlength=num_classes).float()
    return torch.where(counts > 0, y.numel() / (num_classes * counts.clamp_min(1)), torch.zeros_like(counts))


def empirical_coupling(edge_index: Tensor, y: Tensor, mask: Tensor, num_classes: int) -> Tensor:
    r"""Coupling estimated from the edges whose two ends are both in ``mask``:
    :math:`H_{ab} = P(a, b) / (P(a) P(b))` (pointwise mutual information, add-one smoothed).
    """
    both = mask[edge_index[0]] & mask[edge_index[1]]
    a, b = y[edge_index[0, both]], y[edge_index[1, both]]
    counts = torch.ones(num_classes, num_classes, dtype=torch.float64)
    counts.index_put_((a, b), torch.ones(a.numel(), dtype=torch.float64), accumulate=True)
    joint = counts / counts.sum()
    marg = joint.sum(1)
    H = joint / (marg.unsqueeze(1) * marg.unsqueeze(0))
    return (0.5 * (H + H.T)).float()
