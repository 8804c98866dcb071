r"""Importance sampling of neighbours for mini-batch BP (paper appendix B).

A node :math:`i` that aggregates :math:`d` neighbours drawn i.i.d. from :math:`p` over its
:math:`n = |N(i)|` neighbours, each message re-weighted by :math:`1/(n p_j)`, estimates
:math:`\Omega(y) = \frac{d}{n}\sum_{j \in N(i)} \log m_{j\to i}(y)` without bias. Summed over
the classes, the variance of that estimate is

.. math::
    \mathrm{Var}(p) = \frac{d}{n^2}\Big(\sum_j \frac{g_j^2}{p_j}
        - \sum_y \Big(\sum_j \log m_{j\to i}(y)\Big)^2\Big),
    \qquad g_j^2 = \sum_y \big(\log m_{j\to i}(y)\big)^2,

minimised by :math:`p^*_j \propto g_j` (:func:`optimal_probs`).

Here :math:`\log m` is *centred* over the classes (:func:`centred`). Adding a constant to a
log-message over all classes changes no belief, since beliefs are normalised, but it does
change the variance above; with log-normalised messages that constant (about
:math:`-\log c`) dominates :math:`g_j` and makes every non-uniform :math:`p` look far worse
than it is for the beliefs. Centring measures only the variance that reaches them.

Since :math:`g_j` is seen only for the neighbours actually drawn, :class:`Exp3Sampler`
learns :math:`p` online as a bandit (Exp3 as follow-the-regularised-leader with the entropy
and a time-varying learning rate, Orabona 2019, ch. 7.6 and 10). Per node, the linearised
loss of arm :math:`j` in epoch :math:`\tau` is the gradient of the variance,
:math:`-g_j^2/p_{\tau,j}^2`. Exp3 needs bounded non-negative losses (with negative ones,
the importance-weighted estimate of a rarely drawn arm explodes and the distribution
collapses onto it), so each epoch the gradient is shifted and scaled by its largest
observed magnitude :math:`B_\tau` at that node, which leaves the minimiser unchanged:
:math:`\ell_{\tau,j} = 1 - g_j^2 / (p_{\tau,j}^2 B_\tau) \in [0, 1]`. It is estimated from
the draws as :math:`\tilde\ell_{\tau,j} = \ell_{\tau,j}\,c_j/(d\,p_{\tau,j})` (``c_j``
times drawn), and

.. math::
    p_{\tau+1} \propto \exp\Big(-\eta_{\tau+1} \sum_{s \le \tau} \tilde\ell_s\Big), \qquad
    \eta_{\tau+1} = \sqrt{\frac{\log n}{n\,\tau'}},

where :math:`\tau'` counts the epochs in which the node drew neighbours (the time-varying
rate of Exp3 for losses in [0, 1]), mixed with a fraction ``gamma`` of the uniform
distribution so that every neighbour keeps being explored. A node observed several times in
an epoch (in several trees) averages its estimates into that epoch's one round. (The paper writes the loss with :math:`g_j` in place of :math:`g_j^2`; the
squared form is the gradient of :math:`\mathrm{Var}(p)` that the bound is about.)
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from gbpn.sampling.tree import ComputationTree
from gbpn.graph.csr import CSRGraph


def _rows(graph: CSRGraph) -> Tensor:
    return torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree())


def uniform_probs(graph: CSRGraph) -> Tensor:
    """``[nnz]``: :math:`1/|N(i)|` for every neighbour slot of ``i``."""
    return 1.0 / graph.degree().double()[_rows(graph)]


def centred(log_msg: Tensor) -> Tensor:
    """Log-messages minus their mean over the classes, in float64 (the part beliefs see)."""
    m = log_msg.detach().double()
    return m - m.mean(-1, keepdim=True)


def _moments(log_msg: Tensor, dst: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Per edge :math:`g_j^2`, per node :math:`\sum_y (\sum_j m_j(y))^2` and the in-degree,
    from the centred messages: everything the variance needs besides :math:`p`."""
    m = centred(log_msg)
    g2 = m.pow(2).sum(-1)
    mean_sq = torch.zeros(num_nodes, m.size(1), dtype=torch.float64).index_add_(0, dst, m).pow(2).sum(-1)
    return g2, mean_sq, torch.bincount(dst, minlength=num_nodes).double()


def _optimal(g2: Tensor, deg: Tensor, dst: Tensor) -> Tensor:
    g = g2.sqrt()
    total = torch.zeros(deg.numel(), dtype=torch.float64).index_add_(0, dst, g)
    return torch.where(total[dst] > 0, g / total[dst].clamp_min(1e-300), 1.0 / deg[dst])


def _variance(g2: Tensor, mean_sq: Tensor, deg: Tensor, dst: Tensor, probs: Tensor, fanout: int) -> Tensor:
    second = torch.zeros(deg.numel(), dtype=torch.float64).index_add_(0, dst, g2 / probs.double())
    diff = second - mean_sq
    # The difference cancels to rounding error where the variance is zero in exact arithmetic
    # (under p*, whenever a node's centred messages are parallel, as with c = 2 and one sign);
    # left as is, that noise becomes the denominator of a ratio.
    diff = torch.where(diff > _CANCELLATION * second, diff, torch.zeros_like(diff))
    var = fanout / deg.clamp_min(1).pow(2) * diff
    return torch.where(deg > fanout, var, torch.zeros_like(var))


_CANCELLATION = 1e-9  # relative size below which a float64 difference of moments is noise


def optimal_probs(log_msg: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    r""":math:`p^*_j \propto \sqrt{\sum_y (\log m_{j\to i}(y))^2}` over the incoming edges of each
    node ``i = dst``; rows whose messages are all zero get the uniform distribution.

    Shapes:
        log_msg: ``[E, c]``, dst: ``[E]`` -> ``[E]`` (sums to 1 per ``dst``)
    """
    g2, _, deg = _moments(log_msg, dst, num_nodes)
    return _optimal(g2, deg, dst)


def sampling_variance(log_msg: Tensor, dst: Tensor, probs: Tensor, num_nodes: int, fanout: int) -> Tensor:
    r""":math:`\mathrm{Var}(p)` of each node's importance-weighted estimate from ``fanout`` i.i.d.
    draws (module docstring); nodes with no more than ``fanout`` neighbours keep them all and
    get 0.

    Shapes:
        log_msg: ``[E, c]`` (the message along each edge into ``dst``), dst, probs: ``[E]`` -> ``[N]``
    """
    g2, mean_sq, deg = _moments(log_msg, dst, num_nodes)
    return _variance(g2, mean_sq, deg, dst, probs, fanout)


class Exp3Sampler:
    """Per-node Exp3 distributions over neighbours (module docstring), one probability per
    CSR slot of ``graph``; pass :attr:`probs` to :func:`~gbpn.sampling.sample_tree`.

    Call :meth:`observe` with each sampled tree and the messages BP computed on it, and
    :meth:`end_epoch` once per epoch to update the distributions.

    Args:
        graph: the graph as :class:`~gbpn.sampling.CSRGraph`.
        fanout: neighbours drawn per node, :math:`d`.
        gamma: mixing weight of the uniform distribution. (default: ``0.05``)
    """

    def __init__(self, graph: CSRGraph, fanout: int, gamma: float = 0.05):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if fanout < 1:
            raise ValueError(f"fanout must be positive, got {fanout}")
        self.graph, self.fanout, self.gamma = graph, fanout, gamma
        self.rows = _rows(graph)
        n = graph.num_nodes
        self.cum_loss = torch.zeros(graph.col.numel(), dtype=torch.float64)
        self.probs = uniform_probs(graph)
        self._loss = torch.zeros_like(self.cum_loss)
        self._seen = torch.zeros(n, dtype=torch.float64)
        self._rounds = torch.zeros(n, dtype=torch.float64)
        self.epochs = 0

    @torch.no_grad()
    def observe(self, tree: ComputationTree, log_msg: Tensor) -> None:
        """Record the losses of the drawn neighbours of every tree node.

        ``log_msg`` ``[E_tree, c]`` are the messages along ``tree.edge_index``; the first half
        (child to parent) are the ones each drawn child sent.
        """
        drawn = tree.draw_prob > 0
        if not bool(drawn.any()):
            return
        child_edge = torch.cumsum(tree.parent >= 0, 0) - 1  # tree node -> its child-to-parent edge
        g2 = centred(log_msg[child_edge[drawn]]).pow(2).sum(-1)
        p = tree.draw_prob[drawn]
        slot = tree.slot[drawn]
        parent = tree.parent[drawn]
        grad = g2 / p.pow(2)  # minus the gradient of Var(p)
        scale = scatter(grad, parent, dim=0, dim_size=tree.num_nodes, reduce="max")
        loss = 1.0 - grad / scale[parent].clamp_min(1e-300)
        est = loss / (self.fanout * p)
        self._loss.index_add_(0, slot, est)
        # one observation per drawing tree node, whatever its number of draws
        parents = torch.unique(parent)
        self._seen.index_add_(0, tree.node_map[parents], torch.ones(parents.numel(), dtype=torch.float64))

    @torch.no_grad()
    def end_epoch(self) -> None:
        """Fold the epoch's averaged estimates into the cumulative losses and update :attr:`probs`."""
        seen = self._seen.clamp_min(1)
        self.cum_loss += self._loss / seen[self.rows]
        deg = self.graph.degree().double()
        self._rounds += (self._seen > 0).double()
        eta = torch.sqrt(torch.log(deg.clamp_min(2)) / (deg * self._rounds.clamp_min(1)))
        p = softmax(-eta[self.rows] * self.cum_loss, self.rows, num_nodes=self.graph.num_nodes)
        self.probs = (1 - self.gamma) * p + self.gamma / deg[self.rows]
        self._loss.zero_()
        self._seen.zero_()
        self.epochs += 1


def variance_ratios(log_msg: Tensor, edge_index: Tensor, num_nodes: int, fanout: int,
                    probs_csr: Tensor, graph: CSRGraph) -> Dict[str, float]:
    """Variance of importance sampling with ``probs_csr`` against uniform and optimal
    (:math:`p^*`) sampling (appendix Figure 7), from the full graph's messages ``log_msg``
    along ``edge_index``, over the nodes with more than ``fanout`` neighbours. A ratio whose
    denominator is zero (no variance at all, as under optimal sampling where every message
    points the same way) is NaN.

    For each pair ``a_vs_b`` of ``importance``, ``uniform`` and ``optimal`` it gives the ratio
    of the variances summed over nodes (``total_a_vs_b``) and the median of the per-node
    ratios (``median_a_vs_b``). A mean of per-node ratios is not reported: where every
    neighbour sends the same message (say, training nodes of one class) uniform sampling
    has no variance at all, and any other distribution an unbounded ratio.

    ``probs_csr`` are per-CSR-slot probabilities of ``graph`` (e.g. :attr:`Exp3Sampler.probs`).
    """
    src, dst = edge_index[0], edge_index[1]
    # the CSR slot of edge src -> dst lives in row dst (dst's neighbour src); CSR keys are sorted
    slot = torch.searchsorted(_rows(graph) * num_nodes + graph.col, dst * num_nodes + src)
    g2, mean_sq, deg = _moments(log_msg, dst, num_nodes)  # once for the three distributions
    var = {name: _variance(g2, mean_sq, deg, dst, p, fanout) for name, p in (
        ("importance", probs_csr[slot]), ("uniform", 1.0 / deg[dst]), ("optimal", _optimal(g2, deg, dst)))}
    sampled = deg > fanout
    out: Dict[str, float] = {"nodes": int(sampled.sum())}
    for a, b in (("importance", "optimal"), ("uniform", "optimal"), ("importance", "uniform")):
        va, vb = var[a][sampled], var[b][sampled]
        out[f"total_{a}_vs_{b}"] = float(va.sum() / vb.sum()) if float(vb.sum()) > 0 else math.nan
        ok = vb > 0
        out[f"median_{a}_vs_{b}"] = float((va[ok] / vb[ok]).median()) if bool(ok.any()) else math.nan
    return out
