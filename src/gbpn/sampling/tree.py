r"""Sub-sampled computation trees for mini-batch BP (paper section 3.3, Figure 6).

Unrolling BP for T steps from a target node visits its T-hop computation tree; with at
most ``d`` uniformly chosen neighbours per tree node (all of them below ``d``), and never
the node's own parent, the tree has :math:`O(d^T)` nodes per target. BP on the tree is
exact for the tree, so T steps on it give the target's T-step belief.

Everything is vectorised over the whole frontier of a hop: candidate neighbours are
expanded from CSR arrays, get one random key each from a seeded generator, and the ``d``
smallest keys per frontier node are kept (uniform sampling without replacement).

With ``probs`` (one probability per CSR slot, e.g. from
:class:`~gbpn.sampling.importance.Exp3Sampler`) a node with more than ``d`` candidates
instead draws ``d`` neighbours i.i.d. from ``probs`` renormalised over its candidates
(appendix B), by inverse-CDF search on one cumulative sum for the whole frontier; each
drawn child then carries the importance weight :math:`1 / (n\,\hat p_j)` (``n``
candidates), which is 1 under uniform probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor
from gbpn.graph.csr import CSRGraph, expand


@dataclass
class ComputationTree:
    """A batch of sampled trees as one forest.

    ``node_map[k]`` is the graph node of tree node ``k``; the first ``batch_size`` tree nodes
    are the roots (the targets, in order); ``edge_index`` holds every tree edge in both
    directions with ``rev_index`` its reverse; ``parent[k]`` is the tree parent (``-1`` at a
    root) and ``depth[k]`` the hop at which node ``k`` was reached. ``slot[k]`` is the CSR
    slot (index into ``CSRGraph.col``) of the edge from ``k``'s parent to ``k`` (``-1`` at
    roots); ``draw_prob[k]`` the probability with which ``k`` was drawn among its parent's
    candidates (0 where all candidates were kept) and ``weight[k]`` the importance weight of
    ``k``'s message to its parent (``None`` without ``probs``: all 1).
    """

    node_map: Tensor
    edge_index: Tensor
    rev_index: Tensor
    parent: Tensor
    depth: Tensor
    batch_size: int
    slot: Optional[Tensor] = None
    draw_prob: Optional[Tensor] = None
    weight: Optional[Tensor] = None

    @property
    def num_nodes(self) -> int:
        return self.node_map.numel()

    def message_weight(self) -> Optional[Tensor]:
        """Per tree edge (``edge_index`` order): the importance weight of each child-to-parent
        message and 1 on parent-to-child messages; ``None`` when every weight is 1."""
        if self.weight is None:
            return None
        w = self.weight[self.parent >= 0].float()
        return torch.cat([w, torch.ones_like(w)])


def choose_uniform(seg: Tensor, num_segments: int, fanout: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """Indices of at most ``fanout`` entries per segment, uniformly without replacement (all of
    a segment's entries when it has fewer), grouped by segment: each entry gets a random key
    and the ``fanout`` smallest keys per segment win."""
    order = torch.argsort(torch.rand(seg.numel(), generator=generator))
    order = order[torch.argsort(seg[order], stable=True)]  # by segment, random within
    counts = torch.bincount(seg, minlength=num_segments)
    rank = torch.arange(seg.numel()) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return order[rank < fanout]


def sample_tree(
    graph: CSRGraph,
    targets: Tensor,
    num_hops: int = 2,
    fanout: Optional[int] = 5,
    generator: Optional[torch.Generator] = None,
    probs: Optional[Tensor] = None,
) -> ComputationTree:
    """Unroll ``num_hops`` hops from ``targets`` keeping at most ``fanout`` neighbours per tree node.

    Args:
        graph: the graph as :class:`CSRGraph`.
        targets: ``[B]`` graph nodes (the roots).
        num_hops: tree depth ``T``.
        fanout: ``d``; ``None`` keeps every neighbour (the full computation tree).
        generator: seeded ``torch.Generator`` for the sampling.
        probs: ``[nnz]`` neighbour probabilities per CSR slot (each row sums to 1), for
            importance sampling; ``None`` samples uniformly without replacement.
    """
    targets = targets.long().view(-1)
    node_map = [targets]
    parent_tree = [torch.full_like(targets, -1)]
    depth = [torch.zeros_like(targets)]
    slots = [torch.full_like(targets, -1)]
    draw_probs = [torch.zeros(targets.numel(), dtype=torch.float64)]
    weights = [torch.ones(targets.numel(), dtype=torch.float64)]
    frontier = torch.arange(targets.numel())  # tree ids of the current hop
    frontier_graph = targets
    frontier_parent_graph = torch.full_like(targets, -1)
    total = targets.numel()
    deg = graph.degree()
    for hop in range(1, num_hops + 1):
        if int(deg[frontier_graph].sum()) == 0:
            break
        seg, slot = expand(graph, frontier_graph)
        cand = graph.col[slot]
        keep = cand != frontier_parent_graph[seg]  # never step back to the parent
        seg, slot = seg[keep], slot[keep]
        dprob = torch.zeros(seg.numel(), dtype=torch.float64)
        weight = torch.ones(seg.numel(), dtype=torch.float64)
        if fanout is not None and probs is None:
            sel = choose_uniform(seg, frontier.numel(), fanout, generator)
            seg, slot, dprob, weight = seg[sel], slot[sel], dprob[sel], weight[sel]
        elif fanout is not None:
            seg, slot, dprob, weight = _draw(seg, slot, probs, fanout, frontier.numel(), generator)
        cand = graph.col[slot]
        new_ids = torch.arange(total, total + cand.numel())
        total += cand.numel()
        node_map.append(cand)
        slots.append(slot)
        draw_probs.append(dprob)
        weights.append(weight)
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
        slot=torch.cat(slots),
        draw_prob=torch.cat(draw_probs),
        weight=torch.cat(weights) if probs is not None else None,
    )


def _draw(seg: Tensor, slot: Tensor, probs: Tensor, fanout: int, num_segments: int,
          generator: Optional[torch.Generator]):
    """Per segment (candidates of one frontier node, sorted by segment): all candidates if
    there are at most ``fanout``, else ``fanout`` i.i.d. draws from ``probs[slot]``
    renormalised within the segment. Returns ``(seg, slot, draw_prob, weight)`` of the kept
    children, ``weight = 1 / (n * draw_prob)`` for drawn ones and 1 for kept ones."""
    counts = torch.bincount(seg, minlength=num_segments)
    big = counts[seg] > fanout
    small_seg, small_slot = seg[~big], slot[~big]
    seg_b, slot_b = seg[big], slot[big]
    out_seg, out_slot = [small_seg], [small_slot]
    out_p = [torch.zeros(small_seg.numel(), dtype=torch.float64)]
    out_w = [torch.ones(small_seg.numel(), dtype=torch.float64)]
    if seg_b.numel():
        p = probs[slot_b].double().clamp_min(1e-300)
        cum = torch.cumsum(p, 0)
        ids, first = torch.unique_consecutive(seg_b, return_counts=True)
        end = torch.cumsum(first, 0)
        begin = end - first
        base = torch.where(begin > 0, cum[(begin - 1).clamp_min(0)], torch.zeros_like(cum[begin]))
        total = cum[end - 1] - base
        u = torch.rand(ids.numel(), fanout, generator=generator, dtype=torch.float64)
        pos = torch.searchsorted(cum, base.unsqueeze(1) + u * total.unsqueeze(1), right=True)
        pos = torch.minimum(torch.maximum(pos, begin.unsqueeze(1)), (end - 1).unsqueeze(1)).view(-1)
        p_hat = p[pos] / total.repeat_interleave(fanout)
        n = counts[ids].repeat_interleave(fanout).double()
        out_seg.append(seg_b[pos])
        out_slot.append(slot_b[pos])
        out_p.append(p_hat)
        out_w.append(1.0 / (n * p_hat))
    seg, slot, dprob, weight = (torch.cat(t) for t in (out_seg, out_slot, out_p, out_w))
    order = torch.argsort(seg, stable=True)
    return seg[order], slot[order], dprob[order], weight[order]
