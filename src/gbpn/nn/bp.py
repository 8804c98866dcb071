"""Differentiable loopy belief propagation in log space."""
from __future__ import annotations

import math
import operator
from typing import List, Optional, Set, Tuple, Union

import torch
from torch import Tensor, nn

from gbpn.nn.adjacency import to_edge_index
from gbpn.nn.coupling import Coupling
from gbpn.nn.functional import (
    aggregate,
    cavity,
    clamp_log_potential,
    linear_message,
    log_matmul_exp_weighted,
    log_normalize,
    normalized_message,
    pairing,
    reverse_edge_index,
)
from gbpn.nn.binary import binary_bp, binary_unavailable, pair_layout
from gbpn.nn.fused import csr_layout, fused_bp, fused_implicit_bp, fused_unavailable, needs_grad, spread_ok
from gbpn.nn.fused_triton import device_csr, triton_bp, triton_unavailable
from gbpn.nn.pairs import LINEAR_MAX_SPREAD, pair_bp
from gbpn.nn.implicit import ImplicitStats, autograd_linearization, bp_linearization, implicit_messages
from gbpn.nn.validation import check_bp_inputs, check_coupling_range, check_pairs, check_symmetric_weight



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


# kernel="auto" keeps the eager path on CPU for two classes on graphs this large where the binary
# log-odds kernel (gbpn.nn.binary) cannot run (edge weights; messages returned in training): its
# linear-domain step measured 1.25x faster at inference and 1.13x in training than the general kernel
# on the arXiv-sized graph at c = 2
_EAGER_MAX_CLASSES, _EAGER_MIN_EDGES = 2, 1_000_000
# On CUDA kernel="auto" runs the Triton step only up to this many classes: on an H200, arXiv-sized
# graph (benchmarks/triton_blocks.py) it took 0.61x the eager step at c = 2 but 1.6x at c = 7 and
# 2.2-2.7x at c = 40 and 47
_TRITON_MAX_CLASSES = 2


def _check_kernel(kernel: str) -> str:
    if kernel not in ("auto", "fused", "eager"):
        raise ValueError(f"kernel must be 'auto', 'fused' or 'eager', got {kernel!r}")
    return kernel


def _fused_unsupported(log_self: Tensor, log_H: Tensor, edge_weight: Optional[Tensor],
                       message_weight: Optional[Tensor], steps: int, edge_chunk: Optional[int], implicit: bool,
                       compiling: bool) -> Optional[str]:
    """Why the fused kernels (:mod:`gbpn.nn.fused` on CPU, :mod:`gbpn.nn.fused_triton` on CUDA) cannot
    run this call, or ``None`` if they can."""
    if compiling or torch._C._are_functorch_transforms_active():
        return "torch.compile / torch.func tracing needs the eager torch operations"
    device = log_self.device
    if device.type not in ("cpu", "cuda") or log_self.dtype not in (torch.float32, torch.float64):
        return f"no fused kernel for {log_self.dtype} on {device.type} (CPU and CUDA, float32/float64 only)"
    if implicit and device.type == "cuda":
        return "backward='implicit' differentiates the fixed point on the eager path on CUDA"
    if edge_chunk is not None:
        return "edge_chunk bounds the eager path's temporaries"
    if steps == 0 or log_self.size(0) == 0:
        return "nothing to propagate"
    if message_weight is not None and message_weight.requires_grad and torch.is_grad_enabled():
        return "gradients to message_weight"
    if device.type == "cuda":
        if needs_grad(log_self, log_H, edge_weight):
            return "the CUDA kernels are inference-only: training on CUDA runs the eager path"
        if edge_weight is not None:
            return "edge weights (a per-edge H^w) run on the eager path on CUDA"
    if not spread_ok(log_H.detach(), None if edge_weight is None else edge_weight.detach(), log_self.dtype):
        return "log H (times the edge weights) spreads too wide for the linear-domain kernel"
    return fused_unavailable(log_self.dtype) if device.type == "cpu" else triton_unavailable(log_self.dtype, device)


def _check_steps(steps: int) -> None:
    try:
        whole = not isinstance(steps, bool) and operator.index(steps) == steps
    except TypeError:  # 2.5, "5", None
        whole = False
    if not whole or steps < 0:
        raise ValueError(f"num_steps must be a whole number >= 0, got {steps!r}")


def _outputs(log_belief: Tensor, residuals: List[Tensor], log_msg: Optional[Tensor], return_residuals: bool,
             return_messages: bool) -> Union[Tensor, Tuple[Tensor, ...]]:
    if not (return_residuals or return_messages):
        return log_belief
    out: Tuple[Tensor, ...] = (log_belief,)
    if return_residuals:
        out += (torch.stack(residuals) if residuals else log_belief.new_zeros(0),)
    if return_messages:
        out += (log_msg,)
    return out


class BeliefPropagation(nn.Module):
    r"""Loopy sum-product belief propagation on a pairwise MRF with a shared coupling.

    With self-potentials :math:`\phi_i` (given as :math:`\log\phi_i`) and the
    coupling :math:`H` of :class:`~gbpn.nn.coupling.Coupling`, starting from
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
    product (:func:`~gbpn.nn.functional.normalized_message`): memory per step is
    :math:`O(E\,c)`, never :math:`O(E\,c^2)`. Edges are processed in the paired layout of
    :func:`~gbpn.nn.functional.paired_order` (both directions of an edge half the edge list
    apart), so the cavity reads reverse messages without a gather. At inference (no gradient,
    no edge or message weights) messages are kept in the linear domain
    (:func:`~gbpn.nn.functional.linear_message`): one exponential per node instead of one per
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
            :math:`K`, until the belief change is below ``tol``, default ``1e-4``) and
            differentiates the fixed point implicitly (:mod:`gbpn.nn.implicit`; on CPU by the fused
            kernels, :func:`~gbpn.nn.fused.fused_implicit_bp`): training memory is one step's,
            whatever the number of steps; convergence counts are in :attr:`implicit_stats`.
            (default: ``"unroll"``)
        kernel (str, optional): ``"auto"`` runs each step as one fused numba pass over the edges,
            forward and backward (:mod:`gbpn.nn.fused`), on CPU (with two classes and no edge
            weights: in log-odds, one number per message, :mod:`gbpn.nn.binary`), and at inference on CUDA with two
            classes as two Triton kernels (:mod:`gbpn.nn.fused_triton`; slower than eager from 7
            classes on so far; training and edge weights on CUDA run eager), wherever they apply
            (float32/float64, not under ``torch.compile`` or ``torch.func``, no ``edge_chunk``, no
            ``backward="implicit"`` training on CUDA or returning messages (nor the log-odds kernel),
            no gradient to ``message_weight``, coupling spread
            within the dtype) and the eager path otherwise; ``"eager"`` always runs the eager path
            (the reference);
            ``"fused"`` raises ``ValueError`` where the fused kernels do not apply. ``forward(...,
            kernel=...)`` overrides it per call; :attr:`last_kernel` says which ran. On CPU, from
            :data:`gbpn.nn.fused.REORDER_MIN_NODES` nodes on, the fused kernels work on the nodes
            renumbered for locality (:func:`~gbpn.nn.fused.locality_order`, once per graph, cached
            with its layout; inputs and outputs keep the graph's numbering). (default: ``"auto"``)

    The call is ``forward(log_self, edge_index, edge_weight=None, *, rev_index=None, ...)``, everything
    after ``edge_weight`` keyword-only. float16 and bfloat16 ``log_self`` run BP in float32 and get
    beliefs in their own dtype. ``edge_index`` may be a ``[2, E]`` tensor, a
    :class:`torch_geometric.EdgeIndex` or a ``torch.sparse`` COO / CSR adjacency ``[N, N]`` (its values,
    unless all 1, are the edge weights); all give the same beliefs. The graph must be undirected
    (``torch_geometric.transforms.ToUndirected()``). Without ``rev_index`` each call sorts the edges to
    find every edge's reverse; :class:`~gbpn.transforms.AddReverseIndex` precomputes it once.

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

    Inputs are checked (:func:`~gbpn.nn.validation.check_bp_inputs`; the edges once per graph,
    by tensor identity and in-place version; skipped inside
    :func:`~gbpn.nn.validation.unchecked`) and a ``log H`` wider than the dtype computes
    exactly is refused (:func:`~gbpn.nn.validation.check_coupling_range`): ``ValueError``.
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
    ):
        super().__init__()
        _check_kernel(kernel)
        if backward not in ("unroll", "implicit"):
            raise ValueError(f"backward must be 'unroll' or 'implicit', got {backward!r}")
        if backward == "implicit" and tol is None:
            tol = 1e-4
        _check_steps(num_steps)
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        if tol is not None and not 0.0 <= tol < math.inf:
            raise ValueError(f"tol must be a finite number >= 0 (or None: run every step), got {tol}")
        self.num_classes = num_classes
        self.num_steps = num_steps
        self.damping = damping
        self.tol = tol
        self.backward = backward
        self.kernel = kernel
        self.last_kernel: Optional[str] = None
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

    def forward(
        self,
        log_self: Tensor,
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
        *,
        rev_index: Optional[Tensor] = None,
        known_labels: Optional[Tensor] = None,
        known_mask: Optional[Tensor] = None,
        num_steps: Optional[int] = None,
        return_residuals: bool = False,
        return_messages: bool = False,
        edge_chunk: Optional[int] = None,
        message_weight: Optional[Tensor] = None,
        kernel: Optional[str] = None,
    ) -> Union[Tensor, Tuple[Tensor, ...]]:
        if log_self.dtype in (torch.float16, torch.bfloat16):
            # too few exponent bits for messages (a coupling's e^12 overflows float16): BP runs in
            # float32 and hands back the input's precision, as autocast does for reductions
            out = self(log_self.float(), edge_index, edge_weight, rev_index=rev_index, known_labels=known_labels,
                       known_mask=known_mask, num_steps=num_steps, return_residuals=return_residuals,
                       return_messages=return_messages, edge_chunk=edge_chunk, message_weight=message_weight,
                       kernel=kernel)
            return out.to(log_self.dtype) if isinstance(out, Tensor) else (out[0].to(log_self.dtype), *out[1:])
        compiling = torch.compiler.is_compiling()
        edge_index, edge_weight = to_edge_index(edge_index, edge_weight)
        if not compiling:  # the checks read values on the host (graph breaks): compiled code skips them
            check_bp_inputs(log_self, edge_index, self.num_classes, rev_index, edge_weight, known_labels, known_mask,
                            message_weight)
        num_nodes, c = log_self.shape
        if c != self.num_classes:
            raise ValueError(f"log_self has {c} classes, the layer was built for {self.num_classes}")
        steps = self.num_steps if num_steps is None else num_steps
        _check_steps(steps)
        if edge_chunk is not None and edge_chunk < 1:
            raise ValueError(f"edge_chunk must be a positive number of edges, got {edge_chunk}")
        src, dst = edge_index[0], edge_index[1]
        if rev_index is None:
            rev_index = reverse_edge_index(edge_index, num_nodes)
        if not compiling:  # given or computed, the reverse index pairs each weight with its reverse's
            check_symmetric_weight(edge_weight, rev_index)
        implicit = self.backward == "implicit" and torch.is_grad_enabled() and steps > 0 and edge_chunk is None
        log_H = self.coupling.log_H.to(log_self.dtype)
        if not compiling:
            check_coupling_range(log_H, log_self.dtype)

        clamp = known_col = None  # (set before pin's closure reads it: dynamo refuses an unset cell)
        if known_mask is not None:
            if known_labels is None:
                raise ValueError("known_mask given without known_labels")
            # a [N, c] evidence table and a where(): no data-dependent shapes, so it compiles; the labels
            # of nodes outside the mask (-1, or anything) are never read
            clamp = clamp_log_potential(torch.where(known_mask, known_labels, 0), c, log_self.dtype)
            known_col = known_mask.view(-1, 1)

        def pin(log_belief: Tensor) -> Tensor:
            return log_belief if clamp is None else torch.where(known_col, clamp, log_belief)

        kernel = self.kernel if kernel is None else _check_kernel(kernel)
        # two classes on CPU: the log-odds kernel, one number per message (messages out at inference only)
        binary = (c == 2 and log_self.device.type == "cpu" and edge_weight is None and not implicit
                  and not (return_messages and needs_grad(log_self, log_H)))
        if kernel == "auto" and (c > _TRITON_MAX_CLASSES if log_self.is_cuda
                                 else not binary and c <= _EAGER_MAX_CLASSES and src.numel() > _EAGER_MIN_EDGES):
            kernel = "eager"  # measured faster there (benchmarks/bp_step.py, triton_blocks.py, README)
        if kernel != "eager":
            why = _fused_unsupported(log_self, log_H, edge_weight, message_weight, steps, edge_chunk, implicit,
                                     compiling)
            if why is None and implicit and return_messages:
                why = "backward='implicit' returns its messages from the eager path"
            pairs = pair_layout(edge_index, rev_index, num_nodes) if why is None and binary else None
            if pairs is not None and binary_unavailable() is None:
                self.last_kernel = "fused"
                log_belief, residuals, log_msg = binary_bp(
                    pin(log_normalize(log_self)), log_H, pairs, steps, self.damping, self.tol, known_mask, clamp,
                    message_weight, return_residuals, return_messages)
                return _outputs(pin(log_belief), residuals, log_msg, return_residuals, return_messages)
            cuda = log_self.device.type == "cuda"
            if why is None:
                layout = device_csr(edge_index, rev_index, num_nodes) if cuda else csr_layout(edge_index, rev_index,
                                                                                                num_nodes)
                if implicit and not layout.reverse_pairs:
                    why = "backward='implicit' on the fused kernels needs each edge paired with its own reverse edge"
            if why is None:
                self.last_kernel = "fused"
                phi = pin(log_normalize(log_self))

                def csr(w: Optional[Tensor]) -> Optional[Tensor]:  # edge-ordered -> CSR-ordered
                    return w if w is None or layout.perm is None else w.index_select(0, layout.perm)

                if implicit:
                    log_belief, residuals = fused_implicit_bp(
                        phi, log_H, layout, steps, self.damping, self.tol, known_mask, clamp, csr(edge_weight),
                        csr(message_weight), self.implicit_stats)
                    return _outputs(log_belief, residuals, None, return_residuals, False)
                if cuda:
                    log_belief, residuals, log_msg = triton_bp(
                        phi, log_H, layout, steps, self.damping, self.tol, known_mask, clamp, csr(message_weight),
                        return_residuals, return_messages)
                else:
                    log_belief, residuals, log_msg = fused_bp(
                        phi, log_H, layout, steps, self.damping, self.tol, known_mask, clamp, csr(edge_weight),
                        csr(message_weight), return_residuals, return_messages)
                if return_messages and layout.perm is not None:
                    log_msg = log_msg.new_empty(log_msg.shape).index_copy(0, layout.perm, log_msg)
                return _outputs(log_belief, residuals, log_msg, return_residuals, return_messages)
            if kernel == "fused":
                raise ValueError(f"kernel='fused' does not apply to this call: {why}")
        self.last_kernel = "eager"
        if implicit:  # the fixed point by the lean inference path; no graph is recorded
            with torch.no_grad():
                _, fixed_res, fixed_msg = self(log_self, edge_index, rev_index=rev_index, edge_weight=edge_weight,
                                               known_labels=known_labels, known_mask=known_mask, num_steps=steps,
                                               return_residuals=True, return_messages=True,
                                               message_weight=message_weight)
            self.last_kernel = "eager"

        num_edges = src.numel()
        # under torch.compile reverse messages are gathered through rev_index: the paired layout's
        # permutation has a data-dependent size
        perm, paired = (None, False) if compiling else pairing(rev_index)
        if perm is not None:
            src, dst = src.index_select(0, perm), dst.index_select(0, perm)
            edge_weight = None if edge_weight is None else edge_weight.index_select(0, perm)
            message_weight = None if message_weight is None else message_weight.index_select(0, perm)
        if paired:
            # chunks need explicit reverse rows; the whole edge list swaps its halves instead
            rev_index = None if edge_chunk is None else torch.arange(num_edges, device=src.device).roll(num_edges // 2)

        log_self = pin(log_normalize(log_self))
        log_belief = log_self
        log_msg = log_self.new_full((num_edges, c), -math.log(c))
        residuals: List[Tensor] = []
        linear = (not compiling and not torch.is_grad_enabled() and edge_weight is None and message_weight is None
                  and float(log_H.max() - log_H.min()) < LINEAR_MAX_SPREAD)
        H = msg = belief = None  # the linear domain's coupling, messages and beliefs
        if linear:
            H = torch.exp(log_H - log_H.max())
            msg = log_msg.exp()

        def messages(s: slice, rev: Optional[Tensor]) -> Tensor:
            if linear:  # belief and msg are linear-domain here
                new = linear_message(belief, msg, src[s], rev, H)
                return new.mul_(1 - self.damping).add_(msg[s], alpha=self.damping) if self.damping > 0 else new
            return log_messages(log_belief, log_msg, src, rev, log_H, self.damping, edge_weight, message_weight, s)

        if implicit:
            def belief_of(m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor], mw: Optional[Tensor]) -> Tensor:
                return pin(aggregate(phi, m, dst, mw))

            def message_of(b: Tensor, m: Tensor, phi: Tensor, lH: Tensor, ew: Optional[Tensor],
                           mw: Optional[Tensor]) -> Tensor:
                return log_messages(b, m, src, rev_index, lH, self.damping, ew, mw)

            converged = bool(fixed_res.numel()) and float(fixed_res[-1]) < self.tol
            self.implicit_stats.record_forward(fixed_res.numel(), converged)
            params = (log_self, log_H, edge_weight, message_weight)
            plain = self.damping == 0 and edge_weight is None and not (message_weight is not None
                                                                       and message_weight.requires_grad)
            linearize = (bp_linearization(src, dst, rev_index, *(() if clamp is None else (known_col, clamp))) if plain
                         else autograd_linearization(belief_of, message_of))
            log_msg = implicit_messages(linearize, fixed_msg if perm is None else fixed_msg.index_select(0, perm),
                                        params, self.tol, steps, converged, self.implicit_stats)
            log_belief = belief_of(log_msg, *params)
            residuals = list(fixed_res.unbind())
            steps = 0  # the fixed point replaces the unrolled steps below
        for _ in range(steps):
            if linear:
                belief = torch.exp(log_belief - log_belief.amax(dim=-1, keepdim=True))
            if edge_chunk is None:
                new_msg = messages(slice(None), rev_index)
            else:  # bounded temporaries: only [edge_chunk, c] besides the two message buffers
                if torch.is_grad_enabled() and log_self.requires_grad:
                    raise ValueError("edge_chunk is for inference; run it under torch.no_grad()")
                new_msg = torch.empty_like(log_msg)
                for start in range(0, num_edges, edge_chunk):
                    s = slice(start, start + edge_chunk)
                    new_msg[s] = messages(s, rev_index[s])
            if linear:
                msg, log_msg = new_msg, None  # drop the old log-messages before taking the new ones
                log_msg = torch.log(msg)
            else:
                log_msg = new_msg
            prev = log_belief
            log_belief = pin(aggregate(log_self, log_msg, dst, message_weight))
            if return_residuals or self.tol is not None:
                res = (log_belief.detach().exp() - prev.detach().exp()).abs().sum(-1).amax() if num_nodes else log_belief.new_zeros(())
                residuals.append(res)
                if self.tol is not None and float(res) < self.tol:
                    break
        if perm is not None and return_messages:
            log_msg = log_msg.new_empty(log_msg.shape).index_copy(0, perm, log_msg)
        return _outputs(log_belief, residuals, log_msg, return_residuals, return_messages)

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
    ) -> Tensor:
        r"""Inference-only BP for graphs whose messages barely fit in memory
        (:func:`gbpn.nn.pairs.pair_bp`).

        The graph is given as its undirected edges ``pairs`` ``[2, P]`` (each once, no
        self-loops); the messages of both directions of a pair share one ``[2, P, c]`` buffer
        stored in ``message_dtype`` (bfloat16 halves float32) and are updated in place a chunk
        of ``pair_chunk`` pairs at a time. The result is the same synchronous update as
        :meth:`forward` up to the rounding of the stored messages. Messages are kept in the
        linear domain, normalised, as :meth:`forward` does at inference (in the log domain,
        centred over the classes, for float16 storage or a coupling too wide for it). Without
        edge weights. Computes in the dtype of ``log_self`` (at least float32).

        Memory: ``2 P c`` stored messages plus ``O(N c)`` beliefs plus one chunk.
        """
        check_bp_inputs(log_self, pairs.new_empty((2, 0)), self.num_classes, known_labels=known_labels,
                        known_mask=known_mask)
        num_nodes, c = log_self.shape
        check_pairs(pairs, num_nodes)
        steps = self.num_steps if num_steps is None else num_steps
        _check_steps(steps)
        dtype = torch.promote_types(log_self.dtype, torch.float32)  # the caller's precision, at least float32
        log_H = self.coupling.log_H.to(dtype)
        check_coupling_range(log_H, dtype)
        known_idx, clamp = None, None
        if known_mask is not None and bool(known_mask.any()):
            known_idx = known_mask.nonzero().view(-1)
            clamp = clamp_log_potential(known_labels[known_idx], c, dtype)
        log_self = log_normalize(log_self.to(dtype))
        if clamp is not None:
            log_self[known_idx] = clamp
        return pair_bp(log_self, pairs, log_H, steps, self.damping, known_idx, clamp, pair_chunk, message_dtype)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(num_classes={self.num_classes}, num_steps={self.num_steps}, "
            f"damping={self.damping}, tol={self.tol}, learn_coupling={self.coupling.learnable}, "
            f"backward={self.backward!r}, kernel={self.kernel!r})"
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
