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

The steps run in the ``motif_eager`` backend of :mod:`gbpn.bp.dispatch`
(:mod:`gbpn.bp.backends.motif`: the triangle update, a two-variable log-sum-exp that never forms
``[#triangles, c, c, c]``, in the full form :func:`triangle_message_full` or the CP form
:func:`triangle_message_cp`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from gbpn.bp.backends.motif import triangle_message_cp, triangle_message_full, triangle_messages
from gbpn.bp.dispatch import run
from gbpn.bp.layer import BeliefPropagation, _check_steps, outputs
from gbpn.bp.numerics import REFUSE
from gbpn.bp.problem import BPOptions, BPProblem, check_options
from gbpn.bp.triangle_factor import TriangleFactor
from gbpn.bp.validation import check_bp_inputs
from gbpn.graph.adjacency import to_edge_index
from gbpn.graph.triangles import covered_edge_mask

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MotifBeliefPropagation", "check_triangle_range", "check_triangles", "triangle_message_cp",
           "triangle_message_full", "triangle_messages"]


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


class MotifBeliefPropagation(nn.Module):
    r"""Loopy BP with unary, pairwise and triangle factors (the equations of :mod:`gbpn.bp.motifs`).

    Holds a :class:`~gbpn.bp.layer.BeliefPropagation` (``self.pairwise``, whose
    :class:`~gbpn.bp.coupling.Coupling` is :attr:`coupling`) and a
    :class:`~gbpn.bp.triangle_factor.TriangleFactor` (:attr:`triangle`). Called without triangles
    (``triangles=None`` or ``[3, 0]``) it *is* the pairwise layer: the call goes to ``self.pairwise``,
    so beliefs, backends (fused kernels, the implicit backward) and gradients are those of today's BP,
    bit for bit. With triangles it runs the ``motif_eager`` backend; :attr:`last_backend` is then
    ``"motif_eager"`` and :attr:`last_reason` says in one line what that path does not do that was asked
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

    The call is ``forward(log_self, edge_index, triangles=None, **options)``, the options of the pairwise
    layer (:class:`~gbpn.bp.problem.BPOptions`, ``edge_weight`` among them); with triangles
    ``return_messages``, ``messages``, ``message_weight`` and ``edge_chunk`` are refused.
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

    def forward(self, log_self: Tensor, edge_index: Tensor, triangles: Optional[Tensor] = None,
                **options: Unpack[BPOptions]) -> Union[Tensor, Tuple[Tensor, ...]]:
        check_options(options, "forward")
        if triangles is None or triangles.numel() == 0:
            if triangles is not None:
                check_triangles(triangles, log_self.size(0))  # a [2, 0] by mistake still says so
            out = self.pairwise(log_self, edge_index, **options)
            self.last_backend, self.last_reason = self.pairwise.last_backend, None
            return out
        half = log_self.dtype in (torch.float16, torch.bfloat16)  # run in float32, as the pairwise layer
        result = run(self.problem(log_self.float() if half else log_self, edge_index, triangles, **options))
        self.last_backend = result.backend
        self.last_reason = ("backward='implicit' is not implemented with triangle factors: the steps are unrolled"
                            if self.pairwise.backward == "implicit" and torch.is_grad_enabled() else None)
        if half:
            result = result._replace(log_belief=result.log_belief.to(log_self.dtype))
        return outputs(result, options)

    def problem(self, log_self: Tensor, edge_index: Tensor, triangles: Tensor,
                **options: Unpack[BPOptions]) -> BPProblem:
        """The checked :class:`~gbpn.bp.problem.BPProblem` of a call with triangles: the pairwise layer's,
        with the triangles and the factor (and without the pairwise factors of the triangles' sides
        where ``pairwise_on_triangle_edges=False``)."""
        options = dict(options)
        edge_index, edge_weight = to_edge_index(edge_index, options.pop("edge_weight", None))
        num_nodes = log_self.size(0)
        if not self.pairwise_on_triangle_edges:
            # the sides of the triangles carry T alone; drop their pairwise factors (both directions)
            check_bp_inputs(log_self, edge_index, self.num_classes, options.get("rev_index"), edge_weight,
                            options.get("known_labels"), options.get("known_mask"))
            check_triangles(triangles, num_nodes)
            keep = ~covered_edge_mask(triangles.long(), edge_index, num_nodes)
            if not bool(keep.all()):
                edge_index = edge_index[:, keep]
                edge_weight = None if edge_weight is None else edge_weight[keep]
                options["rev_index"] = None
        problem = self.pairwise.problem(log_self, edge_index, edge_weight, **options)
        check_triangles(triangles, num_nodes)
        factor_log = self.triangle().to(log_self.dtype)
        check_triangle_range(factor_log, log_self.dtype, self.triangle.form)
        return replace(problem, triangles=triangles.long(), triangle_log=factor_log, triangle_form=self.triangle.form)

    def __repr__(self) -> str:
        t = self.triangle
        rank = f", rank={t.rank}" if t.form == "cp" else ""
        return (f"{self.__class__.__name__}(num_classes={self.num_classes}, num_steps={self.num_steps}, "
                f"damping={self.damping}, tol={self.tol}, learn_coupling={self.coupling.learnable}, "
                f"triangle_form={t.form!r}{rank}, learn_triangle={t.learnable}, "
                f"pairwise_on_triangle_edges={self.pairwise_on_triangle_edges}, "
                f"backward={self.pairwise.backward!r}, kernel={self.pairwise.kernel!r})")
