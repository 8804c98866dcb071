r"""Belief propagation with triangle (motif) factors: unary, pairwise and triangle factors, in log space.

The joint is

.. math::
    p(y) \propto \prod_i \phi_i(y_i) \prod_{\{i,j\} \in E'} H_{y_i y_j}^{w_{ij}}
    \prod_{\{i,j,k\} \in \mathcal{T}} T_{y_i y_j y_k},

with the shared coupling :math:`H` (:class:`~gbpn.bp.coupling.Coupling`) on the edges :math:`E'`
(every edge, or only those on no triangle: ``pairwise_on_triangle_edges``) and the shared triangle
potential :math:`T` (:class:`~gbpn.bp.triangle_factor.TriangleFactor`) on the triangles
:math:`\mathcal{T}` (e.g. from :func:`gbpn.graph.triangles.enumerate_triangles`).

Sum-product BP on its factor graph, written node to node as the pairwise layer is: the
variable-to-factor message of :math:`i` to a factor :math:`f \ni i` is the cavity belief
:math:`p_i / \mu_{f\to i}` (everything :math:`i` knows but what :math:`f` told it), so only the
factor-to-variable messages are stored: :math:`m_{j\to i}` per directed edge (the pairwise factor
:math:`\{i, j\}` to :math:`i`) and :math:`\mu_{\tau\to i}` per triangle :math:`\tau` and corner :math:`i`.
One synchronous step computes all of them from the previous step's beliefs:

.. math::
    \log m^{(t)}_{j\to i}(y_i) &\cong \mathrm{LSE}_{y_j}\big[w_{ij}\log H_{y_j y_i}
        + \log p^{(t-1)}_j(y_j) - \log m^{(t-1)}_{i\to j}(y_j)\big] \\
    \log \mu^{(t)}_{\tau\to i}(y_i) &\cong \mathrm{LSE}_{y_j, y_k}\big[\log T_{y_i y_j y_k}
        + \nu^{(t-1)}_{j\to\tau}(y_j) + \nu^{(t-1)}_{k\to\tau}(y_k)\big],
        \qquad \nu^{(t-1)}_{j\to\tau} = \log p^{(t-1)}_j - \log\mu^{(t-1)}_{\tau\to j} \\
    \log p^{(t)}_i(y_i) &\cong \log\phi_i(y_i) + \sum_{j \in N'(i)} \log m^{(t)}_{j\to i}(y_i)
        + \sum_{\tau \ni i} \log\mu^{(t)}_{\tau\to i}(y_i)

(:math:`\cong`: equal after log-normalisation over the classes), from :math:`\log m^{(0)} =
\log\mu^{(0)} = -\log c` and :math:`\log p^{(0)} = \log\phi` (normalised). Damping :math:`\lambda` mixes
the previous message into both kinds, :math:`(1-\lambda)\,\mathrm{new} + \lambda\,\mathrm{old}`
(normalised). Known nodes have their belief pinned to the one-hot evidence at every step, as in
:class:`~gbpn.bp.layer.BeliefPropagation`. On a factor graph that is a tree this is exact after as
many steps as its diameter (in variable-to-variable hops).

The triangle update is a two-variable log-sum-exp and never forms ``[#triangles, c, c, c]``:
the full form (:func:`triangle_message_full`) holds at most ``[M, c, k]`` for a block of ``k`` classes
of the third variable; the CP form (:func:`triangle_message_cp`) factorises,
:math:`\sum_{b,k} T_{abk} x_b y_k = \sum_r u_r(a)\,(u_r^\top x)(u_r^\top y)`, three ``[M, c] @ [c, R]``
products: :math:`O(M c R)` and no :math:`c^2` at all.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from gbpn.bp.functional import (
    clamp_log_potential,
    log_matmul_exp,
    log_messages,
    log_normalize,
)
from gbpn.bp.layer import BeliefPropagation, _check_steps
from gbpn.bp.numerics import REFUSE
from gbpn.bp.triangle_factor import TriangleFactor
from gbpn.bp.validation import (
    check_bp_inputs,
    check_coupling_range,
    check_symmetric_weight,
)
from gbpn.graph.adjacency import to_edge_index
from gbpn.graph.reverse import reverse_edge_index
from gbpn.graph.triangles import covered_edge_mask

# elements of the full form's [M, c, k] temporary per block of third-variable classes
FULL_FORM_BLOCK = 1 << 24


def triangle_message_full(x: Tensor, y: Tensor, log_T: Tensor, block: int = FULL_FORM_BLOCK) -> Tensor:
    r"""Triangle factor-to-variable message in the full form, unnormalised:
    :math:`\mathrm{out}_{m,a} = \log\sum_{b,k} T_{abk}\, e^{x_{m,b} + y_{m,k}}`.

    Max-shifted exponentials, then per block of third-variable classes :math:`k` one product
    ``[M, c] @ [c, c k]`` and a batched contraction with :math:`e^{y}`: at most ``block`` elements
    of temporaries (and never ``[M, c, c, c]``). Exact up to rounding while the spread of
    :math:`\log T` stays inside :data:`~gbpn.bp.numerics.REFUSE` (:func:`check_triangle_range`).

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


def check_triangles(triangles: Tensor, num_nodes: int) -> None:
    """``ValueError`` unless ``triangles`` is an integer ``[3, T]`` tensor of node ids in
    ``0..num_nodes-1`` with three distinct nodes per column (a factor on a repeated variable would be
    a different, lower-order factor)."""
    if triangles.dim() != 2 or triangles.size(0) != 3 or triangles.is_floating_point() or \
            triangles.dtype == torch.bool:
        raise ValueError(f"triangles must be an integer tensor of shape [3, T], got {triangles.dtype} "
                         f"{tuple(triangles.shape)}")
    if triangles.numel() == 0:
        return
    if int(triangles.min()) < 0 or int(triangles.max()) >= num_nodes:
        raise ValueError(f"triangles refer to nodes outside 0..{num_nodes - 1}")
    i, j, k = triangles
    bad = (i == j) | (j == k) | (i == k)
    if bool(bad.any()):
        t = int(bad.nonzero()[0, 0])
        raise ValueError(f"triangle {t} {triangles[:, t].tolist()} repeats a node: a triangle factor needs three "
                         "distinct nodes")


def check_triangle_range(factor_log: Tensor, dtype: torch.dtype, form: str) -> None:
    r"""``ValueError`` when what the triangle messages multiply by (:math:`\log T`, or :math:`\log u` in
    the CP form) spreads wider than ``dtype`` computes exactly, or is not finite."""
    if factor_log.numel() == 0:
        return
    w = factor_log.detach()
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the triangle factor holds NaN, inf or 0 (its log is not finite): training diverged, or an "
                         "init was not positive")
    limit = REFUSE.get(dtype)
    spread = float(w.max() - w.min())
    if limit is not None and not spread <= limit:
        what = "log T" if form == "full" else "log u (the CP factors)"
        raise ValueError(f"{what} spans {spread:.1f} (max - min), beyond the {limit:.0f} that {dtype} messages compute "
                         "exactly; run BP in float64 (.double()) or keep the triangle factor milder")


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


class MotifBeliefPropagation(nn.Module):
    r"""Loopy BP with unary, pairwise and triangle factors (the equations of :mod:`gbpn.bp.motifs`).

    Holds a :class:`~gbpn.bp.layer.BeliefPropagation` (``self.pairwise``, whose
    :class:`~gbpn.bp.coupling.Coupling` is :attr:`coupling`) and a
    :class:`~gbpn.bp.triangle_factor.TriangleFactor` (:attr:`triangle`). Called without triangles
    (``triangles=None`` or ``[3, 0]``) it *is* the pairwise layer: the call goes to ``self.pairwise``,
    so beliefs, backends (fused kernels, the implicit backward) and gradients are those of today's BP,
    bit for bit. With triangles it runs the eager motif step below; :attr:`last_backend` is then
    ``"motif-eager"`` and :attr:`last_reason` says in one line what that path does not do that was asked
    (``backward="implicit"`` unrolls here; ``kernel="fused"`` raises ``ValueError``).

    **Pairwise factors on triangle edges.** With ``pairwise_on_triangle_edges=True`` (default) every
    edge keeps :math:`H` and :math:`T` models what the three pairs alone do not (the model of the paper
    plus triangles). Then each triangle's three :math:`H` factors and its :math:`T` form a loop of the
    factor graph, so BP is approximate even on a tree of triangles. With ``False`` the edges that are a
    side of some given triangle carry no :math:`H` (their interaction lives in :math:`T` alone); a tree
    arrangement of triangles and plain edges is then a tree factor graph and BP is exact on it
    (``tests/bp/test_triangles.py`` checks it against enumeration). The full form can reproduce the
    first model within the second exactly by absorbing :math:`H` into :math:`T`,
    :math:`T'_{abk} = T_{abk} H_{ab} H_{bk} H_{ak}`.

    Args:
        num_classes (int): :math:`c`.
        num_steps (int, optional): BP steps :math:`K`. (default: ``5``)
        damping (float, optional): :math:`\lambda \in [0, 1)`, for both kinds of message. (default: ``0.0``)
        tol (float, optional): stop once no belief changes by more than ``tol`` (L1); ``None`` runs
            :math:`K` steps. (default: ``None``)
        learn_coupling (bool, optional): learn :math:`H`. (default: ``True``)
        coupling_init (Tensor, optional): initial :math:`H`. (default: all ones)
        triangle_form (str, optional): ``"full"`` or ``"cp"``; ``None`` picks
            :func:`~gbpn.bp.triangle_factor.default_form` (full below 10 classes). (default: ``None``)
        rank (int, optional): :math:`R` of the CP form. (default: ``num_classes``)
        learn_triangle (bool, optional): learn :math:`T`. (default: ``True``)
        triangle_init (Tensor, optional): initial :math:`T` ``[c, c, c]`` (full) or factors :math:`u`
            ``[R, c]`` (CP). (default: :math:`T = 1` full, small random :math:`u` CP)
        pairwise_on_triangle_edges (bool, optional): see above. (default: ``True``)
        backward (str, optional): of the pairwise layer (calls without triangles). (default: ``"unroll"``)
        kernel (str, optional): of the pairwise layer (calls without triangles). (default: ``"auto"``)

    The call is ``forward(log_self, edge_index, triangles=None, *, edge_weight=None, rev_index=None,
    known_labels=None, known_mask=None, num_steps=None, return_residuals=False, kernel=None)``.
    ``edge_weight`` (symmetric) raises the pairwise factor to :math:`H^{w_{ij}}` as in the pairwise
    layer; triangles carry no weight. float16 / bfloat16 run in float32.

    Shapes:
        - **input:** ``log_self`` ``[N, c]``, ``edge_index`` ``[2, E]`` (symmetric) or sparse ``[N, N]``,
          ``triangles`` ``[3, T]`` (distinct nodes per column), ``edge_weight`` ``[E]``,
          ``known_labels``, ``known_mask`` ``[N]``
        - **output:** normalised log-beliefs ``[N, c]``; with ``return_residuals`` also ``[K']``
    """

    def __init__(
        self,
        num_classes: int,
        num_steps: int = 5,
        damping: float = 0.0,
        tol: Optional[float] = None,
        learn_coupling: bool = True,
        coupling_init: Optional[Tensor] = None,
        triangle_form: Optional[str] = None,
        rank: Optional[int] = None,
        learn_triangle: bool = True,
        triangle_init: Optional[Tensor] = None,
        pairwise_on_triangle_edges: bool = True,
        backward: str = "unroll",
        kernel: str = "auto",
    ):
        super().__init__()
        # the pairwise layer validates num_steps, damping, tol, backward and kernel
        self.pairwise = BeliefPropagation(num_classes, num_steps, damping, tol, learn_coupling, coupling_init,
                                          backward, kernel)
        self.triangle = TriangleFactor(num_classes, triangle_form, rank, learn_triangle, triangle_init)
        self.num_classes = num_classes
        self.pairwise_on_triangle_edges = pairwise_on_triangle_edges
        self.last_backend: Optional[str] = None
        self.last_reason: Optional[str] = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.pairwise.reset_parameters()
        self.triangle.reset_parameters()

    # the pairwise layer owns the options: one source of truth, so a delegated call sees the same
    @property
    def num_steps(self) -> int:
        return self.pairwise.num_steps

    @num_steps.setter
    def num_steps(self, value: int) -> None:
        _check_steps(value)
        self.pairwise.num_steps = value

    @property
    def damping(self) -> float:
        return self.pairwise.damping

    @property
    def tol(self) -> Optional[float]:
        return self.pairwise.tol

    @property
    def coupling(self):
        return self.pairwise.coupling

    @property
    def H(self) -> Tensor:
        return self.pairwise.H

    @property
    def log_H(self) -> Tensor:
        return self.pairwise.log_H

    @property
    def T(self) -> Tensor:
        return self.triangle.T

    @property
    def log_T(self) -> Tensor:
        return self.triangle.log_T

    def forward(
        self,
        log_self: Tensor,
        edge_index: Tensor,
        triangles: Optional[Tensor] = None,
        *,
        edge_weight: Optional[Tensor] = None,
        rev_index: Optional[Tensor] = None,
        known_labels: Optional[Tensor] = None,
        known_mask: Optional[Tensor] = None,
        num_steps: Optional[int] = None,
        return_residuals: bool = False,
        kernel: Optional[str] = None,
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        if triangles is None or triangles.numel() == 0:
            if triangles is not None:
                check_triangles(triangles, log_self.size(0))  # a [2, 0] by mistake still says so
            out = self.pairwise(log_self, edge_index, edge_weight, rev_index=rev_index, known_labels=known_labels,
                                known_mask=known_mask, num_steps=num_steps, return_residuals=return_residuals,
                                kernel=kernel)
            self.last_backend, self.last_reason = self.pairwise.last_backend, None
            return out
        if log_self.dtype in (torch.float16, torch.bfloat16):
            out = self(log_self.float(), edge_index, triangles, edge_weight=edge_weight, rev_index=rev_index,
                       known_labels=known_labels, known_mask=known_mask, num_steps=num_steps,
                       return_residuals=return_residuals, kernel=kernel)
            return out.to(log_self.dtype) if isinstance(out, Tensor) else (out[0].to(log_self.dtype), out[1])
        kernel = self.pairwise.kernel if kernel is None else kernel
        if kernel == "fused":
            raise ValueError("kernel='fused': no compiled kernel runs triangle factors; use kernel='auto' or 'eager'")
        self.last_backend = "motif-eager"
        self.last_reason = ("backward='implicit' is not implemented with triangle factors: the steps are unrolled"
                            if self.pairwise.backward == "implicit" and torch.is_grad_enabled() else None)
        return self._motif_bp(log_self, edge_index, triangles, edge_weight, rev_index, known_labels, known_mask,
                              num_steps, return_residuals)

    def _motif_bp(self, log_self: Tensor, edge_index: Tensor, triangles: Tensor, edge_weight: Optional[Tensor],
                  rev_index: Optional[Tensor], known_labels: Optional[Tensor], known_mask: Optional[Tensor],
                  num_steps: Optional[int], return_residuals: bool) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        edge_index, edge_weight = to_edge_index(edge_index, edge_weight)
        check_bp_inputs(log_self, edge_index, self.num_classes, rev_index, edge_weight, known_labels, known_mask)
        num_nodes, c = log_self.shape
        check_triangles(triangles, num_nodes)
        triangles = triangles.long()
        steps = self.num_steps if num_steps is None else num_steps
        _check_steps(steps)
        if not self.pairwise_on_triangle_edges:
            # the sides of the triangles carry T alone; drop their pairwise factors (both directions)
            keep = ~covered_edge_mask(triangles, edge_index, num_nodes)
            if not bool(keep.all()):
                edge_index = edge_index[:, keep]
                edge_weight = None if edge_weight is None else edge_weight[keep]
                rev_index = None
        if rev_index is None:
            rev_index = reverse_edge_index(edge_index, num_nodes)
        check_symmetric_weight(edge_weight, rev_index)
        dtype = log_self.dtype
        log_H = self.coupling.log_H.to(dtype)
        check_coupling_range(log_H, dtype)
        factor_log = self.triangle().to(dtype)
        check_triangle_range(factor_log, dtype, self.triangle.form)

        pin = None
        if known_mask is not None:
            if known_labels is None:
                raise ValueError("known_mask given without known_labels")
            clamp = clamp_log_potential(torch.where(known_mask, known_labels, 0), c, dtype)

            def pin(b: Tensor) -> Tensor:
                return torch.where(known_mask.view(-1, 1), clamp, b)

        phi = log_normalize(log_self)
        if pin is not None:
            phi = pin(phi)
        src, dst = edge_index[0], edge_index[1]
        corners = triangles.reshape(-1)
        damping = self.damping
        log_belief = phi
        log_msg = log_self.new_full((src.numel(), c), -math.log(c))
        log_tmsg = log_self.new_full((3, triangles.size(1), c), -math.log(c))
        residuals: List[Tensor] = []
        for _ in range(steps):
            # both kinds of message from the previous step's beliefs (a synchronous step)
            new_msg = log_messages(log_belief, log_msg, src, rev_index, log_H, damping, edge_weight)
            log_tmsg = triangle_messages(log_belief, log_tmsg, triangles, factor_log, self.triangle.form, damping)
            log_msg = new_msg
            prev = log_belief
            total = phi.index_add(0, dst, log_msg).index_add(0, corners, log_tmsg.reshape(-1, c))
            log_belief = log_normalize(total)
            if pin is not None:
                log_belief = pin(log_belief)
            if return_residuals or self.tol is not None:
                res = ((log_belief.detach().exp() - prev.detach().exp()).abs().sum(-1).amax() if num_nodes
                       else log_belief.new_zeros(()))
                residuals.append(res)
                if self.tol is not None and float(res) < self.tol:
                    break
        if return_residuals:
            return log_belief, torch.stack(residuals) if residuals else log_belief.new_zeros(0)
        return log_belief

    def __repr__(self) -> str:
        t = self.triangle
        rank = f", rank={t.rank}" if t.form == "cp" else ""
        return (f"{self.__class__.__name__}(num_classes={self.num_classes}, num_steps={self.num_steps}, "
                f"damping={self.damping}, tol={self.tol}, learn_coupling={self.coupling.learnable}, "
                f"triangle_form={t.form!r}{rank}, learn_triangle={t.learnable}, "
                f"pairwise_on_triangle_edges={self.pairwise_on_triangle_edges}, "
                f"backward={self.pairwise.backward!r}, kernel={self.pairwise.kernel!r})")
