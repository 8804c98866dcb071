"""Layer-wise neighbour sampling for GNN baselines on large graphs (GraphSAGE-style).

The same subgraphs as PyG's ``NeighborLoader``: starting from a batch of seed nodes, each
hop keeps at most ``fanout`` uniformly chosen neighbours of every node reached in the
previous hop and adds the edges neighbour -> node; nodes are deduplicated, so the result
is a small graph (not a tree) whose first ``batch_size`` nodes are the seeds. PyG's loader
needs ``pyg-lib`` or ``torch-sparse``, neither of which has wheels for every torch
release; this one runs on plain torch, vectorised over each hop's frontier.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from gbpn.sampling.tree import choose_uniform
from gbpn.graph.csr import CSRGraph, expand


def sample_subgraph(
    graph: CSRGraph,
    seeds: Tensor,
    fanouts: Sequence[Optional[int]],
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    """Sample ``len(fanouts)`` hops around ``seeds`` (``None`` keeps every neighbour).

    Returns ``(nodes, edge_index)``: the graph ids of the subgraph's nodes (seeds first, in
    order) and its edges in local ids, as ``source -> target`` with targets the nodes that
    sampled them.
    """
    seeds = seeds.long().view(-1)
    local = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    local[seeds] = torch.arange(seeds.numel())
    nodes, src, dst = [seeds], [], []
    frontier, total = seeds, seeds.numel()
    for fanout in fanouts:
        seg, slot = expand(graph, frontier)
        if fanout is not None:
            sel = choose_uniform(seg, frontier.numel(), fanout, generator)
            seg, slot = seg[sel], slot[sel]
        nbr = graph.col[slot]
        new = torch.unique(nbr[local[nbr] < 0])
        local[new] = torch.arange(total, total + new.numel())
        total += new.numel()
        nodes.append(new)
        src.append(local[nbr])
        dst.append(local[frontier[seg]])
        frontier = new
    edge_index = torch.stack([torch.cat(src), torch.cat(dst)]) if src else torch.empty(2, 0, dtype=torch.long)
    return torch.cat(nodes), edge_index


def in_edges(graph: CSRGraph, targets: Tensor) -> Tuple[Tensor, Tensor]:
    """The full neighbourhood of ``targets``: ``(nodes, edge_index)`` as in
    :func:`sample_subgraph` with one hop and no sampling (for batched exact inference)."""
    return sample_subgraph(graph, targets, [None])
