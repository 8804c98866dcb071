"""``linkx``: a node's features and its adjacency row mapped apart, trained full batch; tied to one graph."""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.errors import GBPNError
from gbpn.models.encoders.base import GraphInput, adjacency_csr, linear_map
from gbpn.models.mlp import MLP, dropout


class LINKXEncoder(nn.Module):
    r"""LINKX-style encoder (Lim et al. 2021): a node's features and its adjacency row, mapped apart,

    .. math::
        h_A = A\,W_A, \qquad h_X = X W_X, \qquad
        f(X, A) = \mathrm{MLP}\big(\sigma\big([h_A \Vert h_X]\,W + h_A + h_X\big)\big),

    where row :math:`i` of :math:`A` marks the nodes that link to :math:`i`, so :math:`h_A` sums one
    learned vector per neighbour: nodes with the same neighbours get the same neighbour channel,
    whatever their features. No message passing beyond one sparse product per step.
    :math:`W_A` has a row per node: the encoder is tied to a graph of ``num_nodes`` nodes.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        num_nodes (int): nodes of the graph (rows of :math:`W_A`).
        hidden_channels (int, optional): width. (default: ``256``)
        num_hidden (int, optional): hidden layers in all, the two input maps counted as one.
            (default: ``2``)
        dropout (float, optional): dropout before every linear map. (default: ``0.0``)
    """

    def __init__(self, in_channels: int, out_channels: int, num_nodes: int, hidden_channels: int = 256,
                 num_hidden: int = 2, dropout: float = 0.0):
        super().__init__()
        if num_hidden < 1 or num_nodes < 1:
            raise GBPNError("the linkx encoder needs num_hidden >= 1 and a graph with nodes")
        self.in_channels, self.out_channels, self.num_nodes = in_channels, out_channels, num_nodes
        self.hidden_channels, self.num_hidden, self.dropout = hidden_channels, num_hidden, dropout
        self.lin_adj = nn.Linear(num_nodes, hidden_channels)
        self.lin_x = nn.Linear(in_channels, hidden_channels)
        self.lin_cat = nn.Linear(2 * hidden_channels, hidden_channels)
        self.mlp = MLP(hidden_channels, hidden_channels, out_channels, num_hidden - 1, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_adj, self.lin_x, self.lin_cat, self.mlp):
            lin.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        return GraphInput(x, adjacency_csr(edge_index, x.size(0), dtype=x.dtype))

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError("the linkx encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        if inputs.x.size(0) != self.num_nodes:
            raise GBPNError(f"the linkx potential learns a weight per node of the {self.num_nodes}-node graph it was "
                            f"built for; this graph has {inputs.x.size(0)} nodes. Retrain it on this graph, or use "
                            "an encoder that does not depend on node identities (mlp, sign, gcn, sage, gat)")
        h_a = torch.sparse.mm(inputs.graph, self.lin_adj.weight.T) + self.lin_adj.bias
        h_x = linear_map(dropout(inputs.x, self.dropout, self.training), self.lin_x)
        h = self.lin_cat(torch.cat([h_a, h_x], dim=-1)) + h_a + h_x
        return self.mlp(F.relu(h))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, num_nodes={self.num_nodes}, "
                f"hidden={self.hidden_channels}, num_hidden={self.num_hidden}, dropout={self.dropout})")


def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
          precision: str, **options) -> LINKXEncoder:
    if "num_nodes" not in options:  # W_A has a row per node
        raise GBPNError("the linkx potential is tied to one graph: give its node count, "
                        "potential_options={'num_nodes': N}")
    return LINKXEncoder(in_channels, num_classes, hidden_channels=hidden_channels, num_hidden=num_hidden,
                        dropout=dropout, **options)
