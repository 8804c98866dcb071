"""Sub-sampled computation trees for mini-batch BP (paper section 3.3, Figure 6).

Unrolling BP for T steps from a target node visits its T-hop computation tree; with at
most ``d`` uniformly chosen neighbours per tree node (all of them below ``d``), and never
the node's own parent, the tree has :math:`O(d^T)` nodes per target. BP on the tree is
exact for the tree, so T steps on it give the target's T-step belief.

Everything is vectorised over the whole frontier of a hop: candidate neighbours are
expanded from CSR arrays, get one random key each from a seeded generator, and the ``d``
smallest keys per frontier node are kept (uniform sampling without replacement).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class CSRGraph:
    """Neighbour lists of a symmetric graph: the neighbours of ``v`` are ``col[rowptr[v]:rowptr[v+1]]``."""

    rowptr: Tensor
    col: Tensor

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int) -> "CSRGraph":
        order = torch.argsort(edge_index[0] * num_nodes + edge_index[1])
        src, dst = edge_index[0, order], edge_index[1, order]
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_nodes), 0)
        return cls(rowptr, dst.long())

    @property
    def num_nodes(self) -> int:
        return self.rowptr.numel() - 1

    def degree(self) -> Tensor:
        return self.rowptr[1:] - self.rowptr[:-1]


@dataclass
class ComputationTree:
    """A batch of sampled trees as one forest.

    ``node_map[k]`` is the graph node of tree node ``k``; the first ``batch_size`` tree nodes
    are the roots (the targets, in order); ``edge_index`` holds every tree edge in both
    directions with ``rev_index`` its reverse; ``parent[k]`` is the tree parent (``-1`` at a
    root) and ``depth[k]`` the hop at which node ``k`` was reached.
    """

    node_map: Tensor
    edge_index: Tensor
    rev_index: Tensor
    parent: Tensor
    depth: Tensor
    batch_size: int

    @property
    def num_nodes(self) -> int:
        return self.node_map.numel()


def sample_tree(
    graph: CSRGraph,
    targets: Tensor,
    num_hops: int = 2,
    fanout: Optional[int] = 5,
    generator: Optional[torch.Generator] = None,
) -> ComputationTree:
    """Unroll ``num_hops`` hops from ``targets`` keeping at most ``fanout`` neighbours per tree node.

    Args:
        graph: the graph as :class:`CSRGraph`.
        targets: ``[B]`` graph nodes (the roots).
        num_hops: tree depth ``T``.
        fanout: ``d``; ``None`` keeps every neighbour (the full computation tree).
        generator: seeded ``torch.Generator`` for the sampling.
    """
    targets = targets.long().view(-1)
    node_map = [targets]
    parent_tree = [torch.full_like(targets, -1)]
    depth = [torch.zeros_like(targets)]
    frontier = torch.arange(targets.numel())  # tree ids of the current hop
    frontier_graph = targets
    frontier_parent_graph = torch.full_like(targets, -1)
    total = targets.numel()
    deg = graph.degree()
    for hop in range(1, num_hops + 1):
        counts = deg[frontier_graph]
        if int(counts.sum()) == 0:
            break
        seg = torch.repeat_interleave(torch.arange(frontier.numel()), counts)
        starts = torch.repeat_interleave(graph.rowptr[frontier_graph], counts)
        offsets = torch.arange(seg.numel()) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        cand = graph.col[starts + offsets]
        keep = cand != frontier_parent_graph[seg]  # never step back to the parent
        seg, cand = seg[keep], cand[keep]
        if fanout is not None:
            key = torch.rand(seg.numel(), generator=generator)
            order = torch.argsort(key)
            order = order[torch.argsort(seg[order], stable=True)]  # by segment, random within
            seg, cand = seg[order], cand[order]
            seg_counts = torch.bincount(seg, minlength=frontier.numel())
            rank = torch.arange(seg.numel()) - torch.repeat_interleave(torch.cumsum(seg_counts, 0) - seg_counts, seg_counts)
            sel = rank < fanout
            seg, cand = seg[sel], cand[sel]
        new_ids = torch.arange(total, total + cand.numel())
        total += cand.numel()
        node_map.append(cand)
        parent_tree.append(frontier[seg])
        depth.append(torch.full_like(cand, hop))
        frontier, frontier_graph, frontier_parent_graph = new_ids, cand, frontier_graph[seg]
    node_map_t = torch.cat(node_map)
    parent_t = torch.cat(parent_tree)
    child = torch.arange(node_map_t.numel())[parent_t >= 0]
    par = parent_t[parent_t >= 0]
    edge_index = torch.stack([torch.cat([child, par]), torch.cat([par, child])])
    m = child.numel()
    rev_index = torch.cat([torch.arange(m, 2 * m), torch.arange(m)])  # the two halves mirror each other
    return ComputationTree(
        node_map=node_map_t,
        edge_index=edge_index,
        rev_index=rev_index,
        parent=parent_t,
        depth=torch.cat(depth),
        batch_size=targets.numel(),
    )
