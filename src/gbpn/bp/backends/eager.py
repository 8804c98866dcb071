r"""The eager backend: BP as whole-array torch operations, the reference every other backend is
checked against (one step is :func:`~gbpn.bp.functional.log_messages` then
:func:`~gbpn.bp.functional.aggregate`, the equations of :class:`~gbpn.bp.layer.BeliefPropagation`).

It runs every call: any device and dtype, ``torch.compile`` and ``torch.func``, edge chunks, gradients
to message weights, and the implicit backward with returned messages. At inference without weights
it keeps messages in the linear domain (:func:`~gbpn.bp.functional.linear_message`, one exponential
per node instead of per edge) while ``log H`` spreads less than :data:`~gbpn.bp.numerics.LINEAR_EAGER`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.bp.functional import aggregate, linear_message, log_messages
from gbpn.bp.implicit import ImplicitStats, autograd_linearization, bp_linearization, implicit_messages
from gbpn.bp.problem import BPProblem, BPResult, Capability
from gbpn.graph.reverse import pairing


def eager_vjp(src: Tensor, dst: Tensor, rev: Optional[Tensor], mw: Optional[Tensor], known: Optional[Tensor],
              clamp: Tensor, damping: float, steps: int, inputs: Tuple[Optional[Tensor], ...], needs: Tuple[bool, ...],
              g_b: Optional[Tensor], g_msg: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    """The gradients of ``inputs = (phi, log_H, edge_weight)`` (where ``needs``) for the output
    gradients ``g_b``, ``g_msg``, by the same steps recorded by autograd on the eager functions
    (:func:`~gbpn.bp.functional.log_messages`, :func:`~gbpn.bp.functional.aggregate`; ``rev=None``: the
    paired layout), with ``create_graph=True``: Hessian-vector products and higher derivatives of a
    fused forward stay exact."""
    phi, log_H, ew = inputs
    known = None if known is None else known.view(-1, 1)
    wanted = [x for x, need in zip(inputs, needs) if need]
    log_b, log_msg = phi, phi.new_full((src.numel(), phi.size(1)), -math.log(phi.size(1)))
    for _ in range(steps):
        log_msg = log_messages(log_b, log_msg, src, rev, log_H, damping, ew, mw)
        log_b = aggregate(phi, log_msg, dst, mw)
        if known is not None:
            log_b = torch.where(known, clamp, log_b)
    outs, grads = zip(*[(o, go) for o, go in ((log_b, g_b), (log_msg, g_msg)) if go is not None and go.numel()])
    got = iter(torch.autograd.grad(outs, wanted, grads, create_graph=True, allow_unused=True))
    return tuple(next(got) if need else None for need in needs)


@dataclass
class _Edges:
    """The edges as the eager step reads them: in the paired layout where it applies (``perm``: paired
    position -> edge; ``rev=None``: the reverse of row ``e`` is row ``e +- E/2``), else with ``rev``."""

    src: Tensor
    dst: Tensor
    rev: Optional[Tensor]
    edge_weight: Optional[Tensor]
    message_weight: Optional[Tensor]
    perm: Optional[Tensor]

    def ordered(self, x: Optional[Tensor]) -> Optional[Tensor]:
        """A per-edge tensor in this order."""
        return x if x is None or self.perm is None else x.index_select(0, self.perm)


def _edges(p: BPProblem) -> _Edges:
    src, dst = p.edge_index[0], p.edge_index[1]
    # under torch.compile reverse messages are gathered through rev_index: the paired layout's
    # permutation has a data-dependent size
    perm, paired = (None, False) if p.compiling else pairing(p.rev_index)
    e = _Edges(src, dst, p.rev_index, p.edge_weight, p.message_weight, perm)
    if perm is not None:
        e.src, e.dst = src.index_select(0, perm), dst.index_select(0, perm)
        e.edge_weight, e.message_weight = e.ordered(p.edge_weight), e.ordered(p.message_weight)
    if paired:
        # chunks need explicit reverse rows; the whole edge list swaps its halves instead
        num_edges = src.numel()
        e.rev = None if p.edge_chunk is None else torch.arange(num_edges, device=src.device).roll(num_edges // 2)
    return e


def _start(p: BPProblem, e: _Edges, log_self: Tensor) -> Tuple[Tensor, Tensor]:
    """The beliefs and log-messages BP starts from: ``log_self`` and uniform messages, or the given
    messages and the beliefs they make."""
    if p.messages is None:
        return log_self, log_self.new_full((e.src.numel(), p.num_classes), -math.log(p.num_classes))
    log_msg = e.ordered(p.messages.to(log_self.dtype))
    return p.pin(aggregate(log_self, log_msg, e.dst, e.message_weight)), log_msg


def _implicit(p: BPProblem, e: _Edges, log_self: Tensor) -> BPResult:
    """The fixed point found without a graph (``p.fixed_point``, by :func:`gbpn.bp.dispatch.run`),
    with the implicit gradient attached (:func:`~gbpn.bp.implicit.implicit_messages`)."""
    fixed_res = torch.stack(p.fixed_point.residuals) if p.fixed_point.residuals else log_self.new_zeros(0)
    stats = p.implicit_stats if p.implicit_stats is not None else ImplicitStats()
    src, dst, rev, damping = e.src, e.dst, e.rev, p.damping

    def belief_of(m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor], mw: Optional[Tensor]) -> Tensor:
        return p.pin(aggregate(phi, m, dst, mw))

    def message_of(b: Tensor, m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor], mw: Optional[Tensor]) -> Tensor:
        return log_messages(b, m, src, rev, lH, damping, ew, mw)

    converged = bool(fixed_res.numel()) and float(fixed_res[-1]) < p.tol
    stats.record_forward(fixed_res.numel(), converged)
    params = (log_self, p.log_H, e.edge_weight, e.message_weight)
    plain = damping == 0 and e.edge_weight is None and not (e.message_weight is not None
                                                            and e.message_weight.requires_grad)
    clamp = () if p.clamp is None else (p.known_mask.view(-1, 1), p.clamp)
    linearize = bp_linearization(src, dst, rev, *clamp) if plain else autograd_linearization(belief_of, message_of)
    log_msg = implicit_messages(linearize, e.ordered(p.fixed_point.messages), params, p.tol, p.num_steps, converged, stats)
    return BPResult(belief_of(log_msg, *params), list(fixed_res.unbind()), log_msg, stats)


class _Linear:
    """The linear domain's coupling, messages and beliefs (:func:`~gbpn.bp.functional.linear_message`)."""

    def __init__(self, log_H: Tensor, log_msg: Tensor):
        self.H = torch.exp(log_H - log_H.max())
        self.msg = log_msg.exp()
        self.belief: Optional[Tensor] = None


def _new_messages(p: BPProblem, e: _Edges, log_belief: Tensor, log_msg: Tensor, lin: Optional[_Linear]) -> Tensor:
    """One step's messages, whole or ``p.edge_chunk`` edges at a time (then only ``[edge_chunk, c]``
    temporaries besides the two message buffers)."""
    def messages(s: slice, rev: Optional[Tensor]) -> Tensor:
        if lin is not None:
            new = linear_message(lin.belief, lin.msg, e.src[s], rev, lin.H)
            return new.mul_(1 - p.damping).add_(lin.msg[s], alpha=p.damping) if p.damping > 0 else new
        return log_messages(log_belief, log_msg, e.src, rev, p.log_H, p.damping, e.edge_weight, e.message_weight, s)

    if p.edge_chunk is None:
        return messages(slice(None), e.rev)
    if torch.is_grad_enabled() and p.log_self.requires_grad:
        raise ValueError("edge_chunk is for inference; run it under torch.no_grad()")
    new_msg = torch.empty_like(log_msg)
    for start in range(0, e.src.numel(), p.edge_chunk):
        s = slice(start, start + p.edge_chunk)
        new_msg[s] = messages(s, e.rev[s])
    return new_msg


def _unrolled(p: BPProblem, e: _Edges, log_self: Tensor) -> BPResult:
    """``p.num_steps`` steps (fewer once the belief change is below ``p.tol``)."""
    log_belief, log_msg = _start(p, e, log_self)
    lin = _Linear(p.log_H, log_msg) if p.linear else None
    residuals: List[Tensor] = []
    for _ in range(p.num_steps):
        if lin is not None:
            lin.belief = torch.exp(log_belief - log_belief.amax(dim=-1, keepdim=True))
        new_msg = _new_messages(p, e, log_belief, log_msg, lin)
        if lin is not None:
            lin.msg, log_msg = new_msg, None  # drop the old log-messages before taking the new ones
            log_msg = torch.log(lin.msg)
        else:
            log_msg = new_msg
        prev = log_belief
        log_belief = p.pin(aggregate(log_self, log_msg, e.dst, e.message_weight))
        if p.step_done(residuals, log_belief, prev):
            break
    return BPResult(log_belief, residuals, log_msg)


def eager_bp(p: BPProblem) -> BPResult:
    """``p.num_steps`` BP steps (or the implicit fixed point) as torch operations; the messages in the
    caller's edge order when asked for."""
    e = _edges(p)
    log_self = p.phi()
    out = _implicit(p, e, log_self) if p.implicit else _unrolled(p, e, log_self)
    if not p.return_messages:
        return out._replace(messages=None)
    if e.perm is not None:
        out = out._replace(messages=out.messages.new_empty(out.messages.shape).index_copy(0, e.perm, out.messages))
    return out


class Eager(Capability):
    """Runs every call; :func:`gbpn.bp.dispatch.select` passes it over only when the caller asked for
    a compiled kernel."""

    name = "eager"
    device_type = None

    def reasons(self, p: BPProblem) -> List[str]:
        return []

    def run(self, p: BPProblem) -> BPResult:
        return eager_bp(p)
