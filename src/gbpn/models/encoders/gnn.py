"""``gcn``, ``sage``, ``gat``: a stack of PyG message-passing layers, trained full batch."""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from gbpn.errors import GBPNError
from gbpn.models.encoders.base import GraphInput, adjacency_csr, linear_map, reset_children
from gbpn.models.encoders.options import GNNOptions  # noqa: F401  (its options, with the encoder)
from gbpn.models.mlp import dropout


class GNNEncoder(nn.Module):
    r"""A stack of PyG message-passing layers between an input and an output linear map:

    .. math::
        h^{(0)} = X W_{in}, \qquad
        z^{(l)} = \sigma\big(\mathrm{Conv}_l(\mathrm{LN}(h^{(l-1)}), A) + \mathrm{LN}(h^{(l-1)}) W^{(l)}_{ego}\big),
        \qquad h^{(l)} = h^{(l-1)} + z^{(l)} \ \text{(residual)} \ \text{or}\ z^{(l)},

    and :math:`f = \mathrm{LN}(h^{(L)}) W_{out}`, with dropout before every linear map.
    With ``separate=True`` the convolution sees neighbours only (no self-loops) and a node's
    own representation enters through its own weight :math:`W_{ego}` (SAGE's root weight;
    an extra linear map for GCN and GAT), as the strongest GNNs on heterophilous graphs do.
    ``LN`` is LayerNorm when ``layer_norm`` is set, BatchNorm when ``batch_norm`` is, the identity otherwise.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        conv (str, optional): ``"gcn"``, ``"sage"`` (mean aggregator) or ``"gat"``. (default: ``"sage"``)
        hidden_channels (int, optional): width. (default: ``256``)
        num_layers (int, optional): message-passing layers :math:`L`. (default: ``2``)
        dropout (float, optional): dropout probability. (default: ``0.0``)
        residual (bool, optional): residual connections. (default: ``False``)
        layer_norm (bool, optional): LayerNorm before each layer and the output. (default: ``False``)
        separate (bool, optional): separate ego weights, no self-loops. (default: ``True``)
        heads (int, optional): GAT attention heads (``hidden_channels`` is their total width). (default: ``4``)
        batch_norm (bool, optional): BatchNorm where ``layer_norm`` puts LayerNorm (not both). (default: ``False``)
    """

    def __init__(self, in_channels: int, out_channels: int, conv: str = "sage", hidden_channels: int = 256,
                 num_layers: int = 2, dropout: float = 0.0, residual: bool = False, layer_norm: bool = False,
                 separate: bool = True, heads: int = 4, batch_norm: bool = False):
        super().__init__()
        if conv not in ("gcn", "sage", "gat"):
            raise GBPNError(f"unknown GNN encoder {conv!r}; choose gcn, sage or gat")
        if num_layers < 1:
            raise GBPNError(f"a GNN encoder needs at least one layer, got {num_layers}")
        if conv == "sage" and not separate:
            raise GBPNError("SAGE keeps a node's own representation apart by design (its root weight): "
                            "separate=False applies to gcn and gat")
        if layer_norm and batch_norm:
            raise GBPNError("choose one normalisation: --layer-norm or --batch-norm, not both")
        if conv == "gat" and hidden_channels % heads:
            raise GBPNError(f"GAT hidden width {hidden_channels} is not a multiple of heads={heads}")
        self.in_channels, self.out_channels, self.conv, self.hidden_channels = in_channels, out_channels, conv, hidden_channels
        self.num_layers, self.dropout, self.residual, self.layer_norm = num_layers, dropout, residual, layer_norm
        self.separate, self.heads, self.batch_norm = separate, heads, batch_norm
        h = hidden_channels
        self.lin_in = nn.Linear(in_channels, h)
        if conv == "gcn":
            self.convs = nn.ModuleList(GCNConv(h, h, add_self_loops=not separate) for _ in range(num_layers))
        elif conv == "sage":
            self.convs = nn.ModuleList(SAGEConv(h, h) for _ in range(num_layers))
        else:
            self.convs = nn.ModuleList(GATConv(h, h // heads, heads=heads, add_self_loops=not separate, dropout=dropout)
                                       for _ in range(num_layers))
        # SAGE carries its own root weight; GCN and GAT get one here
        self.egos = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(num_layers)) \
            if separate and conv != "sage" else None
        norm = nn.BatchNorm1d if batch_norm else nn.LayerNorm if layer_norm else None
        self.norms = nn.ModuleList(norm(h) for _ in range(num_layers + 1)) if norm else None
        self.lin_out = nn.Linear(h, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_children(self)

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        # GCN and SAGE run one sparse-dense product per layer on a CSR adjacency (much faster on
        # CPU than gathering [E, hidden] messages); GAT needs per-edge attention.
        if self.conv == "gat":
            return GraphInput(x, edge_index)
        if self.conv == "sage" or not self.separate:
            graph = adjacency_csr(edge_index, x.size(0), dtype=x.dtype)
        else:  # GCN without self-loops: normalise once here (D^-1/2 A D^-1/2)
            deg = torch.bincount(edge_index[1], minlength=x.size(0)).float()
            inv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
            graph = adjacency_csr(edge_index, x.size(0), inv[edge_index[0]] * inv[edge_index[1]], x.dtype)
        return GraphInput(x, graph)

    def _norm(self, h: Tensor, layer: int) -> Tensor:
        return self.norms[layer](h) if self.norms is not None else h

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError(f"the {self.conv} encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        x, graph = inputs.x, inputs.graph
        pre_normalised = self.conv == "gcn" and self.separate and graph.layout == torch.sparse_csr
        h = linear_map(dropout(x, self.dropout, self.training), self.lin_in)
        for i, conv in enumerate(self.convs):
            z = F.dropout(self._norm(h, i), self.dropout, self.training)
            if pre_normalised:
                out = conv.lin(torch.sparse.mm(graph, z)) + conv.bias  # GCNConv on the normalised A
            else:
                out = conv(z, graph)
            if self.egos is not None:
                out = out + self.egos[i](z)
            z = F.relu(out)
            h = h + z if self.residual else z
        return self.lin_out(F.dropout(self._norm(h, self.num_layers), self.dropout, self.training))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, conv={self.conv!r}, "
                f"hidden={self.hidden_channels}, num_layers={self.num_layers}, residual={self.residual}, "
                f"layer_norm={self.layer_norm}, batch_norm={self.batch_norm}, separate={self.separate}, "
                f"dropout={self.dropout})")


def builder(conv: str):
    """The build function of the ``conv`` encoder (``num_hidden`` is the MLP's; a GNN counts layers)."""
    def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
              precision: str, **options) -> GNNEncoder:
        return GNNEncoder(in_channels, num_classes, conv, hidden_channels, dropout=dropout, **options)
    return build


build_gcn, build_sage, build_gat = builder("gcn"), builder("sage"), builder("gat")
