"""Node clusters of a graph (METIS) and the edges they induce."""
from __future__ import annotations

import torch
from torch import Tensor

from gbpn.errors import GBPNError
from gbpn.graph.csr import CSRGraph, expand


def metis_clusters(graph: CSRGraph, num_parts: int) -> Tensor:
    """Cluster id of every node from METIS (``pymetis``)."""
    try:
        import pymetis
    except ImportError:
        raise GBPNError("cluster-gcn needs pymetis: pip install pymetis (or pip install 'gbpn[scale]')") from None
    if num_parts <= 1:
        return torch.zeros(graph.num_nodes, dtype=torch.long)
    if hasattr(pymetis, "CSRAdjacency"):  # newer pymetis deprecates the xadj/adjncy keywords
        adjacency = pymetis.CSRAdjacency(adj_starts=graph.rowptr.numpy(), adjacent=graph.col.numpy())
        _, membership = pymetis.part_graph(num_parts, adjacency=adjacency)
    else:
        _, membership = pymetis.part_graph(num_parts, xadj=graph.rowptr.numpy(), adjncy=graph.col.numpy())
    return torch.as_tensor(membership, dtype=torch.long)


def induced_subgraph(graph: CSRGraph, nodes: Tensor) -> Tensor:
    """Local ``edge_index`` of the edges among ``nodes``."""
    local = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    local[nodes] = torch.arange(nodes.numel())
    seg, slot = expand(graph, nodes)
    nbr = local[graph.col[slot]]
    keep = nbr >= 0
    return torch.stack([nbr[keep], seg[keep]])
