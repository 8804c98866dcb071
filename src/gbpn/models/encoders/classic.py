r"""``classic-gcn``, ``classic-sage``, ``classic-gat``: deep classic GNNs with a linear skip per layer and BatchNorm
or LayerNorm, as Luo, Shi & Wu (NeurIPS 2024, *Classic GNNs are strong baselines*) tune them, written from the
paper's description and its public per-data-set settings."""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.utils import add_remaining_self_loops, remove_self_loops

from gbpn.errors import GBPNError
from gbpn.models.encoders.base import GraphInput, adjacency_csr, linear_map, reset_children
from gbpn.models.encoders.sign import propagation_matrix
from gbpn.models.encoders.options import GNNOptions  # noqa: F401  (its options, with the encoder)


class ClassicGNN(nn.Module):
    r"""A stack of PyG convolutions, each with an optional linear skip, a normalisation, ReLU and dropout:

    .. math::
        h^{(l)} = \mathrm{Drop}\Big(\mathrm{ReLU}\big(\mathrm{Norm}_l(\mathrm{Conv}_l(h^{(l-1)}, A + I)
        + h^{(l-1)} W^{(l)}_{skip})\big)\Big), \qquad h^{(0)} = X, \qquad f = h^{(L)} W_{out},

    the skip present with ``residual``, ``Norm`` BatchNorm (``batch_norm``), LayerNorm (``layer_norm``) or the
    identity. Every node is its own neighbour (self-loops), for all three convolutions: GCN's normalised
    :math:`\tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, SAGE's mean (which then includes the node) with its root
    weight, and single-head GAT without bias. The first convolution maps the features to the width.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        conv (str, optional): ``"gcn"``, ``"sage"`` or ``"gat"``. (default: ``"gcn"``)
        hidden_channels (int, optional): width. (default: ``256``)
        num_layers (int, optional): convolutions :math:`L`, up to 15 in the published settings. (default: ``2``)
        dropout (float, optional): dropout after every layer. (default: ``0.0``)
        residual (bool, optional): the linear skip. (default: ``False``)
        layer_norm (bool, optional): LayerNorm after each convolution. (default: ``False``)
        batch_norm (bool, optional): BatchNorm after each convolution (not with ``layer_norm``). (default: ``False``)
        heads (int, optional): GAT heads (``hidden_channels`` is their total width). (default: ``1``)

    Shapes:
        - **input:** node features :math:`(N, F)` (dense or sparse COO), ``edge_index`` :math:`(2, E)`
        - **output:** logits :math:`(N, C)`
    """

    def __init__(self, in_channels: int, out_channels: int, conv: str = "gcn", hidden_channels: int = 256,
                 num_layers: int = 2, dropout: float = 0.0, residual: bool = False, layer_norm: bool = False,
                 batch_norm: bool = False, heads: int = 1):
        super().__init__()
        if conv not in ("gcn", "sage", "gat"):
            raise GBPNError(f"unknown classic GNN {conv!r}; choose gcn, sage or gat")
        if num_layers < 1:
            raise GBPNError(f"a classic GNN needs at least one layer, got {num_layers}")
        if layer_norm and batch_norm:
            raise GBPNError("choose one normalisation: --layer-norm or --batch-norm, not both")
        if conv == "gat" and hidden_channels % heads:
            raise GBPNError(f"GAT hidden width {hidden_channels} is not a multiple of heads={heads}")
        self.in_channels, self.out_channels, self.conv, self.hidden_channels = in_channels, out_channels, conv, hidden_channels
        self.num_layers, self.dropout, self.residual = num_layers, dropout, residual
        self.layer_norm, self.batch_norm, self.heads = layer_norm, batch_norm, heads
        widths = [in_channels] + [hidden_channels] * num_layers
        self.convs = nn.ModuleList(self._conv(a, b) for a, b in zip(widths, widths[1:]))
        self.skips = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:])) if residual else None
        norm = nn.BatchNorm1d if batch_norm else nn.LayerNorm if layer_norm else None
        self.norms = nn.ModuleList(norm(hidden_channels) for _ in range(num_layers)) if norm else None
        self.lin_out = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    def _conv(self, a: int, b: int) -> nn.Module:
        if self.conv == "gcn":  # the self-loops are in the graph already
            return GCNConv(a, b, add_self_loops=False, cached=False)
        if self.conv == "sage":
            return SAGEConv(a, b)
        return GATConv(a, b // self.heads, heads=self.heads, add_self_loops=False, bias=False)

    def reset_parameters(self) -> None:
        reset_children(self)

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        """The features with the graph its convolutions read, self-loops added: a CSR adjacency (GCN normalised,
        SAGE as is), or ``edge_index`` for GAT's per-edge attention."""
        n = x.size(0)
        if self.conv == "gcn":  # SIGN's GCN operator, which adds one self-loop per node
            return GraphInput(x, propagation_matrix(remove_self_loops(edge_index)[0], n, False, x.dtype))
        edge_index, _ = add_remaining_self_loops(edge_index, num_nodes=n)
        if self.conv == "gat":
            return GraphInput(x, edge_index)
        return GraphInput(x, adjacency_csr(edge_index, n, dtype=x.dtype))

    def _apply_conv(self, i: int, h: Tensor, graph: Tensor) -> Tensor:
        conv = self.convs[i]
        if self.conv == "gcn":  # GCNConv on the normalised adjacency: its linear map, the product, its bias
            return torch.sparse.mm(graph, linear_map(h, conv.lin)) + conv.bias
        if h.is_sparse:  # sparse features: SAGE's maps through linearity, GAT's projection first
            if self.conv == "sage":
                return (torch.sparse.mm(graph, linear_map(h, conv.lin_l)) / _row_count(graph)
                        + linear_map(h, conv.lin_r))
            h = h.to_dense()
        return conv(h, graph)

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError(f"the classic-{self.conv} encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        h, graph = inputs.x, inputs.graph
        for i in range(self.num_layers):
            out = self._apply_conv(i, h, graph)
            if self.skips is not None:
                out = out + linear_map(h, self.skips[i])
            if self.norms is not None:
                out = self.norms[i](out)
            h = F.dropout(F.relu(out), self.dropout, self.training)
        return self.lin_out(h)

    def __repr__(self) -> str:
        norm = "batch" if self.batch_norm else "layer" if self.layer_norm else "none"
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, conv={self.conv!r}, "
                f"hidden={self.hidden_channels}, num_layers={self.num_layers}, residual={self.residual}, "
                f"norm={norm}, dropout={self.dropout})")


def _row_count(graph: Tensor) -> Tensor:
    return graph.crow_indices().diff().clamp_min(1).unsqueeze(-1).to(graph.dtype)


def builder(conv: str):
    """The build function of the ``classic-<conv>`` encoder (``num_hidden`` is the MLP's; layers are counted apart)."""
    def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
              precision: str, **options) -> ClassicGNN:
        return ClassicGNN(in_channels, num_classes, conv, hidden_channels, dropout=dropout, **options)
    return build


build_classic_gcn, build_classic_sage, build_classic_gat = builder("gcn"), builder("sage"), builder("gat")
