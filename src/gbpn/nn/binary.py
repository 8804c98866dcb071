r"""Binary BP in log-odds: the inference step for two classes, on CPU.

With :math:`c = 2` a normalised message is one number, :math:`x = \log m(0) - \log m(1)`, and a
BP step is, per directed edge :math:`i \to j` and per node,

.. math::
    x_{i \to j} = \log\frac{H_{00}\, e^{\xi} + H_{10}}{H_{01}\, e^{\xi} + H_{11}},
    \quad \xi = b_i - w_{j \to i}\, x_{j \to i}, \qquad
    b_i = \phi_i + \sum_{j} w_{j \to i}\, x_{j \to i},

with :math:`b` and :math:`\phi` the log-odds of the belief and the self-potential, :math:`w` the
message weights (default 1) and damping applied to the normalised messages. Half the message
memory of the two-column form and one exponential and one logarithm per message: on the
arXiv-sized graph the step is several times faster than the general kernels
(``benchmarks/bp_step.py``). The pairs of the paired layout are split across threads, each with its
own float64 accumulator row (:mod:`gbpn.nn._binary_kernels`).

Inference only, without edge weights; :class:`~gbpn.nn.bp.BeliefPropagation` uses it for two classes
on CPU whenever no gradient is needed and the graph has the paired layout (no self-loops), and the
general kernels otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.nn.fused import _np, _parallel, _threads, cached_layout, self_tested
from gbpn.nn.functional import paired_order


@dataclass
class PairLayout:
    """The paired layout: ``perm`` (paired position -> original edge; ``None``: already paired),
    ``u``, ``v`` ``[h]`` the ends of each pair's first edge (int32 when the node ids fit)."""

    perm: Optional[Tensor]
    u: np.ndarray
    v: np.ndarray


def pair_layout(edge_index: Tensor, rev_index: Tensor, num_nodes: int) -> Optional[PairLayout]:
    """The paired layout of a graph (cached), or ``None`` when an edge is its own reverse."""
    def build() -> Optional[PairLayout]:
        E = rev_index.numel()
        h = E // 2
        if 2 * h == E and bool((rev_index == torch.arange(E).roll(h)).all()):
            perm = None
        else:
            perm = paired_order(rev_index)
            if perm is None:
                return None
        src, dst = (edge_index[0], edge_index[1]) if perm is None else (edge_index[0][perm], edge_index[1][perm])
        idx = torch.int32 if num_nodes < 2**31 else torch.int64
        return PairLayout(perm, src[:h].to(idx).numpy().copy(), dst[:h].to(idx).numpy().copy())

    return cached_layout(edge_index, rev_index, ("pairs", num_nodes), build)


def _kernels():
    import gbpn.nn._binary_kernels as k

    return k


def binary_unavailable() -> Optional[str]:
    """``None`` if the binary kernels run, else why not (warned once)."""
    def test() -> None:
        ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        layout = pair_layout(ei, torch.tensor([1, 0, 3, 2]), 3)
        phi = torch.log_softmax(torch.arange(6, dtype=torch.float64).view(3, 2), -1)
        log_H = torch.tensor([[0.5, -0.5], [-0.5, 0.5]], dtype=torch.float64)
        out, _, _ = binary_bp(phi, log_H, layout, 2, 0.5, None, torch.tensor([True, False, False]),
                              torch.zeros(3, 2, dtype=torch.float64), torch.ones(4, dtype=torch.float64), True, True)
        if not torch.isfinite(out).all():
            raise RuntimeError("binary BP self-test gave non-finite beliefs")

    return self_tested("numba-binary", test, "binary BP kernels")


def _log_pair(odds: Tensor, dtype: torch.dtype) -> Tensor:
    """``[n, 2]`` normalised log-probabilities from log-odds ``[n]``."""
    return torch.stack([-F.softplus(-odds), -F.softplus(odds)], dim=-1).to(dtype)


@torch.no_grad()
def binary_bp(phi: Tensor, log_H: Tensor, layout: PairLayout, steps: int, damping: float, tol: Optional[float],
              known: Optional[Tensor], clamp: Optional[Tensor], message_weight: Optional[Tensor], want_res: bool,
              want_msg: bool) -> Tuple[Tensor, List[Tensor], Optional[Tensor]]:
    r"""``steps`` BP steps for two classes from the pinned, normalised log self-potentials ``phi``
    ``[N, 2]`` (messages start uniform). ``message_weight`` is in the original edge order. Returns the
    log-beliefs ``[N, 2]`` (known rows as computed from ``clamp``: the caller pins them), the per-step
    residuals (when ``want_res`` or ``tol``; the run stops once one is below ``tol``) and, with
    ``want_msg``, the log-messages ``[E, 2]`` in the original edge order."""
    k = _kernels()
    dtype = phi.dtype
    n = phi.size(0)
    h = layout.u.shape[0]
    threads = max(1, min(_threads(), h))
    pair_blocks = np.linspace(0, h, threads + 1).round().astype(np.int64)
    node_blocks = np.linspace(0, n, max(1, min(threads, n)) + 1).round().astype(np.int64)
    f64 = torch.float64
    phi_odds = _np((phi[:, 0] - phi[:, 1]).to(f64))
    L = log_H.detach().to(f64)
    H = (L - L.max()).exp()
    coef = np.array([H[0, 0], H[1, 0], H[0, 1], H[1, 1]], dtype=np.float64)
    clamp_odds = np.empty(0) if clamp is None else _np((clamp[:, 0] - clamp[:, 1]).to(f64))
    known_np = np.empty(0, np.bool_) if known is None else _np(known.view(-1))
    mw = np.empty(0) if message_weight is None else _np(
        (message_weight if layout.perm is None else message_weight.index_select(0, layout.perm)).to(f64))
    M = np.zeros(2 * h, dtype=np.dtype(str(dtype).replace("torch.", "")))
    B = phi_odds.copy()
    acc = np.zeros((threads, n))
    res = np.empty(n if (want_res or tol is not None) else 0)
    residuals: List[Tensor] = []
    damp = np.array([damping], dtype=np.float64)
    for _ in range(steps):
        _parallel(k.messages, pair_blocks, (layout.u, layout.v, B, M, acc, mw, coef, damp), per_block=(4,))
        _parallel(k.beliefs, node_blocks, (phi_odds, acc, B, known_np, clamp_odds, res))
        if res.shape[0]:
            residuals.append(torch.tensor(float(res.max()) if n else 0.0, dtype=dtype))
            if tol is not None and float(residuals[-1]) < tol:
                break
    log_msg = None
    if want_msg:
        log_msg = _log_pair(torch.from_numpy(M), dtype)
        if layout.perm is not None:
            log_msg = log_msg.new_empty(log_msg.shape).index_copy(0, layout.perm, log_msg)
    return _log_pair(torch.from_numpy(B), dtype), residuals, log_msg
