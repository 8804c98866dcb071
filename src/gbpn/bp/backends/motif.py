r"""The motif backend: BP with triangle factors as whole-array torch operations (the equations of
:mod:`gbpn.bp.motifs`), the ``triangles`` entry of :mod:`gbpn.bp.dispatch`.

The triangle update is a two-variable log-sum-exp and never forms ``[#triangles, c, c, c]``:
the full form (:func:`triangle_message_full`) holds at most ``[M, c, k]`` for a block of ``k`` classes
of the third variable; the CP form (:func:`triangle_message_cp`) factorises,
:math:`\sum_{b,k} T_{abk} x_b y_k = \sum_r u_r(a)\,(u_r^\top x)(u_r^\top y)`, three ``[M, c] @ [c, R]``
products: :math:`O(M c R)` and no :math:`c^2` at all.
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from gbpn.bp.functional import log_matmul_exp, log_messages, log_normalize
from gbpn.bp.problem import BPProblem, BPResult, Capability

# elements of the full form's [M, c, k] temporary per block of third-variable classes
FULL_FORM_BLOCK = 1 << 24


def triangle_message_full(x: Tensor, y: Tensor, log_T: Tensor, block: int = FULL_FORM_BLOCK) -> Tensor:
    r"""Triangle factor-to-variable message in the full form, unnormalised:
    :math:`\mathrm{out}_{m,a} = \log\sum_{b,k} T_{abk}\, e^{x_{m,b} + y_{m,k}}`.

    Max-shifted exponentials, then per block of third-variable classes :math:`k` one product
    ``[M, c] @ [c, c k]`` and a batched contraction with :math:`e^{y}`: at most ``block`` elements
    of temporaries (and never ``[M, c, c, c]``). Exact up to rounding while the spread of
    :math:`\log T` stays inside :data:`~gbpn.bp.numerics.REFUSE` (:func:`gbpn.bp.motifs.check_triangle_range`).

    Shapes:
        x, y: ``[M, c]``, log_T: ``[c, c, c]`` -> ``[M, c]``
    """
    m, c = x.shape
    # the shifts cancel in value and gradient; detached, autograd does not trace the argmax
    x_shift = x.detach().amax(dim=-1, keepdim=True)
    y_shift = y.detach().amax(dim=-1, keepdim=True)
    t_shift = log_T.detach().amax()
    ex, ey, t = torch.exp(x - x_shift), torch.exp(y - y_shift), torch.exp(log_T - t_shift)
    k_block = max(1, block // max(1, m * c))
    out: Optional[Tensor] = None
    for k0 in range(0, c, k_block):
        k1 = min(c, k0 + k_block)
        tb = t[:, :, k0:k1].permute(1, 0, 2).reshape(c, c * (k1 - k0))  # [b, (a, k)]
        part = torch.bmm((ex @ tb).view(m, c, k1 - k0), ey[:, k0:k1, None]).squeeze(-1)
        out = part if out is None else out + part
    if out is None:  # c == 0
        return x.new_zeros(m, 0)
    # every row of ex and ey holds a 1 and T > 0, so out > 0; the clamp guards float32 underflow
    return torch.log(out.clamp_min(torch.finfo(out.dtype).tiny)) + x_shift + y_shift + t_shift


def triangle_message_cp(x: Tensor, y: Tensor, log_u: Tensor) -> Tensor:
    r"""Triangle factor-to-variable message in the CP form, unnormalised:
    :math:`\mathrm{out}_{m,a} = \log\sum_r u_r(a)\,\big(\sum_b u_r(b) e^{x_{m,b}}\big)
    \big(\sum_k u_r(k) e^{y_{m,k}}\big)`, which equals :func:`triangle_message_full` with
    :math:`T_{abk} = \sum_r u_r(a) u_r(b) u_r(k)`; three max-shifted products, :math:`O(M c R)`.

    Shapes:
        x, y: ``[M, c]``, log_u: ``[R, c]`` -> ``[M, c]``
    """
    return log_matmul_exp(log_matmul_exp(x, log_u.T) + log_matmul_exp(y, log_u.T), log_u)


def _damp(new: Tensor, old: Tensor, damping: float) -> Tensor:
    if damping <= 0:
        return new
    return log_normalize(torch.logaddexp(new + math.log1p(-damping), old + math.log(damping)))


def triangle_messages(log_belief: Tensor, log_tmsg: Tensor, triangles: Tensor, factor_log: Tensor, form: str,
                      damping: float = 0.0) -> Tensor:
    r"""One update of every triangle factor-to-variable message (the second equation of
    :mod:`gbpn.bp.motifs`): cavities, the two-variable log-sum-exp, normalisation and damping.

    ``log_tmsg[s, t]`` is the message of triangle ``t`` to its corner ``triangles[s, t]``. The message to
    corner ``s`` combines the cavities of the two other corners; :math:`T` is symmetric, so one
    function serves all three corners. In the CP form each corner's sums :math:`u_r^\top e^{\nu}` are
    computed once and shared by the two messages that use them.

    Shapes:
        log_belief: ``[N, c]``, log_tmsg: ``[3, T, c]``, triangles: ``[3, T]``,
        factor_log: ``[c, c, c]`` (full) or ``[R, c]`` (CP) -> ``[3, T, c]``
    """
    _, num, c = log_tmsg.shape
    cav = log_belief.index_select(0, triangles.reshape(-1)).view(3, num, c) - log_tmsg
    if form == "cp":
        s = log_matmul_exp(cav.reshape(3 * num, c), factor_log.T).view(3, num, -1)
        new = log_matmul_exp(torch.stack([s[1] + s[2], s[0] + s[2], s[0] + s[1]]).view(3 * num, -1), factor_log)
    else:
        x = torch.stack([cav[1], cav[0], cav[0]]).view(3 * num, c)
        y = torch.stack([cav[2], cav[2], cav[1]]).view(3 * num, c)
        new = triangle_message_full(x, y, factor_log)
    return _damp(log_normalize(new.view(3, num, c)), log_tmsg, damping)


def motif_bp(p: BPProblem) -> BPResult:
    """``p.num_steps`` synchronous steps of both kinds of message from the previous step's beliefs."""
    phi = p.phi()
    c = p.num_classes
    src, dst = p.edge_index[0], p.edge_index[1]
    triangles = p.triangles
    corners = triangles.reshape(-1)
    log_belief = phi
    log_msg = phi.new_full((src.numel(), c), -math.log(c))
    log_tmsg = phi.new_full((3, triangles.size(1), c), -math.log(c))
    residuals: List[Tensor] = []
    for _ in range(p.num_steps):
        new_msg = log_messages(log_belief, log_msg, src, p.rev_index, p.log_H, p.damping, p.edge_weight)
        log_tmsg = triangle_messages(log_belief, log_tmsg, triangles, p.triangle_log, p.triangle_form, p.damping)
        log_msg = new_msg
        prev = log_belief
        total = phi.index_add(0, dst, log_msg).index_add(0, corners, log_tmsg.reshape(-1, c))
        log_belief = p.pin(log_normalize(total))
        if p.step_done(residuals, log_belief, prev):
            break
    return BPResult(log_belief, residuals)


class MotifEager(Capability):
    """Triangle factors (``problem.triangles``), eager: every option of the pairwise step but the ones
    below."""

    name = "motif_eager"
    device_type = None

    def reasons(self, p: BPProblem) -> List[str]:
        why = []
        if p.triangles is None:
            why.append("runs triangle factors")
        if p.return_messages or p.message_weight is not None or p.messages is not None:
            why.append("return_messages, messages and message_weight are options of the pairwise model; a "
                       "triangle model (motifs='triangle') has none")
        if p.edge_chunk is not None:
            why.append("no edge chunks with triangle factors")
        return why

    def run(self, p: BPProblem) -> BPResult:
        return motif_bp(p)
