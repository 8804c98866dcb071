r"""Standard two-layer message-passing baselines: GCN, GraphSAGE and GAT (paper section 4.2).

All three compute, with ReLU :math:`\sigma` and dropout before each layer,

.. math::
    Z = \mathrm{Conv}_2\big(\mathrm{drop}(\sigma(\mathrm{Conv}_1(\mathrm{drop}(X), A))), A\big)

and return the logits :math:`Z \in \mathbb{R}^{N \times c}`. The convolutions are
PyG's:

* GCN (Kipf & Welling 2017): :math:`h_i' = \sum_{j \in N(i) \cup \{i\}}
  \frac{1}{\sqrt{\hat d_i \hat d_j}} W h_j + b`, with :math:`\hat d = d + 1`.
* GraphSAGE (Hamilton et al. 2017), mean aggregator:
  :math:`h_i' = W_l \,\mathrm{mean}_{j \in N(i)} h_j + W_r h_i + b`.
* GAT (Velickovic et al. 2018): :math:`h_i' = \Vert_{k=1}^{K} \sum_{j \in N(i) \cup \{i\}}
  \alpha^k_{ij} W^k h_j`, attention
  :math:`\alpha^k_{ij} = \mathrm{softmax}_j(\mathrm{LeakyReLU}(a^{k\top}[W^k h_i \Vert W^k h_j]))`;
  the paper's setting is 4 heads x 64 units in the hidden layer and one head at the output.

Inputs may be dense or sparse COO (bag-of-words features, see
:func:`gbpn.data.features.prepare_features`); the first layer then never densifies them.
GCN and SAGE also take the graph as a sparse ``adj_t``
(:func:`gbpn.graph.adjacency.csr_adjacency`) instead of ``edge_index``, which is
much faster on CPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.utils import scatter, spmm

from gbpn.baselines.training import feature_dropout
from gbpn.errors import GBPNError


class TwoLayerGNN(nn.Module):
    r""":math:`\mathrm{conv}_2(\mathrm{drop}(\mathrm{ReLU}(\mathrm{conv}_1(\mathrm{drop}(x)))))`; subclasses build
    ``conv1`` and ``conv2`` (and may override :meth:`first_layer`)."""

    dropout: float

    def reset_parameters(self) -> None:
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()

    def first_layer(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv1(x, edge_index)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.first_layer(feature_dropout(x, self.dropout, self.training), edge_index))
        return self.conv2(feature_dropout(h, self.dropout, self.training), edge_index)


class GCN(TwoLayerGNN):
    """Two-layer GCN.

    Args:
        in_channels: node feature size.
        hidden_channels: hidden width. (default: ``256``)
        out_channels: number of classes.
        dropout: dropout before each layer. (default: ``0.0``)
        add_self_loops: add :math:`A + I` before normalising. (default: ``True``)
        cached: cache the normalised adjacency (transductive, one graph). (default: ``False``)
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        cached: bool = False,
    ):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GCNConv(in_channels, hidden_channels, add_self_loops=add_self_loops, cached=cached)
        self.conv2 = GCNConv(hidden_channels, out_channels, add_self_loops=add_self_loops, cached=cached)
        self.reset_parameters()


class SAGE(TwoLayerGNN):
    """Two-layer GraphSAGE with the mean aggregator.

    With sparse input the first layer is evaluated through linearity,
    :math:`W_l\\,\\mathrm{mean}_j x_j = \\mathrm{mean}_j (W_l x_j)`, using the
    parameters of the same :class:`~torch_geometric.nn.SAGEConv` (PyG's
    ``SAGEConv`` cannot aggregate sparse features); the output equals the dense one.

    Args:
        in_channels: node feature size.
        hidden_channels: hidden width. (default: ``256``)
        out_channels: number of classes.
        dropout: dropout before each layer. (default: ``0.0``)
        aggr: ``"mean"`` or ``"sum"``. (default: ``"mean"``)
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, dropout: float = 0.0, aggr: str = "mean"):
        super().__init__()
        if aggr not in ("mean", "sum"):
            raise GBPNError(f"SAGE aggregator must be 'mean' or 'sum', got {aggr!r}")
        self.dropout = dropout
        self.aggr = aggr
        self.conv1 = SAGEConv(in_channels, hidden_channels, aggr=aggr)
        self.conv2 = SAGEConv(hidden_channels, out_channels, aggr=aggr)
        self.reset_parameters()

    def first_layer(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """``conv1(x, edge_index)``, also for sparse COO ``x``."""
        if not x.is_sparse:
            return self.conv1(x, edge_index)
        conv = self.conv1
        xl = torch.sparse.mm(x, conv.lin_l.weight.T)
        if edge_index.is_sparse or edge_index.layout == torch.sparse_csr:
            out = spmm(edge_index, xl, reduce=self.aggr)
        else:
            out = scatter(xl[edge_index[0]], edge_index[1], dim=0, dim_size=x.size(0), reduce=self.aggr)
        if conv.lin_l.bias is not None:
            out = out + conv.lin_l.bias
        if conv.root_weight:
            out = out + torch.sparse.mm(x, conv.lin_r.weight.T)
        return out


class GAT(TwoLayerGNN):
    """Two-layer GAT: ``heads`` x ``hidden_channels // heads`` concatenated hidden units, one output head.

    Args:
        in_channels: node feature size.
        hidden_channels: total hidden width (``heads`` times the per-head width). (default: ``256``)
        out_channels: number of classes.
        heads: attention heads in the hidden layer. (default: ``4``)
        dropout: dropout before each layer and on the attention coefficients. (default: ``0.0``)
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, heads: int = 4, dropout: float = 0.0):
        super().__init__()
        if hidden_channels % heads:
            raise GBPNError(f"GAT hidden width {hidden_channels} is not a multiple of heads={heads}")
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, hidden_channels // heads, heads=heads, concat=True, dropout=dropout)
        self.conv2 = GATConv(hidden_channels, out_channels, heads=1, concat=False, dropout=dropout)
        self.reset_parameters()
