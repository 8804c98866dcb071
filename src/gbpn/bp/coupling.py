"""The coupling (edge) potential shared by every edge of the graph."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn


class Coupling(nn.Module):
    r"""A symmetric, strictly positive :math:`c \times c` coupling matrix :math:`H`.

    Parametrisation: an unconstrained matrix :math:`W \in \mathbb{R}^{c \times c}` gives

    .. math::
        \log H = \tfrac{1}{2}(W + W^\top), \qquad H = \exp(\log H),

    so :math:`H` is symmetric and positive for *every* value of :math:`W` (no
    clamping or projection). BP normalises its messages, so :math:`H` and
    :math:`a H` (:math:`a > 0`) give identical beliefs: only :math:`\log H` up to
    an additive constant is identifiable. :meth:`normalized` removes that
    constant (mean of :math:`\log H` set to 0) for reading and comparing.

    Args:
        num_classes (int): number of classes :math:`c`.
        learnable (bool, optional): if ``False`` :math:`H` is a fixed buffer.
            (default: ``True``)
        init (Tensor, optional): initial :math:`H` (symmetric, positive); the
            default :math:`H = \mathbf{1}\mathbf{1}^\top` carries no coupling at all.
            :math:`W` takes the dtype of a floating-point ``init`` (else the default dtype).

    Shapes:
        H, log_H: ``[c, c]``
    """

    def __init__(self, num_classes: int, learnable: bool = True, init: Optional[Tensor] = None):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = num_classes
        self.learnable = learnable
        if init is not None:
            init = torch.as_tensor(init)
            init = init if init.is_floating_point() else init.to(torch.get_default_dtype())
            if init.shape != (num_classes, num_classes):
                raise ValueError(f"init must be {num_classes}x{num_classes}, got {tuple(init.shape)}")
            if not bool(((init > 0) & torch.isfinite(init)).all()) or not torch.allclose(init, init.T):
                raise ValueError("init must be symmetric with positive finite entries")
        self._init = None if init is None else init.clone()
        # a float64 init keeps its precision (a float32 weight would round log H before any .double())
        weight = torch.empty(num_classes, num_classes, dtype=None if init is None else init.dtype)
        if learnable:
            self.weight = nn.Parameter(weight)
        else:
            self.register_buffer("weight", weight)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self._init is None:
                self.weight.zero_()
            else:
                self.weight.copy_(self._init.log())

    @property
    def log_H(self) -> Tensor:
        """``log H`` (differentiable), symmetric by construction."""
        return 0.5 * (self.weight + self.weight.T)

    @property
    def H(self) -> Tensor:
        """The coupling matrix as a detached ``[c, c]`` tensor."""
        return self.log_H.detach().exp()

    def normalized(self) -> Tensor:
        """``H`` with its unidentifiable scale removed: ``exp(log H - mean(log H))``."""
        log_H = self.log_H.detach()
        return (log_H - log_H.mean()).exp()

    def forward(self) -> Tensor:
        return self.log_H

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(num_classes={self.num_classes}, learnable={self.learnable})"
