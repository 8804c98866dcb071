"""``dagnn``: the DAGNN baseline's adaptive deep propagation of an MLP's outputs, trained full batch."""
from __future__ import annotations

from typing import Optional, Union

from torch import Tensor, nn

from gbpn.errors import GBPNError
from gbpn.models.encoders.base import GraphInput


class DAGNNEncoder(nn.Module):
    r"""DAGNN (Liu, Gao & Ji 2020) as the potential: an MLP's outputs propagated over :math:`K`
    hops of GCN's :math:`\hat A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, each hop kept by a
    learned, per-node retention score,

    .. math::
        H_\ell = \hat A^\ell\, \mathrm{MLP}(X), \qquad
        f(X, A) = \sum_{\ell=0}^{K} \sigma(H_\ell\, s)\odot H_\ell,

    the :class:`gbpn.models.dagnn.DAGNN` baseline's own module without its final log-softmax
    (the GBPN normalises). Its MLP has one hidden layer, as in the DAGNN paper.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        hidden_channels (int, optional): MLP width. (default: ``256``)
        dropout (float, optional): MLP dropout. (default: ``0.0``)
        K (int, optional): propagation hops. (default: ``10``)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 256, dropout: float = 0.0,
                 K: int = 10):
        super().__init__()
        from gbpn.models.dagnn import DAGNN

        self.in_channels, self.out_channels, self.hidden_channels = in_channels, out_channels, hidden_channels
        self.dropout, self.K = dropout, K
        self.dagnn = DAGNN(in_channels, out_channels, hidden_channels, num_hidden=1, K=K, dropout=dropout)

    def reset_parameters(self) -> None:
        self.dagnn.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        from gbpn.models.dagnn import normalized_adjacency

        return GraphInput(x, normalized_adjacency(edge_index, x.size(0)).to(x.dtype))

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError("the dagnn encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        return self.dagnn.combine(self.dagnn.hops(inputs.x, adj=inputs.graph))[0]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, hidden={self.hidden_channels}, "
                f"K={self.K}, dropout={self.dropout})")


def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
          precision: str, **options) -> DAGNNEncoder:
    return DAGNNEncoder(in_channels, num_classes, hidden_channels, dropout, **options)
