r"""Fused BP kernels on CPU: one pass over the edges per step, forward and backward.

They compute the reference step of :mod:`gbpn.bp.functional` (:func:`~gbpn.bp.functional.log_messages`
then :func:`~gbpn.bp.functional.aggregate`) up to rounding.

The eager step of :class:`~gbpn.bp.layer.BeliefPropagation` is a chain of about a dozen whole-array
passes over ``[E, c]``. Here a step is one numba kernel (:mod:`gbpn.bp.backends._numba.fused_kernels`): the edges
are sorted by destination once (:func:`~gbpn.graph.layouts.csr_layout`, cached per graph), and for every node, over its
incoming edges, the cavity, the product with :math:`H`, the normalisation, the damping and the
belief are computed in one pass, parallel over nodes with no write conflicts. Messages and beliefs
stay in the linear domain (divisions instead of exponentials per edge; the belief is a float64
product of the incoming messages, one logarithm per node and class). On large graphs the layout
also renumbers the nodes (reverse Cuthill-McKee, :func:`~gbpn.graph.layouts.locality_order`) and sorts each node's
incoming edges by source, so that the rows a node gathers (its neighbours' beliefs, the reverse
messages) lie near each other in memory; node-indexed inputs and outputs are permuted at the
boundary, so callers see the graph's own numbering.

Training runs the :math:`K` steps inside one :class:`torch.autograd.Function` that keeps every
step's beliefs and what the step's backward reads: undamped, its cavities in edge order (the
backward recomputes each message from its cavity) and, from ``_BLAS_CLASSES`` classes on where
memory allows (:func:`keeps_messages`), its messages and normalisers too, so that the backward
reads them instead of a product with :math:`H` per edge; damped, its messages. The backward is a
hand-written vector-Jacobian product, again one node-parallel pass per step:
the contributions to source-side quantities are gathered through the reverse edges (the reverse of
an incoming edge of ``i`` is an outgoing edge of ``i``) instead of scattered.

numba is imported lazily; :func:`fused_unavailable` compiles and runs the kernels once on a tiny
graph and, if numba is missing or fails, warns once and reports why, so the layer falls back to the
eager path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from gbpn.memory import available_memory, huge_empty, huge_zeros
from gbpn.bp.implicit import FALLBACK_STEPS, ImplicitStats
from gbpn.graph.layouts import CSRLayout, csr_layout
from gbpn.bp.backends._numba.runtime import _np, _parallel, _threads, self_tested
from gbpn.bp.problem import needs_grad
from gbpn.bp.backends.eager import eager_vjp
from gbpn.bp.problem import (BPProblem, BPResult, Capability, compiled_reasons, csr_ordered, edge_ordered,
                             reverse_pairs)

# Opt-in: with a positive share, training from ``_BLAS_CLASSES`` classes on keeps every step's messages
# for the backward while they take at most that share of the memory available (:func:`keeps_messages`):
# a K = 5 training step in 0.80-0.97 of the time at c = 12, 40 and 47 for 40-50% more peak memory
# (benchmarks/bp_step.py --keep-messages; README, issue 16). Off by default for that memory, and because
# float32 gradients then differ from the default path's in the last bits.
KEEP_MESSAGES_FRACTION = 0.0

def _kernels():
    import gbpn.bp.backends._numba.fused_kernels as k

    return k


def fused_unavailable(dtype: torch.dtype) -> Optional[str]:
    """``None`` if the fused kernels run for ``dtype``, else why not (warned once per reason)."""
    return self_tested(f"numba-{dtype}", lambda: _self_test(dtype), "fused BP kernels")


def _self_test(dtype: torch.dtype) -> None:
    """Compile (or load from numba's cache) and run both kernels on a 3-node path with every option on."""
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    rev = torch.tensor([1, 0, 3, 2])
    layout = csr_layout(ei, rev, 3)
    phi = torch.log_softmax(torch.arange(6, dtype=dtype).view(3, 2), -1).requires_grad_()
    log_H = torch.tensor([[0.5, -0.5], [-0.5, 0.5]], dtype=dtype, requires_grad=True)
    known = torch.tensor([True, False, False])
    clamp = torch.zeros(3, 2, dtype=dtype)
    with torch.enable_grad():
        _self_test_runs(phi, log_H, layout, known, clamp)
    if not (torch.isfinite(phi.grad).all() and torch.isfinite(log_H.grad).all()):
        raise RuntimeError("fused BP self-test gave non-finite gradients")


def _self_test_runs(phi: Tensor, log_H: Tensor, layout: "CSRLayout", known: Tensor, clamp: Tensor) -> None:
    dtype = phi.dtype
    for damping in (0.0, 0.5):  # the backward from saved cavities, and from saved messages
        for ew, mw in ((None, None), (torch.full((4,), 0.5, dtype=dtype, requires_grad=True),
                                      torch.full((4,), 2.0, dtype=dtype))):
            out, _, _ = fused_bp(phi, log_H, layout, 2, damping, None, known, clamp, ew, mw, True, False)
            out.sum().backward()


def _abs_max(a: np.ndarray) -> float:
    """The largest ``|a|`` (NaN if ``a`` holds one; 0 if empty), without a temporary array."""
    return float(torch.linalg.vector_norm(torch.from_numpy(a), math.inf)) if a.size else 0.0


@dataclass
class _Graph:
    """Everything a kernel call needs besides the per-step state, as numpy arrays."""

    layout: CSRLayout
    blocks: np.ndarray
    known: np.ndarray
    clamp: np.ndarray
    H: np.ndarray
    HT: np.ndarray
    Hrow: np.ndarray
    L: np.ndarray
    damping: np.ndarray
    ew: np.ndarray
    mw: np.ndarray
    span: int


def _graph(log_H: Tensor, layout: CSRLayout, damping: float, known: Optional[Tensor], clamp: Optional[Tensor],
           ew: Optional[Tensor], mw: Optional[Tensor], dtype: torch.dtype) -> _Graph:
    L = (log_H.detach() - log_H.detach().amax()).to(dtype)
    H = L.exp()
    # every message is >= min H^w / (c max H^w): products of `span` of them stay above 1e-260 in float64
    spread = float(-L.min()) * (1.0 if ew is None or not ew.numel() else max(1.0, float(ew.detach().abs().max())))
    span = int(max(1, min(32, 600 // (spread + math.log(L.size(0)) + 1))))
    empty = np.empty(0, dtype=np.dtype(str(dtype).replace("torch.", "")))
    blocks = layout.blocks(_threads(layout.src.shape[0] * L.size(0)))
    return _Graph(layout, blocks, np.empty(0, np.bool_) if known is None else _np(known.view(-1)),
                  empty.reshape(0, 0) if clamp is None else _np(clamp.to(dtype)), _np(H), _np(H.T), _np(H.sum(1)), _np(L),
                  np.array([damping], dtype=empty.dtype), empty if ew is None else _np(ew.to(dtype)),
                  empty if mw is None else _np(mw.to(dtype)), span)


def keeps_messages(steps: int, E: int, c: int, dtype: torch.dtype) -> bool:
    """Whether an undamped, unweighted training forward keeps every step's messages and normalisers
    (opt-in, :data:`KEEP_MESSAGES_FRACTION` > 0)
    besides its cavities, so that the backward reads them instead of recomputing the product with H:
    only where that product is a BLAS call on edge-major chunks (from ``_BLAS_CLASSES`` classes on;
    below, the recompute costs no more than the read, measured) and the ``(K - 1) E c`` more numbers
    fit in :data:`KEEP_MESSAGES_FRACTION` of the memory available now."""
    if KEEP_MESSAGES_FRACTION <= 0 or c < _kernels()._BLAS_CLASSES or steps < 1:
        return False
    extra = ((steps - 1) * c + steps) * E * torch.finfo(dtype).bits // 8
    return extra <= KEEP_MESSAGES_FRACTION * available_memory()


def _run_forward(phi: Tensor, g: _Graph, steps: int, tol: Optional[float], want_res: bool, save: bool):
    """The steps; returns log-beliefs, residuals, messages, linear and log beliefs, cavities and
    inverse normalisers.

    Without ``save``: the last messages and beliefs, no cavities. With ``save`` (for the backward):
    every step's beliefs and, undamped, every step's cavities (``[K, E, c]``, which the backward
    reads in edge order instead of gathering) with the last messages, or, where
    :func:`keeps_messages`, every step's messages (``[K + 1, E, c]``) and inverse normalisers
    (``[K, E]``) too; damped, every step's messages (the damping's backward reads them) and no
    cavities."""
    k = _kernels()
    n, c = phi.shape
    E = g.layout.src.shape[0]
    damped = float(g.damping[0]) > 0
    keep_z = save and not damped and not g.ew.shape[0] and keeps_messages(steps, E, c, phi.dtype)
    keep_msgs = save and (damped or keep_z)
    # every buffer is written whole (a step writes every edge's message and cavity, every node's
    # belief) before it is read: none is zeroed. Without keeping every step's messages, two separate
    # message buffers: the caller keeps the last and the other is freed
    M = huge_empty(steps + 1, E, c, dtype=phi.dtype) if keep_msgs else [huge_empty(E, c, dtype=phi.dtype)
                                                                         for _ in range(2)]
    C = huge_empty(steps, E, c, dtype=phi.dtype) if save and not damped else None
    Z = huge_empty(steps, E, dtype=phi.dtype) if keep_z else None
    slots = steps + 1 if save else 2
    B = huge_empty(slots, n, c, dtype=phi.dtype)
    b = huge_empty(slots, n, c, dtype=phi.dtype)
    M[0].fill_(1.0 / c)
    b[0] = phi.detach()
    B[0] = b[0].exp()
    res_node = np.empty(n if (want_res or tol is not None) else 0, dtype=_np(phi).dtype)
    no_cav = np.empty((0, c), dtype=res_node.dtype)
    no_z = np.empty(0, dtype=res_node.dtype)
    residuals: List[Tensor] = []
    Mn = M.numpy() if keep_msgs else [m.numpy() for m in M]
    Bn, bn = B.numpy(), b.numpy()
    Cn = None if C is None else C.numpy()
    Zn = None if Z is None else Z.numpy()
    phi_np = _np(phi)
    lay = g.layout
    m_last = s_last = 0
    for step in range(steps):
        m_cur, m_nxt = (step, step + 1) if keep_msgs else (step % 2, (step + 1) % 2)
        s_cur, s_nxt = (step, step + 1) if save else (step % 2, (step + 1) % 2)
        _parallel(k.forward_step, g.blocks, (lay.rowptr, lay.src, lay.rev, phi_np, g.known, g.clamp, bn[s_cur],
                                             Bn[s_cur], Mn[m_cur], Mn[m_nxt], bn[s_nxt], Bn[s_nxt], res_node, g.H, g.HT,
                                             g.L, g.damping, g.ew, g.mw, g.span, no_cav if Cn is None else Cn[step],
                                             no_z if Zn is None else Zn[step]),
                  classes=c)
        m_last, s_last = m_nxt, s_nxt
        if res_node.shape[0]:
            residuals.append(torch.tensor(float(res_node.max()) if n else 0.0, dtype=phi.dtype))
            if tol is not None and float(residuals[-1]) < tol:
                break
    done = len(residuals) if tol is not None else steps
    if not save:
        return b[s_last].clone(), residuals, M[m_last], B[s_last].clone(), b[s_last].clone(), None, None  # others freed
    return (b[done].clone(), residuals, M[: done + 1] if keep_msgs else M[m_last], B[: done + 1], b[: done + 1],
            None if C is None else C[:done], None if Z is None else Z[:done])


class _FusedBP(torch.autograd.Function):
    """``K`` fused steps with the hand-written backward of :func:`~gbpn.bp.backends._numba.fused_kernels.backward_step`."""

    @staticmethod
    def forward(ctx, phi: Tensor, log_H: Tensor, ew: Optional[Tensor], g: _Graph, steps: int, tol: Optional[float],
                want_res: bool, want_msg: bool):
        log_b, residuals, M, B, b, C, Z = _run_forward(phi, g, steps, tol, want_res, save=True)
        ctx.g, ctx.steps = g, B.size(0) - 1
        kept = M.dim() == 3  # every step's messages, else the last
        # what the backward reads per step: the cavities (undamped), every step's messages (damped), or both
        # with the normalisers
        ctx.save_for_backward(M if kept else None, C, Z, B, b, phi, log_H, ew)
        res = torch.stack(residuals) if residuals else phi.new_zeros(0)
        msg = (M[-1] if kept else M).log() if want_msg else phi.new_zeros(0)
        ctx.mark_non_differentiable(res)
        ctx.set_materialize_grads(False)
        return log_b, msg, res

    @staticmethod
    def backward(ctx, g_b: Optional[Tensor], g_msg: Optional[Tensor], _g_res):
        M, C, Z, B, b, phi, log_H, ew = ctx.saved_tensors
        g: _Graph = ctx.g
        steps = ctx.steps
        if torch.is_grad_enabled():  # create_graph: differentiate the same steps again, eagerly, to any order
            return _eager_backward(ctx, g, steps, phi, log_H, ew, g_b, g_msg)
        Mn, Cn, Zn = (None if x is None else x.numpy() for x in (M, C, Z))
        Bn, bn = B.numpy(), b.numpy()
        adj = _Adjoint(g, g_b, g_msg)
        for t in range(steps, 0, -1):
            if Cn is None:
                adj.step(Bn[t], bn[t - 1], Bn[t - 1], Mn[t - 1], Mn[t], first=t == steps)
            elif Zn is None:
                adj.step(Bn[t], bn[t - 1], Bn[t - 1], None, None, first=t == steps, C=Cn[t - 1])
            else:
                adj.step(Bn[t], bn[t - 1], Bn[t - 1], None, Mn[t], first=t == steps, C=Cn[t - 1], Z=Zn[t - 1])
        if steps:  # b^0 = phi is read by the first step's cavities
            _parallel(_kernels().gather_reverse, adj.blocks, (g.layout.rowptr, g.layout.rev, adj.Gv_next,
                                                              adj.Gphi.numpy()))
        return adj.grads(ctx.needs_input_grad[:3]) + (None,) * 5


class _Adjoint:
    """The buffers of the hand-written backward (:func:`~gbpn.bp.backends._numba.fused_kernels.backward_step`) and
    the gradients they accumulate: of the potentials (``Gphi``), of :math:`H` (``GL``, per block)
    and of the edge weights (``Gw``); ``Gv_next`` holds the last step's cavity gradients."""

    def __init__(self, g: _Graph, g_b: Optional[Tensor], g_msg: Optional[Tensor] = None, buffers: int = 2):
        c = g.H.shape[0]
        n, E = g.layout.rowptr.shape[0] - 1, g.layout.src.shape[0]
        np_dtype = g.H.dtype
        dtype = torch.from_numpy(g.H).dtype
        self.g, self.c = g, c
        self.blocks = g.blocks  # the forward's: the same threads and node blocks
        self.Gb = np.zeros((n, c), np_dtype) if g_b is None else _np(g_b).astype(np_dtype, copy=False)
        if g_msg is not None and g_msg.numel():
            self.D = _np(g_msg).astype(np_dtype)
        else:  # the damping's share of the message gradient, carried to the step before; none: empty
            self.D = huge_zeros(E if float(g.damping[0]) > 0 else 0, c, dtype=dtype).numpy()
        self.Gphi = torch.zeros(n, c, dtype=dtype)
        self.GL = np.zeros((self.blocks.shape[0] - 1, c, c), np.float64)
        self.Gw = np.zeros(E if g.ew.shape[0] else 0, np.float64)
        # unrolled (two buffers), the last step's backward reads no cavity gradients and each step
        # writes all of them; the implicit series (one buffer, its terms updated in place by
        # adjoint_pairs) reads them from its first term
        self.Gv_next = (huge_empty if buffers == 2 else huge_zeros)(E, c, dtype=dtype).numpy()
        self.Gv_cur = huge_empty(E, c, dtype=dtype).numpy() if buffers == 2 else None
        self.gz = np.empty((n, c), np_dtype)
        self.none = np.empty((0, c), np_dtype)  # an array argument the kernel does not read
        self.no_z = np.empty(0, np_dtype)

    def reset(self) -> None:
        """Zero the accumulated gradients and the cavity gradients."""
        for a in (self.D, self.Gphi.numpy(), self.GL, self.Gw, self.Gv_next):
            a.fill(0)

    def step(self, B_t, b_prev, B_prev, M_prev, M_t, first: bool, C: Optional[np.ndarray] = None,
             Z: Optional[np.ndarray] = None) -> None:
        """Back through one step (``first``: the last step, read by the loss only); from its saved
        cavities ``C`` (undamped; then ``M_prev`` is not read, nor ``M_t`` unless the inverse
        normalisers ``Z`` come with it) or its messages."""
        g, lay = self.g, self.g.layout
        M_prev, M_t, C = (self.none if a is None else a for a in (M_prev, M_t, C))
        Z = self.no_z if Z is None else Z
        _parallel(_kernels().backward_step, self.blocks,
                  (lay.rowptr, lay.src, lay.rev, lay.dst, g.known, B_t, b_prev, B_prev, M_prev, M_t, self.Gb,
                   self.Gv_next, self.Gv_cur, self.D, self.Gphi.numpy(), self.gz, self.GL, self.Gw, g.H, g.HT,
                   g.Hrow, g.L, g.damping, g.ew, g.mw, first, C, Z),
                  per_block=(16,), classes=self.c)  # GL
        self.Gv_next, self.Gv_cur = self.Gv_cur, self.Gv_next

    def term(self, b, B, M, first: bool, exact: bool) -> None:
        """One term of the implicit series at the fixed point ``(b, B, M)``, in place in ``Gv_next``
        (``first``: from the loss's gradient; ``exact``: ``M`` may be off the fixed point)."""
        g, lay = self.g, self.g.layout
        k = _kernels()
        _parallel(k.adjoint_nodes, self.blocks, (lay.rowptr, lay.rev, g.known, B, self.Gb, self.Gv_next, self.gz,
                                                 self.Gphi.numpy(), first))
        _parallel(k.adjoint_pairs, self.blocks,
                  (lay.rowptr, lay.src, lay.rev, lay.dst, b, B, M, self.gz, self.Gv_next, self.D, self.GL, self.Gw,
                   g.H, g.HT, g.Hrow, g.L, g.damping, g.ew, g.mw, exact),
                  per_block=(10,), classes=self.c)  # GL

    def grads(self, needs: Tuple[bool, ...]) -> Tuple[Optional[Tensor], ...]:
        """The gradients of ``(phi, log_H, edge_weight)`` where ``needs``."""
        dtype = self.Gphi.dtype
        G_H = torch.from_numpy(self.GL.sum(0)).to(dtype)
        if not self.g.ew.shape[0]:  # d/dlog H of H = exp(log H - const)
            G_H = G_H * torch.from_numpy(self.g.H)
        return (self.Gphi if needs[0] else None, G_H if needs[1] else None,
                torch.from_numpy(self.Gw).to(dtype) if needs[2] else None)


class _FusedImplicit(torch.autograd.Function):
    """Fused steps to the fixed point, differentiated implicitly (:mod:`gbpn.bp.implicit`)."""

    @staticmethod
    def forward(ctx, phi: Tensor, log_H: Tensor, ew: Optional[Tensor], g: _Graph, max_steps: int, tol: float,
                stats: ImplicitStats):
        log_b, residuals, M, B, b, _, _ = _run_forward(phi, g, max_steps, tol, True, save=False)
        ctx.converged = bool(residuals) and float(residuals[-1]) < tol
        stats.record_forward(len(residuals), ctx.converged)
        ctx.g, ctx.tol, ctx.max_steps, ctx.stats = g, tol, max_steps, stats
        ctx.save_for_backward(M, B, b, phi, log_H, ew)
        res = torch.stack(residuals) if residuals else phi.new_zeros(0)
        ctx.mark_non_differentiable(res)
        ctx.set_materialize_grads(False)
        return log_b, res

    @staticmethod
    def backward(ctx, g_b: Optional[Tensor], _g_res):
        if torch.is_grad_enabled():
            raise RuntimeError("backward='implicit' gives first-order gradients only (create_graph=True needs "
                               "backward='unroll')")
        M, B, b, phi, log_H, ew = ctx.saved_tensors
        g, stats = ctx.g, ctx.stats
        Mn, Bn, bn = M.numpy(), B.numpy(), b.numpy()
        adj = _Adjoint(g, g_b, buffers=1)

        k = _kernels()

        def series(terms: int, tol: Optional[float], exact: bool) -> Tuple[bool, int]:
            """The backward of up to ``terms`` steps at the fixed point (all alike), the first from the loss;
            with ``tol``, stops once the carried gradients (cavities, damping) fall below ``tol`` times
            their largest so far. Returns whether it stopped so, and the terms that stayed finite."""
            adj.reset()
            top = 0.0
            for j in range(terms):
                adj.term(bn, Bn, Mn, first=j == 0, exact=exact)
                size = max(_abs_max(adj.Gv_next), _abs_max(adj.D))
                if not math.isfinite(size):
                    return False, j
                stats.adjoint_steps += j > 0  # the first step is the loss's own, not an adjoint term
                top = max(top, size)
                if tol is not None and size <= tol * top:
                    return True, j + 1
            return False, terms

        stats.backward_calls += 1
        converged = ctx.converged and series(ctx.max_steps + 1, ctx.tol, False)[0]
        if not converged:  # the gradient of FALLBACK_STEPS steps unrolled from the last iterate
            stats.fallbacks += 1
            finite = series(FALLBACK_STEPS, None, True)[1]
            if finite < FALLBACK_STEPS:  # without the term that overflowed, as the eager pass does
                series(finite, None, True)
        stats.adjoint_converged += converged
        # the first of those steps read b = pin(normalise(phi + sum of log m*)), m* held constant
        _parallel(k.adjoint_nodes, adj.blocks, (g.layout.rowptr, g.layout.rev, g.known, Bn, adj.Gb, adj.Gv_next,
                                                adj.gz, adj.Gphi.numpy(), False))
        return adj.grads(ctx.needs_input_grad[:3]) + (None,) * 4


def fused_implicit_bp(phi: Tensor, log_H: Tensor, layout: CSRLayout, max_steps: int, damping: float, tol: float,
                      known: Optional[Tensor], clamp: Optional[Tensor], edge_weight: Optional[Tensor],
                      message_weight: Optional[Tensor], stats: ImplicitStats) -> Tuple[Tensor, List[Tensor]]:
    r"""BP as :func:`fused_bp` until the largest belief change is below ``tol`` (at most ``max_steps``),
    differentiated at that fixed point by the implicit function theorem: the backward sums the
    series of :func:`fused_bp`'s backward steps, all taken at the fixed point, until a term is below
    ``tol`` relative (at most ``max_steps`` terms; the fallback of :mod:`gbpn.bp.implicit` when the
    forward or that series does not converge). Memory: the fixed point's messages and one ``[E, c]``
    gradient buffer, updated in place (two with damping), whatever the number of steps. Returns the
    log-beliefs and the per-step residuals; ``stats`` counts the passes."""
    phi, known, clamp = (layout.to_layout(x) for x in (phi, known, clamp))
    g = _graph(log_H, layout, damping, known, clamp, edge_weight, message_weight, phi.dtype)
    log_b, res = _FusedImplicit.apply(phi, log_H, edge_weight, g, max_steps, tol, stats)
    return layout.from_layout(log_b), list(res.unbind())


def _eager_backward(ctx, g: _Graph, steps: int, phi: Tensor, log_H: Tensor, ew: Optional[Tensor],
                    g_b: Optional[Tensor], g_msg: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    """The backward for ``create_graph=True``: :func:`eager_vjp` of the same steps."""
    lay = g.layout
    got = eager_vjp(torch.from_numpy(lay.src), torch.from_numpy(lay.dst), torch.from_numpy(lay.rev),
                    torch.from_numpy(g.mw) if g.mw.shape[0] else None,
                    torch.from_numpy(g.known) if g.known.shape[0] else None, torch.from_numpy(g.clamp),
                    float(g.damping[0]), steps, (phi, log_H, ew), ctx.needs_input_grad[:3], g_b, g_msg)
    return got + (None,) * 5


def fused_bp(phi: Tensor, log_H: Tensor, layout: CSRLayout, steps: int, damping: float, tol: Optional[float],
             known: Optional[Tensor], clamp: Optional[Tensor], edge_weight: Optional[Tensor],
             message_weight: Optional[Tensor], want_res: bool, want_msg: bool
             ) -> Tuple[Tensor, List[Tensor], Optional[Tensor]]:
    r"""``steps`` BP steps of :class:`~gbpn.bp.layer.BeliefPropagation` from the pinned, normalised log
    self-potentials ``phi`` (:math:`b^0`), with the messages initialised to :math:`1/c`.

    ``edge_weight`` and ``message_weight`` are in CSR order (``layout.perm``); gradients flow to
    ``phi``, ``log_H`` and ``edge_weight`` (message weights are constants). Returns the log-beliefs
    ``[N, c]``, the per-step residuals (when ``want_res`` or ``tol``; the run stops once one is below
    ``tol``) and, with ``want_msg``, the final log-messages ``[E, c]`` in CSR order.
    """
    dtype = phi.dtype
    train = needs_grad(phi, log_H, edge_weight)
    phi, known, clamp = (layout.to_layout(x) for x in (phi, known, clamp))
    g = _graph(log_H, layout, damping, known, clamp, edge_weight, message_weight, dtype)
    if train:
        log_b, msg, res = _FusedBP.apply(phi, log_H, edge_weight, g, steps, tol, want_res, want_msg)
        return layout.from_layout(log_b), list(res.unbind()), (msg if want_msg else None)
    with torch.no_grad():
        log_b, residuals, M, _, _, _, _ = _run_forward(phi, g, steps, tol, want_res, save=False)
    return layout.from_layout(log_b), residuals, (M.log() if want_msg else None)


def numba_reasons(p: BPProblem) -> List[str]:
    """Why no numba kernel (this module's or the two-class ones) runs ``p``: the conditions of every
    compiled kernel, the CPU, and (checked last, where nothing else declines: it compiles the kernels
    on an install's first run) the kernels' one-time self-test."""
    why = compiled_reasons(p)
    if p.device.type != "cpu":
        why.append("runs on CPU")
    if not why:
        unavailable = fused_unavailable(p.dtype)
        if unavailable is not None:
            why.append(unavailable)
    return why


class CPUFused(Capability):
    """Any number of classes on CPU: one numba pass over the edges per step, forward and backward
    (:func:`fused_bp`), and the implicit backward in place (:func:`fused_implicit_bp`)."""

    name = "cpu_fused"
    device_type = "cpu"

    def reasons(self, p: BPProblem) -> List[str]:
        why = numba_reasons(p)
        if not why and p.implicit and not reverse_pairs(p):
            why.append("backward='implicit' on the fused kernels needs each edge paired with its own reverse edge")
        return why

    def run(self, p: BPProblem) -> BPResult:
        layout = csr_layout(p.edge_index, p.rev_index, p.num_nodes)
        ew, mw = csr_ordered(p.edge_weight, layout.perm), csr_ordered(p.message_weight, layout.perm)
        if p.implicit:
            stats = p.implicit_stats if p.implicit_stats is not None else ImplicitStats()
            log_belief, residuals = fused_implicit_bp(p.phi(), p.log_H, layout, p.num_steps, p.damping, p.tol,
                                                      p.known_mask, p.clamp, ew, mw, stats)
            return BPResult(log_belief, residuals, None, stats)
        log_belief, residuals, log_msg = fused_bp(p.phi(), p.log_H, layout, p.num_steps, p.damping, p.tol, p.known_mask,
                                                  p.clamp, ew, mw, p.return_residuals, p.return_messages)
        return BPResult(log_belief, residuals, edge_ordered(log_msg if p.return_messages else None, layout.perm))
