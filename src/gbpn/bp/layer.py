"""Differentiable loopy belief propagation in log space."""
from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Callable, Optional, Set, Tuple, Union

import torch
from torch import Tensor, nn

from gbpn.graph.adjacency import to_edge_index
from gbpn.bp.coupling import Coupling
from gbpn.bp.backends.pairs import Boundary
from gbpn.bp.functional import clamp_log_potential
from gbpn.graph.reverse import reverse_edge_index
from gbpn.bp.implicit import ImplicitStats
from gbpn.bp.validation import check_bp_inputs, check_coupling_range, check_pairs, check_symmetric_weight
from gbpn.bp.dispatch import check_kernel, run
from gbpn.bp.problem import BPOptions, BPProblem, BPResult, check_options

if TYPE_CHECKING:
    from typing_extensions import Unpack


def _check_steps(steps: int) -> None:
    try:
        whole = not isinstance(steps, bool) and operator.index(steps) == steps
    except TypeError:  # 2.5, "5", None
        whole = False
    if not whole or steps < 0:
        raise ValueError(f"num_steps must be a whole number >= 0, got {steps!r}")


def outputs(result: BPResult, options: BPOptions) -> Union[Tensor, Tuple[Tensor, ...]]:
    """What a BP call returns: the log-beliefs, then the residuals and the messages where asked for."""
    log_belief = result.log_belief
    if not (options.get("return_residuals") or options.get("return_messages")):
        return log_belief
    out: Tuple[Tensor, ...] = (log_belief,)
    if options.get("return_residuals"):
        out += (torch.stack(result.residuals) if result.residuals else log_belief.new_zeros(0),)
    if options.get("return_messages"):
        out += (result.messages,)
    return out


class BeliefPropagation(nn.Module):
    r"""Loopy sum-product belief propagation on a pairwise MRF with a shared coupling.

    With self-potentials :math:`\phi_i` (given as :math:`\log\phi_i`) and the
    coupling :math:`H` of :class:`~gbpn.bp.coupling.Coupling`, starting from
    :math:`\log m^{(0)}_{i\to j} = -\log c` and :math:`\log p^{(0)}_i = \log\phi_i`,
    each step :math:`t = 1, \dots, K` computes for every directed edge :math:`i \to j`

    .. math::
        \log m^{(t)}_{i\to j}(y_j) &\cong \mathrm{LSE}_{y_i}\big[w_{ij}\log H_{y_i y_j}
            + \log p^{(t-1)}_i(y_i) - \log m^{(t-1)}_{j\to i}(y_i)\big] \\
        \log p^{(t)}_i(y_i) &\cong \log\phi_i(y_i) + \sum_{j\in N(i)} \log m^{(t)}_{j\to i}(y_i)

    where :math:`\cong` is equality after log-normalisation over classes, and
    :math:`w_{ij} = 1` unless ``edge_weight`` is given. With damping
    :math:`\lambda`, the new message is :math:`(1-\lambda) m^{(t)} + \lambda m^{(t-1)}`.

    Known labels are *evidence*: a node in ``known_mask`` has its belief fixed to
    the one-hot of its label at every step, so its messages are
    :math:`\log H_{y_i,\cdot}` normalised. This is exact conditioning of the MRF
    on those labels and the known nodes stay clamped.

    The message update is a max-shifted exponential and a ``[E, c] @ [c, c]``
    product (:func:`~gbpn.bp.functional.normalized_message`): memory per step is
    :math:`O(E\,c)`, never :math:`O(E\,c^2)`. Edges are processed in the paired layout of
    :func:`~gbpn.graph.reverse.paired_order` (both directions of an edge half the edge list
    apart), so the cavity reads reverse messages without a gather. At inference (no gradient,
    no edge or message weights) messages are kept in the linear domain
    (:func:`~gbpn.bp.functional.linear_message`): one exponential per node instead of one per
    edge, the same result up to rounding.

    Args:
        num_classes (int): number of classes :math:`c`.
        num_steps (int, optional): BP steps :math:`K`. (default: ``5``)
        damping (float, optional): :math:`\lambda \in [0, 1)`. (default: ``0.0``)
        tol (float, optional): stop early once the largest change of any belief
            (L1 over classes) is below ``tol``; ``None`` always runs ``K`` steps.
            (default: ``None``)
        learn_coupling (bool, optional): learn :math:`H` or keep it fixed.
            (default: ``True``)
        coupling_init (Tensor, optional): initial :math:`H`. (default: all ones)
        backward (str, optional): ``"unroll"`` back-propagates through the :math:`K` steps;
            ``"implicit"`` runs BP to its fixed point without recording the steps (at most
            ``max_steps``, until the belief change is below ``tol``, default ``1e-4``) and
            differentiates the fixed point implicitly (:mod:`gbpn.bp.implicit`; on CPU by the fused
            kernels, :func:`~gbpn.bp.backends.cpu_fused.fused_implicit_bp`): training memory is one step's,
            whatever the number of steps; convergence counts are in :attr:`implicit_stats`.
            (default: ``"unroll"``)
        max_steps (int, optional): with ``backward="implicit"``, the most steps of a pass, in training
            and at inference (where it runs to ``tol`` too); ``None``: ``num_steps`` (models saved before
            this option held the bound there). Unused when unrolling. (default: ``None``)
        kernel (str, optional): ``"auto"`` runs the first backend of
            :data:`gbpn.bp.dispatch.BACKENDS` that accepts the call: the two-class log-odds kernels
            on CPU (``cpu_binary``), the fused numba kernels on CPU, forward and backward
            (``cpu_fused``), Triton at inference on CUDA up to two classes (``cuda_triton``), else the
            eager reference (``eager``). A backend's name runs that backend (``"eager"``: the reference)
            and ``"fused"`` any compiled one (:data:`gbpn.bp.dispatch.KERNELS`); either raises
            ``ValueError`` where it does not apply, saying why. ``forward(..., kernel=...)``
            overrides it per call; :attr:`last_backend` names the backend that ran (the same names) and
            :func:`~gbpn.bp.dispatch.explain_dispatch` of :meth:`problem` says why each earlier one
            declined. On CPU, from
            :data:`gbpn.graph.layouts.REORDER_MIN_NODES` nodes on, the fused kernels work on the nodes
            renumbered for locality (:func:`~gbpn.graph.layouts.locality_order`, once per graph, cached
            with its layout; inputs and outputs keep the graph's numbering). (default: ``"auto"``)

    The call is ``forward(log_self, edge_index, edge_weight=None, **options)``, the options
    (:class:`~gbpn.bp.problem.BPOptions`) keyword-only: ``rev_index``, ``known_labels``, ``known_mask``,
    ``num_steps`` (this call's :math:`K`), ``return_residuals``, ``return_messages``, ``edge_chunk``,
    ``message_weight``, ``kernel`` and ``messages`` (below). float16 and bfloat16 ``log_self`` run BP in float32 and get
    beliefs in their own dtype. ``edge_index`` may be a ``[2, E]`` tensor, a
    :class:`torch_geometric.EdgeIndex` or a ``torch.sparse`` COO / CSR adjacency ``[N, N]`` (its values,
    unless all 1, are the edge weights); all give the same beliefs. The graph must be undirected
    (``torch_geometric.transforms.ToUndirected()``). Without ``rev_index`` each call sorts the edges to
    find every edge's reverse; :class:`~gbpn.graph.transforms.AddReverseIndex` precomputes it once.

    ``torch.compile``: with ``rev_index`` given and ``tol=None`` the forward compiles without graph
    breaks (known labels included); compiled, it gathers reverse messages through ``rev_index`` and
    stays in the log domain.

    Shapes:
        - **input:** log self-potentials ``[N, c]``, ``edge_index`` ``[2, E]``
          (symmetric, no duplicates, no self-loops) or sparse ``[N, N]``, ``edge_weight`` ``[E]``
          (optional, symmetric), ``rev_index`` ``[E]`` (optional), ``known_labels`` ``[N]``
          and ``known_mask`` ``[N]`` (optional)
        - **output:** normalised log-beliefs ``[N, c]``; with ``return_residuals``
          also the per-step residuals ``[K']``, with ``return_messages`` also the
          final log-messages ``[E, c]`` (row ``e`` is the message along edge ``e``)

    ``message_weight`` ``[E]`` scales each incoming log-message in the sums above,
    :math:`\log p_i \cong \log\phi_i + \sum_j w'_{j\to i} \log m_{j\to i}` (and the
    cavity removes :math:`w'_{j\to i} \log m_{j\to i}`): the importance weights of
    sub-sampled neighbours (:mod:`gbpn.sampling.importance`).

    ``edge_chunk`` (inference only) computes each step's messages in chunks of that many
    edges, so memory stays at two ``[E, c]`` message buffers plus one chunk.

    BP state is data: ``messages`` ``[E, c]`` (the log-messages a call returned with
    ``return_messages``) continues from them instead of uniform messages, the beliefs being those
    they make, :math:`\log p_i \cong \log\phi_i + \sum_j \log m_{j\to i}` (pinned at the known
    nodes): ``K`` steps then ``K'`` more from the returned messages are ``K + K'`` steps, up to
    rounding (the continuation runs on the eager path). A convergence study over ``T`` steps so
    costs ``T`` steps (:func:`gbpn.experiments.convergence.convergence`).

    Inputs are checked (:func:`~gbpn.bp.validation.check_bp_inputs`; the edges once per graph,
    by tensor identity and in-place version; skipped inside
    :func:`~gbpn.bp.validation.unchecked`) and a ``log H`` wider than the dtype computes
    exactly is refused (:func:`~gbpn.bp.validation.check_coupling_range`): ``ValueError``.
    """

    def __init__(
        self,
        num_classes: int,
        num_steps: int = 5,
        damping: float = 0.0,
        tol: Optional[float] = None,
        learn_coupling: bool = True,
        coupling_init: Optional[Tensor] = None,
        backward: str = "unroll",
        kernel: str = "auto",
        max_steps: Optional[int] = None,
    ):
        super().__init__()
        check_kernel(kernel)
        if backward not in ("unroll", "implicit"):
            raise ValueError(f"backward must be 'unroll' or 'implicit', got {backward!r}")
        if backward == "implicit" and tol is None:
            tol = 1e-4
        _check_steps(num_steps)
        if max_steps is not None:
            _check_steps(max_steps)
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        if tol is not None and not 0.0 <= tol < math.inf:
            raise ValueError(f"tol must be a finite number >= 0 (or None: run every step), got {tol}")
        self.num_classes = num_classes
        self.num_steps = num_steps
        self.max_steps = max_steps
        self.damping = damping
        self.tol = tol
        self.backward = backward
        self.kernel = kernel
        self.last_backend: Optional[str] = None
        self.implicit_stats = ImplicitStats()
        self.coupling = Coupling(num_classes, learnable=learn_coupling, init=coupling_init)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.coupling.reset_parameters()

    @property
    def H(self) -> Tensor:
        return self.coupling.H

    @property
    def log_H(self) -> Tensor:
        return self.coupling.log_H

    def steps_of(self, num_steps: Optional[int] = None) -> int:
        """The steps a call runs: ``num_steps`` when given, else :math:`K` (``num_steps``), or with
        ``backward="implicit"`` its bound ``max_steps`` (when set)."""
        if num_steps is None:
            num_steps = self.max_steps if self.backward == "implicit" and self.max_steps is not None else self.num_steps
        _check_steps(num_steps)
        return num_steps

    def forward(self, log_self: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                **options: Unpack[BPOptions]) -> Union[Tensor, Tuple[Tensor, ...]]:
        # float16/bfloat16 have too few exponent bits for messages (a coupling's e^12 overflows float16): BP
        # runs in float32 and hands back the input's precision, as autocast does for reductions
        half = log_self.dtype in (torch.float16, torch.bfloat16)
        result = run(self.problem(log_self.float() if half else log_self, edge_index, edge_weight, **options))
        self.last_backend = result.backend
        if half:
            result = result._replace(log_belief=result.log_belief.to(log_self.dtype))
        return outputs(result, options)

    def problem(self, log_self: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                **options: Unpack[BPOptions]) -> BPProblem:
        """The checked :class:`~gbpn.bp.problem.BPProblem` of a :meth:`forward` call with these
        arguments; :func:`~gbpn.bp.dispatch.explain_dispatch` of it says which backend runs it."""
        check_options(options, "forward")
        o = options
        rev_index, known_labels, known_mask = o.get("rev_index"), o.get("known_labels"), o.get("known_mask")
        edge_chunk, message_weight, messages = o.get("edge_chunk"), o.get("message_weight"), o.get("messages")
        if o.get("triangles") is not None:
            raise ValueError("triangles given to a pairwise model: triangle factors need MotifBeliefPropagation "
                             "(GBPN(..., motifs='triangle'))")
        compiling = torch.compiler.is_compiling()
        edge_index, edge_weight = to_edge_index(edge_index, edge_weight)
        if not compiling:  # the checks read values on the host (graph breaks): compiled code skips them
            check_bp_inputs(log_self, edge_index, self.num_classes, rev_index, edge_weight, known_labels, known_mask,
                            message_weight)
        num_nodes, c = log_self.shape
        if c != self.num_classes:
            raise ValueError(f"log_self has {c} classes, the layer was built for {self.num_classes}")
        steps = self.steps_of(o.get("num_steps"))
        if edge_chunk is not None and edge_chunk < 1:
            raise ValueError(f"edge_chunk must be a positive number of edges, got {edge_chunk}")
        if messages is not None and tuple(messages.shape) != (edge_index.size(1), c):
            raise ValueError(f"messages must be [E, c] = [{edge_index.size(1)}, {c}] log-messages (return_messages), "
                             f"got {tuple(messages.shape)}")
        if rev_index is None:
            rev_index = reverse_edge_index(edge_index, num_nodes)
        if not compiling:  # given or computed, the reverse index pairs each weight with its reverse's
            check_symmetric_weight(edge_weight, rev_index)
        log_H = self.coupling.log_H.to(log_self.dtype)
        if not compiling:
            check_coupling_range(log_H, log_self.dtype)
        clamp = None
        if known_mask is not None:
            if known_labels is None:
                raise ValueError("known_mask given without known_labels")
            # a [N, c] evidence table and a where(): no data-dependent shapes, so it compiles; the labels
            # of nodes outside the mask (-1, or anything) are never read
            clamp = clamp_log_potential(torch.where(known_mask, known_labels, 0), c, log_self.dtype)
        kernel = o.get("kernel")
        return BPProblem(
            log_self=log_self, edge_index=edge_index, rev_index=rev_index, log_H=log_H, num_steps=steps,
            damping=self.damping, tol=self.tol, known_labels=known_labels, known_mask=known_mask, clamp=clamp,
            edge_weight=edge_weight, message_weight=message_weight, messages=messages, backward=self.backward,
            implicit_stats=self.implicit_stats, return_residuals=bool(o.get("return_residuals", False)),
            return_messages=bool(o.get("return_messages", False)), edge_chunk=edge_chunk, compiling=compiling,
            kernel=self.kernel if kernel is None else check_kernel(kernel))

    @torch.no_grad()
    def infer_pairs(
        self,
        log_self: Tensor,
        pairs: Tensor,
        known_labels: Optional[Tensor] = None,
        known_mask: Optional[Tensor] = None,
        num_steps: Optional[int] = None,
        pair_chunk: int = 1 << 20,
        message_dtype: torch.dtype = torch.bfloat16,
        boundary: Optional[Boundary] = None,
        on_step: Optional[Callable[[int], None]] = None,
    ) -> Tensor:
        r"""Inference-only BP for graphs whose messages barely fit in memory
        (:func:`gbpn.bp.backends.pairs.pair_bp`).

        The graph is given as its undirected edges ``pairs`` ``[2, P]`` (each once, no
        self-loops); the messages of both directions of a pair share one ``[2, P, c]`` buffer
        stored in ``message_dtype`` (bfloat16 halves float32) and are updated in place a chunk
        of ``pair_chunk`` pairs at a time. The result is the same synchronous update as
        :meth:`forward` up to the rounding of the stored messages. Messages are kept in the
        linear domain, normalised, as :meth:`forward` does at inference (in the log domain,
        centred over the classes, for float16 storage or a coupling too wide for it). Without
        edge weights. Computes in the dtype of ``log_self`` (at least float32).

        Memory: ``2 P c`` stored messages plus ``O(N c)`` beliefs plus one chunk.

        On one part of a partitioned graph (:mod:`gbpn.distributed.inference`), ``pairs`` are the part's
        local edges and ``boundary`` (:class:`~gbpn.bp.backends.pairs.Boundary`) its cut edges and how
        their messages are exchanged; ``on_step(step)`` is called after each step.
        """
        check_bp_inputs(log_self, pairs.new_empty((2, 0)), self.num_classes, known_labels=known_labels,
                        known_mask=known_mask)
        check_pairs(pairs, log_self.size(0))
        steps = self.steps_of(num_steps)
        log_self = log_self.to(torch.promote_types(log_self.dtype, torch.float32))  # at least float32
        log_H = self.coupling.log_H.to(log_self.dtype)
        check_coupling_range(log_H, log_self.dtype)
        problem = BPProblem(log_self=log_self, edge_index=None, rev_index=None, log_H=log_H, num_steps=steps,
                            damping=self.damping, known_labels=known_labels, known_mask=known_mask, pairs=pairs,
                            message_dtype=message_dtype, pair_chunk=pair_chunk, boundary=boundary, on_step=on_step)
        return run(problem).log_belief

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(num_classes={self.num_classes}, num_steps={self.num_steps}, "
            f"damping={self.damping}, tol={self.tol}, learn_coupling={self.coupling.learnable}, "
            f"backward={self.backward!r}, kernel={self.kernel!r}"
            + ("" if self.max_steps is None else f", max_steps={self.max_steps}") + ")"
        )


_warm: Set[Tuple[int, torch.dtype]] = set()  # what warm_up has run in this process


def warm_up(num_classes: int, dtype: torch.dtype = torch.float32) -> None:
    """Load the CPU kernels that BP with ``num_classes`` classes runs (numba reads them from its
    cache, or compiles them on an install's first run) and pass their one-time self-tests, by one
    training and one inference call on an 8-node ring; once per process and ``(num_classes, dtype)``.
    The first BP call of a process otherwise pays this (about half a second on a 2-core machine),
    which a timed run (a benchmark's first trial) should not. Leaves torch's random state as it was.
    """
    if (num_classes, dtype) in _warm:
        return
    n = 8
    nodes = torch.arange(n)
    edge_index = torch.stack([torch.cat([nodes, (nodes + 1) % n]), torch.cat([(nodes + 1) % n, nodes])])
    layer = BeliefPropagation(num_classes).to(dtype)
    gen = torch.Generator().manual_seed(0)  # not torch's global generator: a seeded run stays as it was
    x = torch.log_softmax(torch.randn(n, num_classes, generator=gen, dtype=dtype), -1).requires_grad_()
    known, labels = nodes < 2, nodes % num_classes
    layer(x, edge_index, known_labels=labels, known_mask=known).sum().backward()
    with torch.no_grad():
        layer(x, edge_index)
    _warm.add((num_classes, dtype))
