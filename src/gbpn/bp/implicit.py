r"""Implicit differentiation of belief propagation at its fixed point.

BP's messages :math:`m` are iterated without recording a graph (by the layer's inference path) to a
fixed point :math:`m^\star = F(m^\star; \theta)` of one step :math:`F` (:func:`~gbpn.bp.functional.log_messages` after the beliefs of
:class:`~gbpn.bp.layer.BeliefPropagation`), where :math:`\theta` are the log self-potentials, the
coupling and the edge and message weights. By the implicit function theorem (as in Deep
Equilibrium Models, Bai, Kolter & Koltun 2019) a loss :math:`L(m^\star)` with
:math:`g = \partial L / \partial m^\star` has

.. math::
    \frac{dL}{d\theta} = u\,\frac{\partial F}{\partial \theta}\Big|_{m^\star}, \qquad
    u = g + u\,\frac{\partial F}{\partial m}\Big|_{m^\star},

and the adjoint :math:`u` is found by the fixed-point iteration
:math:`u_{k+1} = g + u_k\,\partial F/\partial m` (summed as a Neumann series), one
vector-Jacobian product of a single step each: hand-written for the plain step
(:func:`bp_linearization`), by autograd on one recorded step otherwise
(:func:`autograd_linearization`). Neither pass keeps the iterates: memory is one step's activations plus a few ``[E, c]``
buffers, whatever the number of iterations. Both iterations contract at the same rate (the
spectral radius of :math:`\partial F/\partial m` at the fixed point), so they take about as
many steps.

On CPU, wherever the fused kernels apply, the layer runs the same computation in
:func:`gbpn.bp.backends.cpu_fused.fused_implicit_bp` instead: the forward is the fused inference step, and each
term of the series is one fused backward step taken at the fixed point, with the loss entering the
first. Those terms live on the cavities, one ``[E, c]`` buffer updated in place (a pair of reverse
edges is read, then written, together), and add the gradients of the potentials and of
:math:`H` as they go, so the fixed-point messages and that buffer are all it holds.

Fallback: when the forward did not reach its tolerance within its budget, or the adjoint
iteration did not (or stopped being finite), the adjoint is truncated after
:data:`FALLBACK_STEPS` terms, :math:`u = g \sum_{k < K} (\partial F/\partial m)^k`: at a fixed
point exactly the gradient of :math:`K` unrolled steps, and finite whatever the spectral
radius. :class:`ImplicitStats` counts how often that happened.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from gbpn.bp.functional import _apply_reverse, aggregate, cavity

# terms of the truncated adjoint used as fallback: the paper's K = 5 unrolled steps
FALLBACK_STEPS = 5


@dataclass
class ImplicitStats:
    """Counters of the implicit passes of a layer (training steps only; inference is not counted)."""

    forward_calls: int = 0
    forward_steps: int = 0
    forward_converged: int = 0
    backward_calls: int = 0
    adjoint_steps: int = 0
    adjoint_converged: int = 0
    fallbacks: int = 0

    def record_forward(self, steps: int, converged: bool) -> None:
        self.forward_calls += 1
        self.forward_steps += steps
        self.forward_converged += converged

    def summary(self) -> Dict[str, float]:
        """Fractions converged and mean steps per call (a pass not run yet is left out)."""
        out: Dict[str, float] = {}
        if self.forward_calls:
            out.update(forward_converged_frac=self.forward_converged / self.forward_calls,
                       forward_steps_mean=self.forward_steps / self.forward_calls)
        if self.backward_calls:
            out.update(adjoint_converged_frac=self.adjoint_converged / self.backward_calls,
                       adjoint_steps_mean=self.adjoint_steps / self.backward_calls,
                       fallback_frac=self.fallbacks / self.backward_calls)
        return out


BeliefFn = Callable[..., Tensor]  # belief(m, *params) -> [N, c]
MessageFn = Callable[..., Tensor]  # message(belief, m, *params) -> [E, c]
# vjp(d, final) -> (d dF/dm, None), or with final=True (None, the gradients of the params); it may overwrite d
VJP = Callable[[Tensor, bool], Tuple[Optional[Tensor], Optional[Tuple[Optional[Tensor], ...]]]]
Linearization = Callable[..., VJP]  # linearize(m, needs, *params) -> vjp at m


def autograd_linearization(belief: BeliefFn, message: MessageFn) -> Linearization:
    """VJPs of the step ``F(m) = message(belief(m, *params), m, *params)`` by autograd: one step's
    graph is recorded once and differentiated again for every product."""

    def linearize(m: Tensor, needs: Sequence[bool], *params: Optional[Tensor]) -> VJP:
        with torch.enable_grad():
            m = m.detach().requires_grad_()
            inputs = [None if p is None else p.detach().requires_grad_(need) for p, need in zip(params, needs)]
            out = message(belief(m, *inputs), m, *inputs)

        def vjp(d: Tensor, final: bool = False):
            if not final:
                return torch.autograd.grad(out, m, d, retain_graph=True)[0], None
            wanted = [p for p in inputs if p is not None and p.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, d, allow_unused=True)) if wanted else iter(())
            return None, tuple(next(grads) if p is not None and p.requires_grad else None for p in inputs)

        return vjp

    return linearize


def bp_linearization(src: Tensor, dst: Tensor, rev: Optional[Tensor], known: Optional[Tensor] = None,
                     clamp: Optional[Tensor] = None) -> Linearization:
    r"""Hand-written VJPs of the undamped BP step without edge weights, params
    ``(log_self, log_H, edge_weight=None, message_weight)`` (message weights fixed):

    .. math::
        z = \log\phi + A_{w'} m,\quad b = \mathrm{pin}(z - \mathrm{LSE}(z)),\quad
        v_e = b_{\mathrm{src}(e)} - w'_{\bar e} m_{\bar e},\quad
        F(m)_e = \log\frac{P_e}{\sum P_e},\ P_e = e^{v_e - \max} H

    so that :math:`(d\,\partial F/\partial m)_e = w'_e\,(g^z_{\mathrm{dst}(e)} - g^v_{\bar e})` with
    :math:`g^v = ((d / P - \textstyle\sum d / \sum P) H^\top) \odot e^{v - \max}`,
    :math:`g^b = \sum_{\mathrm{src}(e) = i} g^v_e` (0 on clamped nodes) and
    :math:`g^z = g^b - \mathrm{softmax}(b) \sum g^b`. Same values as
    :func:`autograd_linearization` of that step, without holding a graph: besides the operands it
    keeps two ``[E, c]`` buffers (the exponentials and :math:`P`) and needs one more per product:
    it overwrites ``d`` with the result.
    ``rev=None`` is the paired layout; the rows of :math:`b` where ``known`` (``[N, 1]``) holds are
    pinned to those of ``clamp`` (``[N, c]``).
    """

    def linearize(m: Tensor, needs: Sequence[bool], log_self: Tensor, log_H: Tensor, edge_weight: None,
                  message_weight: Optional[Tensor]) -> VJP:
        weight = None if message_weight is None else message_weight.unsqueeze(-1)
        with torch.no_grad():
            b = aggregate(log_self, m, dst, message_weight)
            if known is not None:
                b = torch.where(known, clamp, b)
            p = b.exp()
            e = cavity(b, m, src, rev, message_weight)
            e = e.sub_(e.amax(dim=-1, keepdim=True)).exp_()
            H = torch.exp(log_H - log_H.amax())
            P = (e @ H).clamp_min_(torch.finfo(e.dtype).tiny)
            Z = P.sum(dim=-1, keepdim=True)

        def vjp(d: Tensor, final: bool = False):
            total = d.sum(dim=-1, keepdim=True) / Z
            t = d.div_(P).sub_(total)  # d's buffer is reused throughout
            g_H = (e.T @ t).mul_(H) if final and needs[1] else None
            g_v = (t @ H.T).mul_(e)
            g_b = torch.zeros_like(p).index_add_(0, src, g_v)
            if known is not None:
                g_b.masked_fill_(known, 0.0)
            g_z = g_b.sub_(p * g_b.sum(dim=-1, keepdim=True))
            if final:
                return None, (g_z if needs[0] else None, g_H, None, None)
            g_m = _apply_reverse(torch.index_select(g_z, 0, dst, out=t), g_v, rev, Tensor.sub_)  # g_z[dst] - g_v[rev]
            return (g_m if weight is None else g_m.mul_(weight)), None

        return vjp

    return linearize


class _FixedPoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, linearize: Linearization, log_msg: Tensor, tol: float, max_steps: int, converged: bool,
                stats: ImplicitStats, *params: Optional[Tensor]) -> Tensor:
        ctx.linearize, ctx.tol, ctx.max_steps, ctx.stats = linearize, tol, max_steps, stats
        ctx.converged = converged
        ctx.save_for_backward(log_msg, *params)
        return log_msg.view_as(log_msg)

    @staticmethod
    def backward(ctx, g: Tensor):
        log_msg, *params = ctx.saved_tensors
        vjp = ctx.linearize(log_msg, ctx.needs_input_grad[6:], *params)

        def adjoint(steps: int, tol: Optional[float]) -> Tuple[Tensor, bool]:
            """The Neumann series u = g + g J + g J^2 + ... (J = dF/dm), i.e. the iteration u <- g + u J from
            u = g, as ``steps`` terms d <- d J added to u; early exit once a term is below ``tol`` relative."""
            u, d = g.clone(), g.clone()
            for _ in range(steps):
                d, _ = vjp(d, False)
                size = float(d.abs().amax())
                if not math.isfinite(size):
                    return u, False
                u.add_(d)
                stats.adjoint_steps += 1
                if tol is not None and size <= tol * max(float(u.abs().amax()), scale):
                    return u, True
            return u, False

        stats = ctx.stats
        stats.backward_calls += 1
        scale = float(g.abs().amax()) if g.numel() else 0.0
        converged = False
        if ctx.converged:  # a forward that did not converge gives no fixed point to differentiate
            u, converged = adjoint(ctx.max_steps, ctx.tol)
        if not converged:
            stats.fallbacks += 1
            u, _ = adjoint(FALLBACK_STEPS - 1, None)
        stats.adjoint_converged += converged
        return (None,) * 6 + vjp(u, True)[1]


def implicit_messages(linearize: Linearization, log_msg: Tensor, params: Sequence[Optional[Tensor]],
                      tol: float, max_steps: int, converged: bool, stats: Optional[ImplicitStats] = None) -> Tensor:
    r"""Attach the implicit gradient to BP messages ``log_msg`` found (without a graph) at a fixed point
    of one BP step :math:`F(\cdot\,; \theta)`, ``params`` being :math:`\theta`.

    The value is ``log_msg`` itself; the backward solves the adjoint equation of the module
    docstring to the relative tolerance ``tol`` within ``max_steps`` vector-Jacobian products,
    then takes one more product for ``params``. When ``converged`` is false (the forward stopped
    at its budget) or the adjoint does not converge, it takes the documented fallback.

    Args:
        linearize: gives the VJPs of the step at the fixed point, :func:`bp_linearization` or
            :func:`autograd_linearization`.
        log_msg: the fixed-point log-messages (no gradient).
        params: the tensors the step depends on (``None`` allowed); gradients flow to them.
        converged: whether the forward iteration reached its tolerance.
        stats: counters updated by the backward.

    Shapes:
        log_msg: ``[E, c]`` -> ``[E, c]``
    """
    return _FixedPoint.apply(linearize, log_msg.detach(), tol, max_steps, converged,
                             ImplicitStats() if stats is None else stats, *params)
