r"""DAGNN / "DeeperGNN" (Liu, Gao & Ji 2020, "Towards Deeper Graph Neural Networks", eq. 9).

Transformation and propagation are decoupled:

.. math::
    Z &= \mathrm{MLP}(X) \in \mathbb{R}^{N \times c}, \\
    H_\ell &= \hat A^{\ell} Z, \quad \hat A = \tilde D^{-1/2} (A + I) \tilde D^{-1/2},
        \quad \ell = 0, \dots, K, \\
    \mathcal H &= \mathrm{stack}(H_0, \dots, H_K) \in \mathbb{R}^{N \times (K+1) \times c}, \\
    S &= \sigma(\mathcal H s) \in (0, 1)^{N \times (K+1)}
        \quad \text{(adaptive retention scores, } s \in \mathbb{R}^{c}\text{ plus a bias)}, \\
    X_{\text{out}} &= \mathrm{log\_softmax}\Big(\sum_{\ell=0}^{K} S_{:,\ell} \odot H_\ell\Big).

The paper uses :math:`K = 10` on the citation graphs and a two-layer MLP; the
projection :math:`s` is shared by all nodes and hops.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from gbpn.graph.adjacency import csr_adjacency
from gbpn.models.mlp import MLP


def normalized_adjacency(edge_index: Tensor, num_nodes: int, add_self_loops: bool = True) -> Tensor:
    r""":math:`\tilde D^{-1/2} (A + I) \tilde D^{-1/2}` as a sparse CSR ``[N, N]`` matrix (row = target)."""
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=add_self_loops)
    return csr_adjacency(ei, num_nodes, w)


class DAGNN(nn.Module):
    """Deep Adaptive Graph Neural Network.

    Args:
        in_channels: node feature size.
        num_classes: number of classes :math:`c`.
        hidden_channels: MLP hidden width. (default: ``256``)
        num_hidden: MLP hidden layers (the paper: one, i.e. two linear layers). (default: ``1``)
        K: propagation depth. (default: ``10``)
        dropout: MLP dropout (input and hidden). (default: ``0.0``)
        cached: cache :math:`\\hat A` for the last graph seen. (default: ``False``)
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 256,
        num_hidden: int = 1,
        K: int = 10,
        dropout: float = 0.0,
        cached: bool = False,
    ):
        super().__init__()
        self.K = K
        self.cached = cached
        self.mlp = MLP(in_channels, hidden_channels, num_classes, num_hidden, dropout)
        self.retain = nn.Linear(num_classes, 1)
        self._cache: Optional[Tuple[Tuple, Tensor]] = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()
        self.retain.reset_parameters()
        self._cache = None

    def adjacency(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        key = (edge_index.data_ptr(), tuple(edge_index.shape), num_nodes, edge_index.device)
        if self.cached and self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        adj = normalized_adjacency(edge_index, num_nodes)
        if self.cached:
            self._cache = (key, adj)
        return adj

    def hops(self, x: Tensor, edge_index: Optional[Tensor] = None, adj: Optional[Tensor] = None) -> Tensor:
        """The stacked representations :math:`\\mathcal H` ``[N, K+1, c]`` (``adj``: :math:`\\hat A`
        from :func:`normalized_adjacency`, else built from ``edge_index``)."""
        h = self.mlp(x)
        adj = self.adjacency(edge_index, h.size(0)) if adj is None else adj
        out = [h]
        for _ in range(self.K):
            h = torch.sparse.mm(adj, h)
            out.append(h)
        return torch.stack(out, dim=1)

    def scores(self, hops: Tensor) -> Tensor:
        """Retention scores :math:`S = \\sigma(\\mathcal H s)` ``[N, K+1]``, each in (0, 1)."""
        return torch.sigmoid(self.retain(hops)).squeeze(-1)

    def combine(self, hops: Tensor) -> Tuple[Tensor, Tensor]:
        """The unnormalised output :math:`\\sum_\\ell S_{:,\\ell} \\odot H_\\ell` ``[N, c]`` and the scores."""
        s = self.scores(hops)
        return (s.unsqueeze(-1) * hops).sum(1), s

    def forward(self, x: Tensor, edge_index: Tensor, return_scores: bool = False):
        """Log-probabilities ``[N, c]`` (and the retention scores ``[N, K+1]`` if asked)."""
        logits, s = self.combine(self.hops(x, edge_index))
        out = F.log_softmax(logits, dim=-1)
        return (out, s) if return_scores else out
