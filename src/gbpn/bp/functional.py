r"""The reference BP step and the small pure numerical kernels it is made of.

One step, for every directed edge :math:`i \to j` and node :math:`i`, is

.. math::
    \log m^{(t)}_{i\to j}(y_j) &\cong \mathrm{LSE}_{y_i}\big[w_{ij}\log H_{y_i y_j}
        + \log p^{(t-1)}_i(y_i) - w'_{j\to i}\log m^{(t-1)}_{j\to i}(y_i)\big] \\
    \log p^{(t)}_i(y_i) &\cong \log\phi_i(y_i) + \sum_{j\in N(i)} w'_{j\to i}\log m^{(t)}_{j\to i}(y_i)

(:math:`\cong`: equal after log-normalisation over the classes; damping mixes in the previous
message; known nodes keep their evidence): :func:`log_messages` then :func:`aggregate`. Every
backend of :mod:`gbpn.bp.backends` computes this step and is tested against it
(``tests/bp/test_backends.py``). Each function here is tested on its own
(``tests/bp/test_functional.py``).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor
from gbpn.bp.numerics import LOG_ZERO



def log_normalize(x: Tensor, dim: int = -1) -> Tensor:
    r"""Normalise log-potentials so that :math:`\sum_y \exp(x_y) = 1` along ``dim``."""
    return x - torch.logsumexp(x, dim=dim, keepdim=True)


def log_matmul_exp(v: Tensor, log_H: Tensor) -> Tensor:
    r"""Log-domain matrix product :math:`\mathrm{out}_{e,b} = \log\sum_a \exp(v_{e,a} + \log H_{a,b})`.

    Computed as :math:`\log\big(\exp(v - \max_a v)\, \exp(\log H - \max \log H)\big)
    + \max_a v + \max\log H`, i.e. one max-shifted exponential and one dense
    ``[E, c] @ [c, c]`` product, so memory is :math:`O(E\,c)`; the
    :math:`E \times c \times c` tensor of the textbook form is never built.
    Exact up to rounding while the spread :math:`\max\log H - \min\log H` stays
    below about 80 in float32 (700 in float64), far beyond any coupling BP learns (the BP
    layer refuses wider ones, :func:`gbpn.bp.validation.check_coupling_range`).

    Shapes:
        v: ``[E, c]``, log_H: ``[c, c]`` -> ``[E, c]``
    """
    # The shifts cancel exactly in value and gradient; detaching them keeps
    # autograd from tracing the argmax (which is non-differentiable at ties).
    shift = v.detach().amax(dim=-1, keepdim=True)
    h_shift = log_H.detach().amax()
    prod = torch.exp(v - shift) @ torch.exp(log_H - h_shift)
    # Each row of exp(v - shift) has an entry equal to 1 and H > 0, so prod > 0;
    # the clamp only guards against H underflowing in float32.
    return torch.log(prod.clamp_min(torch.finfo(prod.dtype).tiny)) + shift + h_shift


class _NormalizedMessage(torch.autograd.Function):
    """Fused ``log_normalize(log_matmul_exp(v, log_H))`` with a hand-written backward.

    Normalising in the linear domain (``P / sum P``) replaces a second log-sum-exp, and the
    backward needs 2 products and a few element-wise passes over ``[E, c]`` instead of the
    dozen autograd would record. Saves ``e = exp(v - shift)``, ``P = e H`` and ``Z = sum P``:
    O(E c) memory.

    ``e``, ``P`` and ``Z`` are returned as extra outputs so that the backward, written in
    differentiable operations on them, is itself differentiated exactly: a double backward
    (Hessian-vector products, ``torch.func``) sends their gradients back into this same
    function, which folds them in by the chain rule (``de/dv = e``, ``dP = de H + e dH``,
    ``dZ = sum dP``). The shifts are constants of the value and of every derivative. Forward
    mode (:meth:`jvp`) is exact as well, and ``torch.func.vmap`` batches it (``hessian``).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(v: Tensor, log_H: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        e = torch.exp(v - v.amax(dim=-1, keepdim=True))
        H = torch.exp(log_H - log_H.amax())
        P = (e @ H).clamp_min_(torch.finfo(v.dtype).tiny)
        Z = P.sum(dim=-1, keepdim=True)
        return torch.log(P / Z), e, P, Z

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[1], *output[1:])
        ctx.save_for_forward(inputs[1], *output[1:])
        ctx.set_materialize_grads(False)  # the extra outputs get no gradient in a first-order backward

    @staticmethod
    def jvp(ctx, dv: Optional[Tensor], dlog_H: Optional[Tensor]):
        """Forward mode (``torch.func.jvp``, ``jacfwd``, ``hessian``): the tangents of all four outputs."""
        log_H, e, P, Z = ctx.saved_tensors
        H = torch.exp(log_H - log_H.amax())
        de = torch.zeros_like(e) if dv is None else e * dv
        dP = de @ H if dlog_H is None else de @ H + e @ (H * dlog_H)
        dZ = dP.sum(dim=-1, keepdim=True)
        return dP / P - dZ / Z, de, dP, dZ

    @staticmethod
    def backward(ctx, g: Optional[Tensor], g_e: Optional[Tensor], g_P: Optional[Tensor], g_Z: Optional[Tensor]):
        log_H, e, P, Z = ctx.saved_tensors
        H = torch.exp(log_H - log_H.detach().amax())
        gP = g_P
        if g is not None:  # out = log P - log Z  =>  dP = g / P - sum(g) / Z
            gP = _add(gP, g / P - g.sum(dim=-1, keepdim=True) / Z)
        if g_Z is not None:
            gP = _add(gP, g_Z.expand_as(P))
        ge = g_e if gP is None else _add(g_e, gP @ H.T)
        gv = ge * e if ctx.needs_input_grad[0] and ge is not None else None
        gH = (e.T @ gP) * H if ctx.needs_input_grad[1] and gP is not None else None  # d/dlogH of exp(logH - const)
        return gv, gH


def _add(a: Optional[Tensor], b: Tensor) -> Tensor:
    return b if a is None else a + b


def normalized_message(v: Tensor, log_H: Tensor) -> Tensor:
    r"""Normalised log message :math:`\log m_{e} \cong \log\sum_a \exp(v_{e,a})\,H_{a,\cdot}`.

    Equal to ``log_normalize(log_matmul_exp(v, log_H))`` in value and gradient.

    Shapes:
        v: ``[E, c]``, log_H: ``[c, c]`` -> ``[E, c]``
    """
    return _NormalizedMessage.apply(v, log_H)[0]


def linear_message(belief: Tensor, msg: Tensor, src: Tensor, rev: Optional[Tensor], H: Tensor) -> Tensor:
    r"""Normalised messages in the linear domain:
    :math:`m_e \propto \big(b_{\mathrm{src}(e)} / m_{\mathrm{rev}(e)}\big)^{\top} H`.

    The same update as ``normalized_message(cavity(...))`` with ``belief`` = :math:`\exp(\log p - \max)`
    per node and ``msg`` the previous normalised messages, but one exponential per *node* instead
    of one per edge. It cannot overflow: every normalised message satisfies
    :math:`m_b \ge \min H / (c \max H)`, so the cavity stays below :math:`c \max H / \min H`
    (callers check that this fits the dtype). Inference only. ``rev=None`` means the paired layout
    of :func:`~gbpn.graph.reverse.paired_order` (the reverse of row ``e`` is ``e ± E/2``), read without a gather.

    Shapes:
        belief: ``[N, c]``, msg: ``[E, c]``, src: ``[E]``, rev: ``[E]`` or ``None``, H: ``[c, c]`` -> ``[E, c]``
    """
    v = belief.index_select(0, src)
    _apply_reverse(v, msg, rev, Tensor.div_)
    # the row sums as v @ (H 1): a mat-vec beats a reduction over a short last axis at small c
    return (v @ H).div_((v @ H.sum(dim=1)).unsqueeze(-1))


def _apply_reverse(out: Tensor, msg: Tensor, rev: Optional[Tensor], op) -> Tensor:
    """``out[e] op= msg[rev[e]]`` in place; ``rev=None`` is the paired layout (halves swapped)."""
    if rev is None:
        h = out.size(0) // 2
        op(out[:h], msg[h:])
        op(out[h:], msg[:h])
    else:
        op(out, msg.index_select(0, rev))
    return out


def log_matmul_exp_weighted(v: Tensor, log_H: Tensor, edge_weight: Tensor) -> Tensor:
    r"""Like :func:`log_matmul_exp` with a per-row coupling :math:`H^{w_e}` (element-wise power).

    :math:`\mathrm{out}_{e,b} = \log\sum_a \exp(v_{e,a} + w_e \log H_{a,b})`.
    Evaluated one output class at a time, so each pass holds ``[E, c]``.

    Shapes:
        v: ``[E, c]``, log_H: ``[c, c]``, edge_weight: ``[E]`` -> ``[E, c]``
    """
    w = edge_weight.to(v.dtype).unsqueeze(-1)
    cols = [torch.logsumexp(v + w * log_H[:, b], dim=-1) for b in range(log_H.size(1))]
    return torch.stack(cols, dim=-1)


def log_matmul_exp_dense(v: Tensor, log_H: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
    r"""Plain reference form that materialises ``[E, c, c]``; for tests and benchmarks only."""
    log_H = log_H.unsqueeze(0)
    if edge_weight is not None:
        log_H = edge_weight.to(v.dtype).view(-1, 1, 1) * log_H
    return torch.logsumexp(v.unsqueeze(-1) + log_H, dim=1)


def cavity(
    log_belief: Tensor, log_msg: Tensor, src: Tensor, rev: Optional[Tensor], weight: Optional[Tensor] = None
) -> Tensor:
    r"""Cavity log-beliefs for every edge :math:`i \to j`:
    :math:`\log p_i(y_i) - w_{j \to i} \log m_{j \to i}(y_i)` ("all incoming but the reverse one").
    ``rev=None`` means the paired layout of :func:`~gbpn.graph.reverse.paired_order`.

    Shapes:
        log_belief: ``[N, c]``, log_msg: ``[E, c]``, src: ``[E]``, rev: ``[E]`` or ``None``, weight: ``[E]``
        (per message, see :func:`aggregate`) -> ``[E, c]``
    """
    out = log_belief.index_select(0, src)
    if weight is None:
        return _apply_reverse(out, log_msg, rev, Tensor.sub_)
    if rev is None:
        return _apply_reverse(out, log_msg * weight.unsqueeze(-1), None, Tensor.sub_)
    # weight only the gathered rows: src and rev may be a chunk of a much longer edge list
    return out - log_msg.index_select(0, rev) * weight.index_select(0, rev).unsqueeze(-1)


def aggregate(log_self: Tensor, log_msg: Tensor, dst: Tensor, weight: Optional[Tensor] = None) -> Tensor:
    r"""Normalised log-beliefs :math:`\log p_i \cong \log\phi_i + \sum_{j \in N(i)} w_{j\to i} \log m_{j\to i}`.

    ``weight`` (default all ones) scales each incoming log-message: the importance weights
    :math:`1 / (|N(i)|\, p_j)` of neighbours drawn with probabilities :math:`p`
    (:mod:`gbpn.sampling.importance`) make the sum an unbiased estimate of the uniform one.

    Shapes:
        log_self: ``[N, c]``, log_msg: ``[E, c]``, dst: ``[E]``, weight: ``[E]`` -> ``[N, c]``
    """
    if weight is not None:
        log_msg = log_msg * weight.unsqueeze(-1)
    return log_normalize(log_self.index_add(0, dst, log_msg))


def clamp_log_potential(labels: Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""Log one-hot evidence: 0 for the known class, :data:`LOG_ZERO` for the others.

    Shapes:
        labels: ``[M]`` -> ``[M, c]``
    """
    out = torch.full((labels.numel(), num_classes), LOG_ZERO, dtype=dtype, device=labels.device)
    out.scatter_(1, labels.long().view(-1, 1), 0.0)
    return out


def log_messages(
    log_belief: Tensor,
    log_msg: Tensor,
    src: Tensor,
    rev: Optional[Tensor],
    log_H: Tensor,
    damping: float = 0.0,
    edge_weight: Optional[Tensor] = None,
    message_weight: Optional[Tensor] = None,
    s: slice = slice(None),
) -> Tensor:
    r"""One log-domain message update of :class:`BeliefPropagation` for the edges ``s``: cavity,
    product with :math:`H^{w_e}`, normalisation and damping. ``rev=None`` is the paired layout.

    Shapes:
        log_belief: ``[N, c]``, log_msg: ``[E, c]``, src: ``[E]``, rev: ``[E]`` (rows ``s``) or ``None``,
        log_H: ``[c, c]``, edge_weight, message_weight: ``[E]`` -> ``[|s|, c]``
    """
    v = cavity(log_belief, log_msg, src[s], rev, message_weight)
    new = (normalized_message(v, log_H) if edge_weight is None
           else log_normalize(log_matmul_exp_weighted(v, log_H, edge_weight[s])))
    if damping > 0:
        new = log_normalize(torch.logaddexp(new + math.log1p(-damping), log_msg[s] + math.log(damping)))
    return new
