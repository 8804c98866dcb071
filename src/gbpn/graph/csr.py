"""Neighbour lists in CSR form, for samplers and partitioners."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CSRGraph:
    """Neighbour lists of a symmetric graph: the neighbours of ``v`` are ``col[rowptr[v]:rowptr[v+1]]``,
    in increasing order (so ``row * N + col`` is sorted over all slots)."""

    rowptr: Tensor
    col: Tensor

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> "CSRGraph":
        order = torch.argsort(edge_index[0] * num_nodes + edge_index[1])
        src, dst = edge_index[0, order], edge_index[1, order]
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_nodes), 0)
        return cls(rowptr, dst.long())

    @classmethod
    def from_pairs(cls, pairs: Tensor, num_nodes: int) -> "CSRGraph":
        """From undirected edges ``[2, P]`` given once each (both directions are added)."""
        u, v = pairs[0].long(), pairs[1].long()
        return cls.from_edge_index(torch.stack([torch.cat([u, v]), torch.cat([v, u])]), num_nodes)

    @property
    def num_nodes(self) -> int:
        return self.rowptr.numel() - 1

    def degree(self) -> Tensor:
        return self.rowptr[1:] - self.rowptr[:-1]


def expand(graph: CSRGraph, nodes: Tensor):
    """Every CSR slot of ``nodes``: ``(seg, slot)`` with ``seg[k]`` the position in ``nodes``
    and ``graph.col[slot[k]]`` the neighbour, grouped by ``seg``."""
    counts = graph.degree()[nodes]
    seg = torch.repeat_interleave(torch.arange(nodes.numel()), counts)
    starts = torch.repeat_interleave(graph.rowptr[nodes], counts)
    offsets = torch.arange(seg.numel()) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return seg, starts + offsets
