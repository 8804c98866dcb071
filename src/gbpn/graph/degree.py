"""Node degrees, of a symmetric ``edge_index`` or of undirected pairs."""
from __future__ import annotations

import torch
from torch import Tensor


def degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Number of distinct neighbours of every node in a cleaned graph."""
    return torch.bincount(edge_index[1], minlength=num_nodes)


def pair_degree(pairs: Tensor, num_nodes: int) -> Tensor:
    """Number of neighbours of every node, from undirected ``pairs`` ``[2, P]``."""
    # int32 ids are counted as they are: an int64 copy of each row would cost as much as the count
    return torch.bincount(pairs[0], minlength=num_nodes) + torch.bincount(pairs[1], minlength=num_nodes)
