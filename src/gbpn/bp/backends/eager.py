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
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.bp.functional import aggregate, linear_message, log_messages
from gbpn.bp.implicit import autograd_linearization, bp_linearization, implicit_messages
from gbpn.bp.numerics import LINEAR_EAGER
from gbpn.bp.problem import BPProblem, BPResult
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


def _fixed_point(p: BPProblem, layer) -> Tuple[Tensor, Tensor]:
    """The fixed point's residuals and messages by the layer's own inference path (no graph recorded)."""
    with torch.no_grad():
        _, res, msg = layer(p.log_self, p.edge_index, rev_index=p.rev_index, edge_weight=p.edge_weight,
                            known_labels=p.known_labels, known_mask=p.known_mask, num_steps=p.steps,
                            return_residuals=True, return_messages=True, message_weight=p.message_weight)
    return res, msg


def eager_bp(p: BPProblem, layer) -> BPResult:
    """``p.steps`` BP steps (or the implicit fixed point) as torch operations."""
    fixed_res = fixed_msg = None
    if p.implicit:
        fixed_res, fixed_msg = _fixed_point(p, layer)
    src, dst = p.edge_index[0], p.edge_index[1]
    rev_index, edge_weight, message_weight = p.rev_index, p.edge_weight, p.message_weight
    num_edges, c, damping, steps = src.numel(), p.num_classes, p.damping, p.steps
    # under torch.compile reverse messages are gathered through rev_index: the paired layout's
    # permutation has a data-dependent size
    perm, paired = (None, False) if p.compiling else pairing(rev_index)
    if perm is not None:
        src, dst = src.index_select(0, perm), dst.index_select(0, perm)
        edge_weight = None if edge_weight is None else edge_weight.index_select(0, perm)
        message_weight = None if message_weight is None else message_weight.index_select(0, perm)
    if paired:
        # chunks need explicit reverse rows; the whole edge list swaps its halves instead
        rev_index = None if p.edge_chunk is None else torch.arange(num_edges, device=src.device).roll(num_edges // 2)

    log_self = p.phi()
    log_H = p.log_H
    log_belief = log_self
    log_msg = log_self.new_full((num_edges, c), -math.log(c))
    residuals: List[Tensor] = []
    linear = (not p.compiling and not torch.is_grad_enabled() and edge_weight is None and message_weight is None
              and float(log_H.max() - log_H.min()) < LINEAR_EAGER)
    H = msg = belief = None  # the linear domain's coupling, messages and beliefs
    if linear:
        H = torch.exp(log_H - log_H.max())
        msg = log_msg.exp()

    def messages(s: slice, rev: Optional[Tensor]) -> Tensor:
        if linear:  # belief and msg are linear-domain here
            new = linear_message(belief, msg, src[s], rev, H)
            return new.mul_(1 - damping).add_(msg[s], alpha=damping) if damping > 0 else new
        return log_messages(log_belief, log_msg, src, rev, log_H, damping, edge_weight, message_weight, s)

    if p.implicit:
        def belief_of(m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor], mw: Optional[Tensor]) -> Tensor:
            return p.pin(aggregate(phi, m, dst, mw))

        def message_of(b: Tensor, m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor],
                       mw: Optional[Tensor]) -> Tensor:
            return log_messages(b, m, src, rev_index, lH, damping, ew, mw)

        converged = bool(fixed_res.numel()) and float(fixed_res[-1]) < p.tol
        layer.implicit_stats.record_forward(fixed_res.numel(), converged)
        params = (log_self, log_H, edge_weight, message_weight)
        plain = damping == 0 and edge_weight is None and not (message_weight is not None
                                                              and message_weight.requires_grad)
        clamp = () if p.clamp is None else (p.known_mask.view(-1, 1), p.clamp)
        linearize = (bp_linearization(src, dst, rev_index, *clamp) if plain
                     else autograd_linearization(belief_of, message_of))
        log_msg = implicit_messages(linearize, fixed_msg if perm is None else fixed_msg.index_select(0, perm),
                                    params, p.tol, steps, converged, layer.implicit_stats)
        log_belief = belief_of(log_msg, *params)
        residuals = list(fixed_res.unbind())
        steps = 0  # the fixed point replaces the unrolled steps below
    for _ in range(steps):
        if linear:
            belief = torch.exp(log_belief - log_belief.amax(dim=-1, keepdim=True))
        if p.edge_chunk is None:
            new_msg = messages(slice(None), rev_index)
        else:  # bounded temporaries: only [edge_chunk, c] besides the two message buffers
            if torch.is_grad_enabled() and log_self.requires_grad:
                raise ValueError("edge_chunk is for inference; run it under torch.no_grad()")
            new_msg = torch.empty_like(log_msg)
            for start in range(0, num_edges, p.edge_chunk):
                s = slice(start, start + p.edge_chunk)
                new_msg[s] = messages(s, rev_index[s])
        if linear:
            msg, log_msg = new_msg, None  # drop the old log-messages before taking the new ones
            log_msg = torch.log(msg)
        else:
            log_msg = new_msg
        prev = log_belief
        log_belief = p.pin(aggregate(log_self, log_msg, dst, message_weight))
        if p.return_residuals or p.tol is not None:
            res = ((log_belief.detach().exp() - prev.detach().exp()).abs().sum(-1).amax() if p.num_nodes
                   else log_belief.new_zeros(()))
            residuals.append(res)
            if p.tol is not None and float(res) < p.tol:
                break
    if perm is not None and p.return_messages:
        log_msg = log_msg.new_empty(log_msg.shape).index_copy(0, perm, log_msg)
    return log_belief, residuals, log_msg


class Eager:
    """Runs every call; declines only when the caller asked for a compiled kernel."""

    name = "eager"
    device_type = None

    def why_not(self, p: BPProblem) -> Optional[str]:
        return "kernel='fused' asks for a compiled kernel" if p.kernel == "fused" else None

    def run(self, p: BPProblem, layer) -> BPResult:
        return eager_bp(p, layer)
