r"""``sign``: parameter-free propagated features :math:`[X, \hat A X, \dots, \hat A^H X]` computed once
per graph, then a linear map per hop and an MLP (no message passing at train time: it trains on sampled
trees and on Products-sized graphs like the MLP)."""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.errors import GBPNError
from gbpn.models.encoders.base import adjacency_csr, linear_map
from gbpn.models.encoders.options import SignOptions  # noqa: F401  (its options, with the encoder)
from gbpn.models.mlp import MLP, dropout


def propagation_matrix(edge_index: Tensor, num_nodes: int, separate: bool = True,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The ``[N, N]`` operator :math:`\hat A` of the propagated features (sparse CSR).

    ``separate=True``: the neighbour mean :math:`D^{-1}A` without self-loops (isolated nodes
    get a zero row), so hop 0 (:math:`X`) is the only ego channel. ``separate=False``: GCN's
    :math:`\tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, which mixes each node into its neighbourhood.
    """
    src, dst = edge_index[0], edge_index[1]
    if not separate:
        loops = torch.arange(num_nodes, device=edge_index.device)
        src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    deg = torch.bincount(dst, minlength=num_nodes).to(dtype)
    if separate:
        w = deg.clamp_min(1).reciprocal()[dst]
    else:
        inv = deg.pow(-0.5)
        w = inv[src] * inv[dst]
    return adjacency_csr(torch.stack([src, dst]), num_nodes, w, dtype)


def propagate_features(x: Tensor, edge_index: Tensor, hops: int = 2, separate: bool = True,
                       max_density: float = 0.1) -> List[Tensor]:
    r"""Propagated features, one tensor per hop, computed in :math:`O(E F)` per hop.

    ``separate=True``: :math:`[X, \hat A X, \dots, \hat A^H X]` with the neighbour mean
    :math:`\hat A = D^{-1} A` (ego and neighbour channels apart). ``separate=False``:
    :math:`[\tilde A X, \dots, \tilde A^H X]` with GCN's normalisation (self-loops mixed in).
    Sparse COO features stay sparse while at most ``max_density`` of the entries are non-zero.
    """
    if hops < 1:
        raise GBPNError(f"propagated features need at least one hop, got {hops}")
    n = x.size(0)
    A = propagation_matrix(edge_index, n, separate, x.dtype)
    if x.is_sparse:  # sparse @ sparse keeps bag-of-words features sparse
        A = A.to_sparse_coo()
    out, h = ([x] if separate else []), x
    for _ in range(hops):
        h = torch.sparse.mm(A, h)
        if h.is_sparse:
            h = h.coalesce()
            if h._nnz() > max_density * h.numel():
                h = h.to_dense()
        out.append(h)
    return out


class Propagated:
    """Precomputed per-hop features of a graph: index them by node like a tensor
    (``index_select``, ``size``, ``to``), so sampled trees and node chunks take rows of it."""

    def __init__(self, hops: Sequence[Tensor]):
        self.hops = list(hops)

    def index_select(self, dim: int, index: Tensor) -> "Propagated":
        if dim != 0:
            raise ValueError("propagated features are indexed by node (dim 0)")
        return Propagated([h.index_select(0, index) for h in self.hops])

    def size(self, dim: Optional[int] = None):
        return self.hops[0].size() if dim is None else self.hops[0].size(dim)

    def to(self, *args, **kwargs) -> "Propagated":
        return Propagated([h.to(*args, **kwargs) for h in self.hops])

    @property
    def device(self) -> torch.device:
        return self.hops[0].device


class SIGNEncoder(nn.Module):
    r"""SIGN-style encoder (Frasca et al. 2020) on precomputed propagated features:

    .. math::
        f(X, A) = \mathrm{MLP}\Big(\sigma\big(\big\Vert_{k} \hat A^k X\, W_k\big)\Big)

    with one linear map :math:`W_k` per hop (``hops + 1`` of them with ``separate=True``:
    :math:`k = 0, \dots, H`, the ego channel :math:`X` kept apart; ``hops`` with
    ``separate=False``: :math:`\tilde A^1 \dots \tilde A^H`), see :func:`propagate_features`.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        hidden_channels (int, optional): width of each hop's map and of the MLP. (default: ``256``)
        num_hidden (int, optional): hidden layers in all, the per-hop maps included. (default: ``2``)
        dropout (float, optional): dropout before every linear map. (default: ``0.0``)
        hops (int, optional): propagation hops :math:`H`. (default: ``2``)
        separate (bool, optional): keep ego and neighbour channels apart. (default: ``True``)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 256, num_hidden: int = 2,
                 dropout: float = 0.0, hops: int = 2, separate: bool = True):
        super().__init__()
        if num_hidden < 1 or hops < 1:
            raise GBPNError("the sign encoder needs num_hidden >= 1 and hops >= 1")
        self.in_channels, self.out_channels, self.hidden_channels = in_channels, out_channels, hidden_channels
        self.num_hidden, self.dropout, self.hops, self.separate = num_hidden, dropout, hops, separate
        n_channels = hops + 1 if separate else hops
        self.hop_lins = nn.ModuleList(nn.Linear(in_channels, hidden_channels) for _ in range(n_channels))
        self.mlp = MLP(n_channels * hidden_channels, hidden_channels, out_channels, num_hidden - 1, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.hop_lins:
            lin.reset_parameters()
        self.mlp.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> Propagated:
        return Propagated(propagate_features(x, edge_index, self.hops, self.separate))

    def forward(self, inputs: Union[Propagated, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, Propagated):
            if edge_index is None:
                raise GBPNError("the sign encoder needs edge_index (or precomputed features) for raw features")
            inputs = self.precompute(inputs, edge_index)
        h = torch.cat([linear_map(dropout(x, self.dropout, self.training), lin)
                       for x, lin in zip(inputs.hops, self.hop_lins)], dim=-1)
        return self.mlp(F.relu(h))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, hidden={self.hidden_channels}, "
                f"num_hidden={self.num_hidden}, hops={self.hops}, separate={self.separate}, dropout={self.dropout})")


def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
          precision: str, **options) -> SIGNEncoder:
    return SIGNEncoder(in_channels, num_classes, hidden_channels, num_hidden, dropout, **options)
