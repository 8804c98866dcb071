"""One BP call as data: what every backend reads, and the conditions all compiled kernels share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, TypedDict

import torch
from torch import Tensor

from gbpn.bp.functional import log_normalize
from gbpn.bp.implicit import ImplicitStats
from gbpn.bp.numerics import linear_domain_ok
from gbpn.graph.layouts import cached_layout


class BPOptions(TypedDict, total=False):
    """The keyword options of a BP call, written once: :meth:`BeliefPropagation.forward
    <gbpn.bp.layer.BeliefPropagation.forward>` and ``.problem``, :class:`~gbpn.bp.motifs.MotifBeliefPropagation`
    and :class:`~gbpn.models.gbpn.GBPN` take them as ``**options`` (each documents them in its docstring)."""

    edge_weight: Optional[Tensor]
    rev_index: Optional[Tensor]
    known_labels: Optional[Tensor]
    known_mask: Optional[Tensor]
    num_steps: Optional[int]
    return_residuals: bool
    return_messages: bool
    edge_chunk: Optional[int]
    message_weight: Optional[Tensor]
    kernel: Optional[str]
    messages: Optional[Tensor]
    triangles: Optional[Tensor]


def check_options(options: Dict[str, object], owner: str) -> None:
    """``TypeError`` for a keyword that is not one of :class:`BPOptions`, as Python says it for a signature."""
    for name in options:
        if name not in BPOptions.__annotations__:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


class BPResult(NamedTuple):
    """What a backend returns: normalised log-beliefs ``[N, c]``, the per-step residuals (each a 0-d
    tensor), the final log-messages ``[E, c]`` in the caller's edge order (``None`` unless asked for;
    hand them back as ``messages=`` to continue from them) and the implicit passes' counters (the
    problem's :attr:`BPProblem.implicit_stats`, which the backward, when it runs, counts into too)."""

    log_belief: Tensor
    residuals: List[Tensor]
    messages: Optional[Tensor] = None
    implicit_stats: Optional[ImplicitStats] = None
    backend: Optional[str] = None  # which backend ran (set by gbpn.bp.dispatch.run)


@dataclass(kw_only=True)
class BPProblem:
    """A validated BP call, built by keyword (:meth:`~gbpn.bp.layer.BeliefPropagation.problem`).

    ``log_self`` ``[N, c]`` are the (unnormalised) log self-potentials, ``edge_index`` ``[2, E]`` and
    ``rev_index`` ``[E]`` the graph, ``log_H`` ``[c, c]`` the coupling in ``log_self``'s dtype; ``clamp``
    ``[N, c]`` is the log one-hot evidence of the nodes in ``known_mask`` (``None``: no evidence).
    ``kernel`` is what the caller asked for (``"auto"``, ``"fused"``: any compiled kernel, or a backend's
    name). ``backward`` is the layer's (``"unroll"`` or ``"implicit"``); whether this call differentiates
    the fixed point implicitly (``implicit``) and whether messages stay in the linear domain
    (``linear``) are decided by :func:`gbpn.bp.dispatch.select`. ``messages`` ``[E, c]``: log-messages to
    continue from (a previous call's ``return_messages``), ``None``: uniform.

    Modes of the same table: ``pairs`` ``[2, P]`` (undirected edges, each once; then ``edge_index`` and
    ``rev_index`` are ``None``) runs the in-place pair inference with messages stored in
    ``message_dtype``, ``pair_chunk`` pairs at a time, on one part of a partitioned graph when
    ``boundary`` is given (:mod:`gbpn.bp.backends.pairs`); ``triangles`` ``[3, T]`` with the triangle
    factor's ``triangle_log`` and ``triangle_form`` runs the motif step (:mod:`gbpn.bp.motifs`).
    """

    log_self: Tensor
    edge_index: Optional[Tensor]
    rev_index: Optional[Tensor]
    log_H: Tensor
    num_steps: int  # K: the steps this call runs (with backward='implicit', the layer's bound max_steps)
    damping: float = 0.0
    tol: Optional[float] = None
    known_labels: Optional[Tensor] = None
    known_mask: Optional[Tensor] = None
    clamp: Optional[Tensor] = None
    edge_weight: Optional[Tensor] = None
    message_weight: Optional[Tensor] = None
    messages: Optional[Tensor] = None
    backward: str = "unroll"
    implicit: bool = False
    linear: bool = False
    implicit_stats: Optional[ImplicitStats] = None
    return_residuals: bool = False
    return_messages: bool = False
    edge_chunk: Optional[int] = None
    compiling: bool = False
    kernel: str = "auto"
    pairs: Optional[Tensor] = None
    message_dtype: Optional[torch.dtype] = None
    pair_chunk: int = 1 << 20
    boundary: Optional[object] = None
    on_step: Optional[Callable[[int], None]] = None
    triangles: Optional[Tensor] = None
    triangle_log: Optional[Tensor] = None
    triangle_form: Optional[str] = None
    fixed_point: Optional[BPResult] = None  # the eager implicit mode's: set by gbpn.bp.dispatch.run

    @property
    def num_nodes(self) -> int:
        return self.log_self.size(0)

    @property
    def num_classes(self) -> int:
        return self.log_self.size(1)

    @property
    def num_edges(self) -> int:
        return (self.pairs.size(1) * 2) if self.edge_index is None else self.edge_index.size(1)

    @property
    def device(self) -> torch.device:
        return self.log_self.device

    @property
    def dtype(self) -> torch.dtype:
        return self.log_self.dtype

    def pin(self, log_belief: Tensor) -> Tensor:
        """``log_belief`` with the known nodes' rows replaced by their evidence."""
        if self.clamp is None:
            return log_belief
        return torch.where(self.known_mask.view(-1, 1), self.clamp, log_belief)

    def step_done(self, residuals: List[Tensor], log_belief: Tensor, prev: Tensor) -> bool:
        """After a step from beliefs ``prev`` to ``log_belief``: append its residual (the largest L1
        change of a belief) to ``residuals`` where they are asked for or ``tol`` is set, and say whether
        it is below ``tol`` (the steps stop)."""
        if not (self.return_residuals or self.tol is not None):
            return False
        res = ((log_belief.detach().exp() - prev.detach().exp()).abs().sum(-1).amax() if self.num_nodes
               else log_belief.new_zeros(()))
        residuals.append(res)
        return self.tol is not None and float(res) < self.tol

    def phi(self) -> Tensor:
        """The normalised, pinned log self-potentials: every step's starting point."""
        return self.pin(log_normalize(self.log_self))


class Capability:
    """What a backend can run: :meth:`reasons` lists every reason it cannot run a problem (empty: it
    can), with no side effects; :meth:`why_not` joins them (``None``: it can)."""

    name: str
    device_type: Optional[str] = None

    def reasons(self, p: BPProblem) -> List[str]:
        raise NotImplementedError

    def why_not(self, p: BPProblem) -> Optional[str]:
        why = self.reasons(p)
        return "; ".join(why) if why else None


def needs_grad(*tensors: Optional[Tensor]) -> bool:
    """Whether autograd records a call on these tensors (``None`` entries ignored)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def compiled_reasons(p: BPProblem) -> List[str]:
    """Why no compiled kernel (numba on CPU, Triton on CUDA) can run ``p``, for reasons they all
    share (empty: none). Each backend adds its own conditions (device, classes, availability)."""
    why: List[str] = []
    if p.compiling or torch._C._are_functorch_transforms_active():
        why.append("torch.compile / torch.func tracing needs the eager torch operations")
    if p.device.type not in ("cpu", "cuda") or p.dtype not in (torch.float32, torch.float64):
        why.append(f"no fused kernel for {p.dtype} on {p.device.type} (CPU and CUDA, float32/float64 only)")
    if p.implicit and p.device.type == "cuda":
        why.append("backward='implicit' differentiates the fixed point on the eager path on CUDA")
    if p.edge_chunk is not None:
        why.append("edge_chunk bounds the eager path's temporaries")
    if p.messages is not None:
        why.append("continuing from given messages runs on the eager path")
    if p.num_steps == 0 or p.num_nodes == 0:
        why.append("nothing to propagate")
    if p.message_weight is not None and p.message_weight.requires_grad and torch.is_grad_enabled():
        why.append("gradients to message_weight")
    if p.device.type == "cuda":
        if needs_grad(p.log_self, p.log_H, p.edge_weight):
            why.append("the CUDA kernels are inference-only: training on CUDA runs the eager path")
        if p.edge_weight is not None:
            why.append("edge weights (a per-edge H^w) run on the eager path on CUDA")
    if not why and not linear_domain_ok(p.log_H.detach(), None if p.edge_weight is None else p.edge_weight.detach(),
                                        p.dtype):  # reads values: only where nothing else declines
        why.append("log H (times the edge weights) spreads too wide for the linear-domain kernel")
    if p.implicit and p.return_messages:
        why.append("backward='implicit' returns its messages from the eager path")
    return why


def pairable(p: BPProblem) -> bool:
    """Whether the edges of ``p`` have a paired layout (:func:`~gbpn.graph.reverse.paired_order`: half of
    them before their reverse; not when an edge is its own reverse); remembered per graph."""
    rev = p.rev_index
    return cached_layout(p.edge_index, rev, ("pairable",), lambda: 2 * int(
        (torch.arange(rev.numel(), device=rev.device) < rev).sum()) == rev.numel())


def reverse_pairs(p: BPProblem) -> bool:
    """Whether ``rev_index`` pairs every edge with another edge whose reverse it is (what the in-place
    implicit kernel needs; a duplicate edge or a self-loop breaks it); remembered per graph."""
    rev = p.rev_index

    def check() -> bool:
        ids = torch.arange(rev.numel(), device=rev.device)
        return bool((rev.index_select(0, rev) == ids).all() and (rev != ids).all())

    return cached_layout(p.edge_index, rev, ("reverse-pairs",), check)


def csr_ordered(w: Optional[Tensor], perm: Optional[Tensor]) -> Optional[Tensor]:
    """A per-edge tensor in a CSR layout's edge order (``perm``: CSR position -> edge)."""
    return w if w is None or perm is None else w.index_select(0, perm)


def edge_ordered(log_msg: Optional[Tensor], perm: Optional[Tensor]) -> Optional[Tensor]:
    """Messages in CSR order back in the caller's edge order."""
    if log_msg is None or perm is None:
        return log_msg
    return log_msg.new_empty(log_msg.shape).index_copy(0, perm, log_msg)
