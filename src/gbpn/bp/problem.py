"""One BP call as data: what every backend reads, and the conditions all compiled kernels share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.bp.functional import log_normalize
from gbpn.bp.numerics import linear_domain_ok

# What a backend returns: normalised log-beliefs [N, c], the per-step residuals (each a 0-d tensor),
# and the final log-messages [E, c] in the caller's edge order (None unless asked for).
BPResult = Tuple[Tensor, List[Tensor], Optional[Tensor]]


@dataclass
class BPProblem:
    """A validated call of :class:`~gbpn.bp.layer.BeliefPropagation`.

    ``log_self`` ``[N, c]`` are the (unnormalised) log self-potentials, ``edge_index`` ``[2, E]`` and
    ``rev_index`` ``[E]`` the graph, ``log_H`` ``[c, c]`` the coupling in ``log_self``'s dtype; ``clamp``
    ``[N, c]`` is the log one-hot evidence of the nodes in ``known_mask`` (``None``: no evidence).
    ``kernel`` is what the caller asked for (``"auto"``, ``"fused"`` or ``"eager"``); ``implicit`` is
    whether the fixed point is differentiated implicitly in this call. ``scratch`` carries what a
    backend's :meth:`why_not` built (a layout) to its ``run``.
    """

    log_self: Tensor
    edge_index: Tensor
    rev_index: Tensor
    log_H: Tensor
    steps: int
    damping: float = 0.0
    tol: Optional[float] = None
    known_labels: Optional[Tensor] = None
    known_mask: Optional[Tensor] = None
    clamp: Optional[Tensor] = None
    edge_weight: Optional[Tensor] = None
    message_weight: Optional[Tensor] = None
    implicit: bool = False
    return_residuals: bool = False
    return_messages: bool = False
    edge_chunk: Optional[int] = None
    compiling: bool = False
    kernel: str = "auto"
    scratch: Dict[str, object] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return self.log_self.size(0)

    @property
    def num_classes(self) -> int:
        return self.log_self.size(1)

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

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

    def phi(self) -> Tensor:
        """The normalised, pinned log self-potentials: every step's starting point."""
        return self.pin(log_normalize(self.log_self))


def needs_grad(*tensors: Optional[Tensor]) -> bool:
    """Whether autograd records a call on these tensors (``None`` entries ignored)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def kernel_blocker(p: BPProblem) -> Optional[str]:
    """Why no compiled kernel (numba on CPU, Triton on CUDA) can run ``p``, for reasons they all
    share, or ``None``. Each backend adds its own conditions (device, classes, availability)."""
    if p.compiling or torch._C._are_functorch_transforms_active():
        return "torch.compile / torch.func tracing needs the eager torch operations"
    if p.device.type not in ("cpu", "cuda") or p.dtype not in (torch.float32, torch.float64):
        return f"no fused kernel for {p.dtype} on {p.device.type} (CPU and CUDA, float32/float64 only)"
    if p.implicit and p.device.type == "cuda":
        return "backward='implicit' differentiates the fixed point on the eager path on CUDA"
    if p.edge_chunk is not None:
        return "edge_chunk bounds the eager path's temporaries"
    if p.steps == 0 or p.num_nodes == 0:
        return "nothing to propagate"
    if p.message_weight is not None and p.message_weight.requires_grad and torch.is_grad_enabled():
        return "gradients to message_weight"
    if p.device.type == "cuda":
        if needs_grad(p.log_self, p.log_H, p.edge_weight):
            return "the CUDA kernels are inference-only: training on CUDA runs the eager path"
        if p.edge_weight is not None:
            return "edge weights (a per-edge H^w) run on the eager path on CUDA"
    if not linear_domain_ok(p.log_H.detach(), None if p.edge_weight is None else p.edge_weight.detach(), p.dtype):
        return "log H (times the edge weights) spreads too wide for the linear-domain kernel"
    if p.implicit and p.return_messages:
        return "backward='implicit' returns its messages from the eager path"
    return None


def csr_ordered(w: Optional[Tensor], perm: Optional[Tensor]) -> Optional[Tensor]:
    """A per-edge tensor in a CSR layout's edge order (``perm``: CSR position -> edge)."""
    return w if w is None or perm is None else w.index_select(0, perm)


def edge_ordered(log_msg: Optional[Tensor], perm: Optional[Tensor]) -> Optional[Tensor]:
    """Messages in CSR order back in the caller's edge order."""
    if log_msg is None or perm is None:
        return log_msg
    return log_msg.new_empty(log_msg.shape).index_copy(0, perm, log_msg)
