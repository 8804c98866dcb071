r"""Binary BP in log-odds: the step for two classes, on CPU, forward and backward.

The reference step of :mod:`gbpn.bp.functional` written for :math:`c = 2`, equal to it up to rounding.

With :math:`c = 2` a normalised message is one number, :math:`x = \log m(0) - \log m(1)`, and a
BP step is, per directed edge :math:`i \to j` and per node,

.. math::
    x_{i \to j} = \log\frac{H_{00}\, e^{\xi} + H_{10}}{H_{01}\, e^{\xi} + H_{11}},
    \quad \xi = b_i - w_{j \to i}\, x_{j \to i}, \qquad
    b_i = \phi_i + \sum_{j} w_{j \to i}\, x_{j \to i},

with :math:`b` and :math:`\phi` the log-odds of the belief and the self-potential, :math:`w` the
message weights (default 1) and damping applied to the normalised messages. Half the message
memory of the two-column form and one exponential and one logarithm per message, computed in
vectorised loops over chunks of pairs (``benchmarks/bp_step.py``, README). The pairs of the paired
layout are split across threads, each with its own float64 accumulator row
(:mod:`gbpn.bp.backends._numba.binary_kernels`). Training keeps every step's
messages and beliefs and runs a hand-written backward, one pass over the pairs per step.

No edge weights (:math:`H^{w}` per edge), and messages are returned at inference only;
:class:`~gbpn.bp.layer.BeliefPropagation` uses it for two classes on CPU wherever it applies and the
general kernels otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gbpn.bp.backends.eager import eager_vjp
from gbpn.bp.backends._numba.runtime import _np, _parallel, _threads, self_tested
from gbpn.memory import huge_zeros
from gbpn.graph.layouts import PairLayout, pair_layout
from gbpn.bp.problem import BPProblem, BPResult, Capability, needs_grad, pairable
from gbpn.bp.backends.cpu_fused import numba_reasons


def _kernels():
    import gbpn.bp.backends._numba.binary_kernels as k

    return k


def binary_unavailable() -> Optional[str]:
    """``None`` if the binary kernels run, else why not (warned once)."""
    def test() -> None:
        ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        layout = pair_layout(ei, torch.tensor([1, 0, 3, 2]), 3)
        phi = torch.log_softmax(torch.arange(6, dtype=torch.float64).view(3, 2), -1).requires_grad_()
        log_H = torch.tensor([[0.5, -0.5], [-0.5, 0.5]], dtype=torch.float64, requires_grad=True)
        args = (layout, 2, 0.5, None, torch.tensor([True, False, False]), torch.zeros(3, 2, dtype=torch.float64),
                torch.ones(4, dtype=torch.float64), True)
        with torch.no_grad():
            out, _, _ = binary_bp(phi, log_H, *args, True)
        with torch.enable_grad():
            binary_bp(phi, log_H, *args, False)[0].sum().backward()
        if not (torch.isfinite(out).all() and torch.isfinite(phi.grad).all() and torch.isfinite(log_H.grad).all()):
            raise RuntimeError("binary BP self-test gave non-finite values")

    return self_tested("numba-binary", test, "binary BP kernels")


def _log_pair(odds: Tensor, dtype: torch.dtype) -> Tensor:
    """``[n, 2]`` normalised log-probabilities from log-odds ``[n]``."""
    return torch.stack([-F.softplus(-odds), -F.softplus(odds)], dim=-1).to(dtype)


@dataclass
class _Run:
    """A call's arrays for the kernels (numpy, float64 except the messages)."""

    layout: PairLayout
    pair_blocks: np.ndarray
    node_blocks: np.ndarray
    phi: np.ndarray
    coef: np.ndarray  # (H00, H10, H01, H11) in the messages' dtype: float32 messages are computed in float32
    known: np.ndarray
    clamp: np.ndarray
    mw: np.ndarray
    damping: np.ndarray
    threads: int
    clamp_rows: Optional[Tensor]  # the [N, 2] clamp itself, for the eager double backward


# The least pairs a binary kernel call hands to a thread: each thread also fills an accumulator row
# per node, which the node pass sums, so two threads pay off later than for c >= 3 (K = 5 training
# step, synthetic graphs, torch at two threads: two threads 1.37x one at 19k pairs, 1.10x at 198k,
# 0.81x at 397k).
MIN_PAIRS_PER_THREAD = 1 << 17


def _prepare(phi: Tensor, log_H: Tensor, layout: PairLayout, damping: float, known: Optional[Tensor],
             clamp: Optional[Tensor], message_weight: Optional[Tensor]) -> _Run:
    n, h = phi.size(0), layout.u.shape[0]
    threads = _threads(h, MIN_PAIRS_PER_THREAD)
    f64 = torch.float64
    L = log_H.detach().to(f64)
    H = (L - L.max()).exp()
    mw = message_weight if message_weight is None or layout.perm is None else message_weight.index_select(0, layout.perm)
    return _Run(layout, np.linspace(0, h, threads + 1).round().astype(np.int64),
                np.linspace(0, n, max(1, min(threads, n)) + 1).round().astype(np.int64),
                _np((phi[:, 0] - phi[:, 1]).detach().to(f64)), _np(torch.stack([H[0, 0], H[1, 0], H[0, 1], H[1, 1]]).to(phi.dtype)),
                np.empty(0, np.bool_) if known is None else _np(known.view(-1)),
                np.empty(0) if clamp is None else _np((clamp[:, 0] - clamp[:, 1]).to(f64)),
                np.empty(0) if mw is None else _np(mw.detach().to(f64)), np.array([damping], dtype=np.float64), threads,
                clamp)


def _forward(r: _Run, steps: int, tol: Optional[float], want_res: bool, M: np.ndarray, B: np.ndarray):
    """The steps. ``M`` ``[S, 2h]`` and ``B`` ``[S, N]`` hold messages (row 0 zero: uniform) and beliefs
    (row 0 ``phi``): with ``S = steps + 1`` every step's, with ``S = 1`` updated in place. Returns the
    residuals and the row of the last step."""
    k = _kernels()
    n = B.shape[1]
    acc = np.zeros((r.threads, n))
    Bc = B[0].astype(M.dtype)  # the beliefs the cavities read, in the messages' dtype
    mw = r.mw.astype(M.dtype)
    res = np.empty(n if (want_res or tol is not None) else 0)
    residuals: List[float] = []
    last = 0
    for step in range(steps):
        cur, nxt = (step, step + 1) if M.shape[0] > 1 else (0, 0)
        _parallel(k.messages, r.pair_blocks, (r.layout.u, r.layout.v, Bc, M[cur], M[nxt], acc, mw, r.coef, r.damping),
                  per_block=(5,))
        if nxt != cur:
            B[nxt] = B[cur]  # the residual reads the previous beliefs
        _parallel(k.beliefs, r.node_blocks, (r.phi, acc, B[nxt], Bc, r.known, r.clamp, res))
        last = nxt
        if res.shape[0]:
            residuals.append(float(res.max()) if n else 0.0)
            if tol is not None and residuals[-1] < tol:
                break
    return residuals, last


class _BinaryBP(torch.autograd.Function):
    """Binary BP keeping every step's messages and beliefs, with the hand-written backward of
    :func:`~gbpn.bp.backends._numba.binary_kernels.backward_pairs` (one pass over the pairs per step)."""

    @staticmethod
    def forward(ctx, phi: Tensor, log_H: Tensor, r: _Run, steps: int, tol: Optional[float], want_res: bool):
        n, h = phi.size(0), r.layout.u.shape[0]
        M = huge_zeros(steps + 1, 2 * h, dtype=phi.dtype)
        B = huge_zeros(steps + 1, n, dtype=torch.float64)
        B[0] = torch.from_numpy(r.phi)
        residuals, last = _forward(r, steps, tol, want_res, M.numpy(), B.numpy())
        ctx.r = r
        ctx.save_for_backward(M[: last + 1], B[: last + 1], phi, log_H)
        res = torch.tensor(residuals, dtype=phi.dtype)
        ctx.mark_non_differentiable(res)
        ctx.set_materialize_grads(False)
        return _log_pair(B[last], phi.dtype), res

    @staticmethod
    def backward(ctx, g_b: Optional[Tensor], _g_res):
        M, B, phi, log_H = ctx.saved_tensors
        r: _Run = ctx.r
        steps = M.size(0) - 1
        if g_b is None:
            return None, None, None, None, None, None
        if torch.is_grad_enabled():  # create_graph: the same steps again on the eager path, to any order
            lay = r.layout
            u, v = torch.from_numpy(lay.u).long(), torch.from_numpy(lay.v).long()
            got = eager_vjp(torch.cat([u, v]), torch.cat([v, u]), None,
                            torch.from_numpy(r.mw).to(phi.dtype) if r.mw.shape[0] else None,
                            torch.from_numpy(r.known) if r.known.shape[0] else None, r.clamp_rows, float(r.damping[0]),
                            steps, (phi, log_H, None), ctx.needs_input_grad[:2] + (False,), g_b, None)
            return got[0], got[1], None, None, None, None
        k = _kernels()
        odds = B[steps]
        gm = (g_b[:, 0].double() * torch.sigmoid(-odds) - g_b[:, 1].double() * torch.sigmoid(odds)).numpy()
        if r.known.shape[0]:
            gm[r.known] = 0.0
        gphi = gm.copy()
        G = huge_zeros(M.size(1), dtype=torch.float64).numpy()
        acc = np.zeros((r.threads, phi.size(0)))
        gH = np.zeros((r.threads, 4))
        Mn, Bn = M.numpy(), B.numpy()
        for t in range(steps - 1, -1, -1):
            _parallel(k.backward_pairs, r.pair_blocks, (r.layout.u, r.layout.v, Bn[t], Mn[t], G, gm, acc, gH, r.mw,
                                                        r.coef, r.damping), per_block=(6, 7))
            _parallel(k.backward_nodes, r.node_blocks, (gphi, acc, gm, r.known))
        g = torch.from_numpy(gphi)
        g_phi = torch.stack([g, -g], -1).to(phi.dtype)
        s = gH.sum(0)
        g_H = torch.tensor([[s[0], s[2]], [s[1], s[3]]], dtype=log_H.dtype)
        return (g_phi if ctx.needs_input_grad[0] else None, g_H if ctx.needs_input_grad[1] else None,
                None, None, None, None)


def binary_bp(phi: Tensor, log_H: Tensor, layout: PairLayout, steps: int, damping: float, tol: Optional[float],
              known: Optional[Tensor], clamp: Optional[Tensor], message_weight: Optional[Tensor], want_res: bool,
              want_msg: bool) -> Tuple[Tensor, List[Tensor], Optional[Tensor]]:
    r"""``steps`` BP steps for two classes from the pinned, normalised log self-potentials ``phi``
    ``[N, 2]`` (messages start uniform); gradients flow to ``phi`` and ``log_H`` (message weights are
    constants; the messages are returned only without a gradient). ``message_weight`` is in the
    original edge order. Returns the log-beliefs ``[N, 2]`` (known rows as computed from ``clamp``:
    the caller pins them), the per-step residuals (when ``want_res`` or ``tol``; the run stops once
    one is below ``tol``) and, with ``want_msg``, the log-messages ``[E, 2]`` in the original edge order."""
    r = _prepare(phi, log_H, layout, damping, known, clamp, message_weight)
    if needs_grad(phi, log_H):
        if want_msg:
            raise ValueError("binary_bp returns messages at inference only")
        log_b, res = _BinaryBP.apply(phi, log_H, r, steps, tol, want_res)
        return log_b, list(res.unbind()), None
    h = layout.u.shape[0]
    M = np.zeros((1, 2 * h), dtype=np.dtype(str(phi.dtype).replace("torch.", "")))
    B = r.phi.copy()[None]
    residuals, _ = _forward(r, steps, tol, want_res, M, B)
    log_msg = None
    if want_msg:
        log_msg = _log_pair(torch.from_numpy(M[0]), phi.dtype)
        if layout.perm is not None:
            log_msg = log_msg.new_empty(log_msg.shape).index_copy(0, layout.perm, log_msg)
    return (_log_pair(torch.from_numpy(B[0]), phi.dtype), [torch.tensor(x, dtype=phi.dtype) for x in residuals],
            log_msg)


class CPUBinary(Capability):
    """Two classes on CPU: one log-odds number per message (:func:`binary_bp`)."""

    name = "cpu_binary"
    device_type = "cpu"

    def shape_reasons(self, p: BPProblem) -> List[str]:
        """Why ``p`` does not have the shape these kernels take (what no runtime check changes)."""
        why = []
        if p.num_classes != 2:
            why.append("the log-odds kernels are for two classes")
        if p.edge_weight is not None:
            why.append("edge weights (a per-edge H^w) need the general kernels")
        if p.implicit:
            why.append("backward='implicit' runs on the general kernels")
        if p.return_messages and needs_grad(p.log_self, p.log_H):
            why.append("messages are returned at inference only")
        return why

    def reasons(self, p: BPProblem) -> List[str]:
        """Every shape condition it fails; where the shape fits, the conditions of the compiled
        kernels (:func:`~gbpn.bp.backends.cpu_fused.numba_reasons`, which the next entry lists anyway)."""
        why = self.shape_reasons(p) or numba_reasons(p)
        if not why and not pairable(p):
            why.append("some edge is its own reverse: no paired layout")
        if not why:
            unavailable = binary_unavailable()
            if unavailable is not None:
                why.append(unavailable)
        return why

    def run(self, p: BPProblem) -> BPResult:
        log_belief, residuals, log_msg = binary_bp(
            p.phi(), p.log_H, pair_layout(p.edge_index, p.rev_index, p.num_nodes), p.num_steps, p.damping, p.tol,
            p.known_mask, p.clamp, p.message_weight, p.return_residuals, p.return_messages)
        return BPResult(p.pin(log_belief), residuals, log_msg)
