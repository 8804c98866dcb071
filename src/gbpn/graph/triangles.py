r"""Triangles of an undirected graph: vectorised enumeration, a seeded cap per node, and the
positions of each triangle's edges in an ``edge_index``.

Enumeration orients every undirected edge from the endpoint of lower *rank* to the higher one,
rank = (degree, node id), and then, for every oriented edge :math:`u \to v` and every oriented
out-neighbour :math:`w` of :math:`v`, looks up :math:`u \to w` by a binary search in the sorted
oriented edge keys. Each triangle is found exactly once (from its lowest-ranked node), and since a
node's out-degree under the degree order is at most :math:`\sqrt{2P}` the work is
:math:`O(P^{3/2})` for :math:`P` undirected edges: a hub's many neighbours are mostly *in*-neighbours
and are never expanded. All of it is whole-tensor operations (no Python loop per node or edge);
the wedges are checked in chunks so that memory stays bounded.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

# wedges (u -> v -> w candidates) checked per chunk: bounds the temporaries at a few hundred MB
WEDGE_CHUNK = 1 << 24


def undirected_pairs(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""Each undirected edge once as ``(lo, hi)`` with ``lo < hi``, sorted by ``lo * N + hi``; both
    directions of an edge, duplicates and self-loops collapse (a directed-only edge counts too).

    Shapes:
        edge_index: ``[2, E]`` -> ``[2, P]``
    """
    u, v = edge_index[0].long(), edge_index[1].long()
    lo, hi = torch.minimum(u, v), torch.maximum(u, v)
    keep = lo != hi
    key = torch.unique(lo[keep] * num_nodes + hi[keep])  # sorted
    return torch.stack([key // num_nodes, key % num_nodes])


def _lexsort_columns(tri: Tensor) -> Tensor:
    """Columns of ``tri`` ``[3, T]`` in lexicographic order (stable sorts, last key first: no
    ``N^3`` key that could overflow int64)."""
    for row in (2, 1, 0):
        tri = tri[:, torch.sort(tri[row], stable=True).indices]
    return tri


def enumerate_triangles(
    edge_index: Tensor,
    num_nodes: Optional[int] = None,
    *,
    max_per_node: Optional[int] = None,
    seed: int = 0,
    generator: Optional[torch.Generator] = None,
    wedge_chunk: int = WEDGE_CHUNK,
) -> Tensor:
    r"""All triangles :math:`\{i, j, k\}` (every pair adjacent) of the undirected graph ``edge_index``.

    The graph is read as undirected: each pair once, self-loops and duplicates ignored (see
    :func:`undirected_pairs`). The triangles come as columns :math:`(i, j, k)` with
    :math:`i < j < k`, in lexicographic order, so the output does not depend on the order of
    ``edge_index``.

    With ``max_per_node = m`` no node lies in more than :math:`m` of the returned triangles (a
    hub of degree :math:`d` can lie in :math:`d(d-1)/2`): every triangle draws a random priority
    (a permutation from a ``torch.Generator`` seeded by ``seed``, or ``generator``), every node
    keeps its :math:`m` triangles of lowest priority, and a triangle is returned when all three of
    its nodes keep it. Same graph and seed, same triangles. A node may end below :math:`m` (one
    of its triangles was dropped by a neighbour), never above.

    Args:
        edge_index (Tensor): edges ``[2, E]`` (both directions or one; symmetric is expected).
        num_nodes (int, optional): :math:`N`. (default: ``edge_index.max() + 1``)
        max_per_node (int, optional): the cap :math:`m \ge 1`; ``None`` keeps all. (default: ``None``)
        seed (int, optional): seed of the cap's sampling. (default: ``0``)
        generator (torch.Generator, optional): used instead of ``seed`` when given (a CPU generator).
            (default: ``None``)
        wedge_chunk (int, optional): candidate wedges checked per chunk (memory bound).
            (default: :data:`WEDGE_CHUNK`)

    Shapes:
        edge_index: ``[2, E]`` -> ``[3, T]`` (long, on ``edge_index``'s device)
    """
    device = edge_index.device
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
    if max_per_node is not None and max_per_node < 1:
        raise ValueError(f"max_per_node must be a positive number of triangles (or None), got {max_per_node}")
    if wedge_chunk < 1:
        raise ValueError(f"wedge_chunk must be positive, got {wedge_chunk}")
    pairs = undirected_pairs(edge_index, num_nodes)
    empty = torch.empty(3, 0, dtype=torch.long, device=device)
    if pairs.size(1) < 3:
        return empty
    found = _closed_wedges(*_oriented_by_degree(pairs, num_nodes), num_nodes, wedge_chunk)
    if not found:
        return empty
    tri = torch.sort(torch.cat(found, dim=1), dim=0).values  # i < j < k within each column
    tri = _lexsort_columns(tri)
    if max_per_node is not None and tri.size(1):
        tri = cap_triangles(tri, num_nodes, max_per_node, seed=seed, generator=generator)
    return tri


def _oriented_by_degree(pairs: Tensor, n: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Each pair oriented from its lower-ranked end (by degree, then id) to the other: the sorted keys
    ``s * n + t`` and their sources and targets (grouped by source, targets ascending)."""
    device = pairs.device
    deg = torch.bincount(pairs.reshape(-1), minlength=n)
    rank = torch.empty(n, dtype=torch.long, device=device)
    rank[torch.argsort(deg * n + torch.arange(n, device=device))] = torch.arange(n, device=device)
    a, b = pairs
    swap = rank[a] > rank[b]
    s, t = torch.where(swap, b, a), torch.where(swap, a, b)  # oriented s -> t, rank[s] < rank[t]
    okey = torch.sort(s * n + t).values
    return okey, okey // n, okey % n


def _closed_wedges(okey: Tensor, s: Tensor, t: Tensor, n: int, wedge_chunk: int) -> List[Tensor]:
    """The triangles ``[3, *]`` (unsorted) closed by the oriented wedges s -> t -> w (an edge s -> w
    exists), checked ``wedge_chunk`` wedges at a time."""
    device = okey.device
    outdeg = torch.bincount(s, minlength=n)
    rowptr = torch.zeros(n + 1, dtype=torch.long, device=device)
    rowptr[1:] = torch.cumsum(outdeg, 0)
    counts = outdeg[t]  # wedges s -> t -> w starting at each oriented edge
    ends = torch.cumsum(counts, 0)
    found = []
    start, num_oriented = 0, okey.numel()
    while start < num_oriented:
        # the longest run of edges from `start` whose wedges fit the chunk (at least one edge)
        base = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(torch.searchsorted(ends, base + wedge_chunk, right=True)))
        cnt = counts[start:stop]
        total = int(cnt.sum())
        if total:
            seg = torch.repeat_interleave(torch.arange(start, stop, device=device), cnt)
            offsets = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(cnt, 0) - cnt, cnt)
            w = okey[rowptr[t[seg]] + offsets] % n  # the out-neighbours of t
            q = s[seg] * n + w
            pos = torch.searchsorted(okey, q).clamp_max(num_oriented - 1)
            hit = okey[pos] == q
            found.append(torch.stack([s[seg][hit], t[seg][hit], w[hit]]))
        start = stop
    return found


def cap_triangles(
    triangles: Tensor, num_nodes: int, max_per_node: int, *, seed: int = 0,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    r"""The triangles of ``triangles`` kept under the cap of :func:`enumerate_triangles` (each node
    in at most ``max_per_node`` of them), in their given order.

    Shapes:
        triangles: ``[3, T]`` -> ``[3, T']``, :math:`T' \le T`
    """
    if max_per_node < 1:
        raise ValueError(f"max_per_node must be a positive number of triangles, got {max_per_node}")
    num = triangles.size(1)
    if num == 0:
        return triangles
    device = triangles.device
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    prio = torch.randperm(num, generator=gen).to(device)
    tid = torch.arange(num, device=device).repeat(3)  # the incidences (node, triangle), slot-major
    node = triangles.reshape(-1).long()
    order = torch.sort(prio[tid], stable=True).indices  # by priority, then grouped by node (stable)
    order = order[torch.sort(node[order], stable=True).indices]
    sorted_node = node[order]
    first = torch.cumsum(torch.bincount(sorted_node, minlength=num_nodes), 0) - torch.bincount(
        sorted_node, minlength=num_nodes)
    within = torch.arange(order.numel(), device=device) - first[sorted_node]  # 0 = the node's favourite
    kept = torch.zeros(num, dtype=torch.long, device=device).index_add_(0, tid[order], (within < max_per_node).long())
    return triangles[:, kept == 3]


def _edge_lookup(edge_index: Tensor, num_nodes: int):
    """A function ``(a, b) -> position of the edge a -> b in edge_index, or -1``."""
    key = edge_index[0].long() * num_nodes + edge_index[1].long()
    skey, order = torch.sort(key)

    def find(a: Tensor, b: Tensor) -> Tensor:
        q = a.long() * num_nodes + b.long()
        if skey.numel() == 0:
            return torch.full_like(q, -1)
        pos = torch.searchsorted(skey, q).clamp_max(skey.numel() - 1)
        return torch.where(skey[pos] == q, order[pos], -1)

    return find


def triangle_edge_positions(triangles: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""For each triangle :math:`(i, j, k)` the positions in ``edge_index`` of its directed edges
    :math:`j \to k`, :math:`i \to k`, :math:`i \to j` (row ``s``: the side opposite slot ``s``), then of
    their reverses :math:`k \to j`, :math:`k \to i`, :math:`j \to i` (rows ``3 + s``); ``-1`` where
    ``edge_index`` lacks that edge. Assumes ``edge_index`` has no duplicate edges.

    Shapes:
        triangles: ``[3, T]``, edge_index: ``[2, E]`` -> ``[6, T]``
    """
    find = _edge_lookup(edge_index, num_nodes)
    i, j, k = triangles
    return torch.stack([find(j, k), find(i, k), find(i, j), find(k, j), find(k, i), find(j, i)])


def covered_edge_mask(triangles: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """``True`` for every edge of ``edge_index`` (either direction) that is a side of some triangle.

    Shapes:
        triangles: ``[3, T]``, edge_index: ``[2, E]`` -> ``[E]`` (bool)
    """
    mask = torch.zeros(edge_index.size(1), dtype=torch.bool, device=edge_index.device)
    pos = triangle_edge_positions(triangles, edge_index, num_nodes).reshape(-1)
    mask[pos[pos >= 0]] = True
    return mask
