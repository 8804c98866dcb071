"""The GBPN model: an MLP self-potential followed by belief propagation."""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.nn.adjacency import to_edge_index
from gbpn.nn.bp import BeliefPropagation
from gbpn.nn.validation import check_node_ids


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
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
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


class GBPN(nn.Module):
    r"""Graph Belief Propagation Network.

    .. math::
        \log\phi = \mathrm{log\_softmax}(f_\theta(X, A)), \qquad
        \log p_i = \mathrm{BP}_K(\log\phi, H)_i

    with :class:`~gbpn.nn.bp.BeliefPropagation` for :math:`\mathrm{BP}_K` and a potential
    encoder :math:`f_\theta` from :mod:`gbpn.nn.encoders`: the paper's MLP on each node's
    own features (``potential="mlp"``, the default), propagated features (``"sign"``) or a
    GNN (``"gcn"``, ``"sage"``, ``"gat"``, ``"dagnn"``, ``"linkx"``). The same module serves both
    variants:

    * **GBPN-I** (inductive): call without ``known_labels``; it uses features
      only and runs on graphs it was not trained on.
    * **GBPN** (transductive): pass ``known_labels`` and ``known_mask``; those
      nodes are clamped to their label and condition everyone else.

    Args:
        in_channels (int): node feature size.
        num_classes (int): number of classes :math:`c`.
        hidden_channels (int, optional): encoder width. (default: ``256``)
        num_hidden (int, optional): MLP / SIGN hidden layers. (default: ``2``)
        dropout (float, optional): encoder dropout. (default: ``0.1``)
        num_steps (int, optional): BP steps :math:`K`. (default: ``5``)
        precision (str, optional): MLP precision, see :class:`MLP`; BP always
            runs in the dtype of its input (float32 here). (default: ``"fp32"``)
        damping, tol, learn_coupling, coupling_init, backward: see
            :class:`~gbpn.nn.bp.BeliefPropagation` (with ``backward="implicit"``,
            ``num_steps`` is the most steps of a pass).
        potential (str, optional): the encoder, one of
            :data:`gbpn.nn.encoders.ENCODERS`. (default: ``"mlp"``)
        potential_options (dict, optional): the encoder's own options
            (:func:`gbpn.nn.encoders.build_encoder`), e.g. ``{"hops": 3}``.

    Shapes:
        - **input:** ``x`` ``[N, F]`` (dense or sparse COO; or what :meth:`precompute`
          returned for this graph), ``edge_index`` ``[2, E]``, ``edge_weight`` ``[E]``,
          keyword-only ``rev_index`` ``[E]``, ``known_labels``/``known_mask`` ``[N]``,
          ``message_weight`` ``[E]``
        - **output:** normalised log-beliefs ``[N, c]`` (plus residuals and/or final
          messages on request, as for :class:`~gbpn.nn.bp.BeliefPropagation`)
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 256,
        num_hidden: int = 2,
        dropout: float = 0.1,
        num_steps: int = 5,
        damping: float = 0.0,
        tol: Optional[float] = None,
        learn_coupling: bool = True,
        coupling_init: Optional[Tensor] = None,
        precision: str = "fp32",
        potential: str = "mlp",
        potential_options: Optional[Dict] = None,
        backward: str = "unroll",
    ):
        from gbpn.nn.encoders import build_encoder  # encoders build on this module's MLP

        super().__init__()
        check_sizes(hidden_channels, num_hidden, dropout)
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.potential = potential
        self.potential_options = dict(potential_options or {})
        self.encoder = build_encoder(potential, in_channels, num_classes, hidden_channels, num_hidden, dropout,
                                     precision, **self.potential_options)
        self.bp = BeliefPropagation(num_classes, num_steps, damping, tol, learn_coupling, coupling_init,
                                    backward=backward)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.encoder.reset_parameters()
        self.bp.reset_parameters()

    @property
    def H(self) -> Tensor:
        """The learned coupling matrix ``[c, c]`` (detached)."""
        return self.bp.H

    @property
    def log_H(self) -> Tensor:
        return self.bp.log_H

    def precompute(self, x: Tensor, edge_index: Tensor):
        """What the encoder reads for this graph, computed once: ``x`` itself for the MLP,
        the propagated features for ``sign``, ``x`` with a CSR adjacency for the GNNs. Pass
        it as ``x`` to :meth:`forward` and :meth:`self_potential` to skip the work per call."""
        edge_index = to_edge_index(edge_index)[0]
        check_node_ids(edge_index, x.size(0))
        return self.encoder.precompute(x, edge_index)

    def self_potential(self, x, edge_index: Optional[Tensor] = None) -> Tensor:
        """Normalised log self-potentials ``[N, c]``: the encoder's output (from each node's own
        features for the MLP; from its neighbourhood as well for the graph encoders)."""
        edge_index = None if edge_index is None else to_edge_index(edge_index)[0]
        if edge_index is not None and isinstance(x, Tensor):  # raw features (a precompute()d input was checked)
            check_node_ids(edge_index, x.size(0))
        return F.log_softmax(self.encoder(x, edge_index), dim=-1)

    def forward(
        self,
        x,
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
        *,
        rev_index: Optional[Tensor] = None,
        known_labels: Optional[Tensor] = None,
        known_mask: Optional[Tensor] = None,
        num_steps: Optional[int] = None,
        return_residuals: bool = False,
        return_messages: bool = False,
        message_weight: Optional[Tensor] = None,
    ) -> Union[Tensor, Tuple[Tensor, ...]]:
        # an EdgeIndex or a torch.sparse adjacency becomes edge_index (+ weights) once, for encoder and BP
        edge_index, edge_weight = to_edge_index(edge_index, edge_weight)
        return self.bp(
            self.self_potential(x, edge_index),
            edge_index,
            rev_index=rev_index,
            edge_weight=edge_weight,
            known_labels=known_labels,
            known_mask=known_mask,
            num_steps=num_steps,
            return_residuals=return_residuals,
            return_messages=return_messages,
            message_weight=message_weight,
        )

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(encoder={self.encoder!r}, bp={self.bp!r})"
