"""What the encoders share: a linear map of dense or sparse features, the CSR adjacency they multiply by,
and :class:`GraphInput`, the input of an encoder that reads the whole graph."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from gbpn.errors import GBPNError
from gbpn.graph.adjacency import csr_adjacency


def linear_map(x: Tensor, lin: nn.Linear) -> Tensor:
    """``lin(x)`` for a dense or sparse COO ``x`` (bag-of-words features stay sparse)."""
    if x.is_sparse:
        out = torch.sparse.mm(x, lin.weight.T)
        return out if lin.bias is None else out + lin.bias
    return lin(x)


def reset_children(module: nn.Module) -> None:
    """``reset_parameters()`` of every sub-module of ``module`` that has one, in ``modules()`` order."""
    for m in module.modules():
        if m is not module and hasattr(m, "reset_parameters"):
            m.reset_parameters()


def adjacency_csr(edge_index: Tensor, num_nodes: int, weight: Optional[Tensor] = None,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """``[N, N]`` CSR adjacency with row = target, column = source (PyG's ``adj_t``), in ``dtype``."""
    if weight is None:
        weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    return csr_adjacency(edge_index, num_nodes, weight.to(dtype))


class GraphInput:
    """Features with the adjacency a GNN encoder runs on. It cannot be cut into sampled trees:
    a GNN encoder's potential of a node depends on the whole graph around it."""

    def __init__(self, x: Tensor, graph: Tensor):
        self.x, self.graph = x, graph

    def index_select(self, dim: int, index: Tensor):
        raise GBPNError("graph potential encoders (gcn, sage, gat, dagnn, linkx) train full batch only: drop --batch-size, or "
                        "use --potential sign (precomputed neighbourhood features) or mlp for mini-batch training")

    def size(self, dim: Optional[int] = None):
        return self.x.size() if dim is None else self.x.size(dim)

    def to(self, *args, **kwargs) -> "GraphInput":
        return GraphInput(self.x.to(*args, **kwargs), self.graph.to(*args, **kwargs))

    @property
    def device(self) -> torch.device:
        return self.x.device
