"""The paper's self-potential encoder: an MLP with a fused ReLU + dropout."""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# the MLP's arithmetic: float32 throughout, or bfloat16 hidden layers (the only encoder with a choice)
PRECISIONS = ("fp32", "bf16")


def _keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tuple[Tensor, float]:
    """Boolean keep-mask with P(keep) = 1 - p (p quantised to 1/65536) and its exact keep rate.

    Four 16-bit draws come out of one 64-bit random integer: about 5x cheaper on CPU than a
    float draw per element, and dropout masks were a large share of a full-batch step.
    """
    n = math.prod(shape)
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=device)
    r = bits.view(torch.int16)[:n].view(shape)
    t = round(p * 65536)
    return r >= t - 32768, (65536 - t) / 65536


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout (dense or sparse COO input; on a sparse one only stored values drop)."""
    if not training or p == 0.0:
        return x
    if x.is_sparse:
        x = x.coalesce()
        return torch.sparse_coo_tensor(x.indices(), dropout(x.values(), p, True), x.shape,
                                       is_coalesced=True, check_invariants=False)
    keep, rate = _keep_mask(x.shape, p, x.device)
    return x * keep.to(x.dtype) * (1.0 / rate)


class _ReLUDropout(torch.autograd.Function):
    """``dropout(relu(h))`` as one element-wise pass each way: the backward multiplies by the same
    saved mask, instead of separate ReLU and dropout nodes with their own buffers."""

    @staticmethod
    def forward(ctx, h: Tensor, p: float) -> Tensor:
        keep, rate = _keep_mask(h.shape, p, h.device)
        mask = ((h > 0) & keep).to(h.dtype).mul_(1.0 / rate)
        ctx.save_for_backward(mask)
        return h * mask

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


def check_sizes(hidden_channels: int, num_hidden: int, dropout: float) -> None:
    """``ValueError`` for a width or depth below what a network can have, or a dropout outside [0, 1)."""
    if hidden_channels < 1 or num_hidden < 0:
        raise ValueError(f"hidden_channels must be >= 1 and num_hidden >= 0, got {hidden_channels} and {num_hidden}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def relu_dropout(h: Tensor, p: float, training: bool) -> Tensor:
    if not training or p == 0.0:
        return F.relu(h)
    return _ReLUDropout.apply(h, p)


class MLP(nn.Module):
    r"""Feed-forward network :math:`x \mapsto W_L\,\sigma(\dots\sigma(W_1\,\mathrm{drop}(x)))`,
    with ReLU :math:`\sigma` and dropout before every linear layer.

    Accepts a dense ``[N, F]`` input or a sparse COO one (bag-of-words features):
    the first layer then runs as a sparse-dense product and input dropout acts on
    the stored values only, so cost scales with the number of non-zeros.

    Args:
        in_channels (int): input feature size.
        hidden_channels (int): hidden width.
        out_channels (int): output size.
        num_hidden (int, optional): number of hidden layers. (default: ``2``)
        dropout (float, optional): dropout probability. (default: ``0.0``)
        precision (str, optional): ``"fp32"``, or ``"bf16"`` to run the hidden layers in
            bfloat16 with float32 master weights (the first layer and the output stay
            float32); about 2x faster on CPUs with AVX512-BF16/AMX and on GPUs.
            (default: ``"fp32"``)
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_hidden: int = 2,
                 dropout: float = 0.0, precision: str = "fp32"):
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
        check_sizes(hidden_channels, num_hidden, dropout)
        self.in_channels, self.hidden_channels, self.out_channels = in_channels, hidden_channels, out_channels
        self.num_hidden = num_hidden
        self.dropout = dropout
        self.precision = precision
        sizes = [in_channels] + [hidden_channels] * num_hidden + [out_channels]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        first = self.lins[0]
        x = dropout(x, self.dropout, self.training)
        h = torch.sparse.mm(x, first.weight.T) + first.bias if x.is_sparse else first(x)
        if self.precision == "bf16":
            h = h.to(torch.bfloat16)
        for lin in self.lins[1:]:
            h = relu_dropout(h, self.dropout, self.training)
            h = F.linear(h, lin.weight.to(h.dtype), lin.bias.to(h.dtype))
        return h.to(first.weight.dtype)  # bf16 hidden layers hand back the parameters' precision

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, {self.out_channels}, "
            f"num_hidden={self.num_hidden}, dropout={self.dropout}, precision={self.precision!r})"
        )
