"""Node partitions for partitioned BP: METIS where it fits, refined degree-balanced ranges otherwise.

A part owns a set of nodes. It holds the undirected edges among them (*local pairs*) and, for
every edge with one end outside (*cut edge*), the local end; the other end is a *halo* node of
the part. Each directed message is computed by the part that owns its source and stored by the
part that owns its destination (:mod:`gbpn.bp.backends.pairs`), so over all parts every directed edge is
computed exactly once and received exactly once.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.errors import GBPNError
from gbpn.graph.degree import pair_degree

logger = logging.getLogger(__name__)

# METIS needs a symmetric CSR (2 P + N + 1 int64) and several times that inside; above this
# many directed edges the default partition is the ranges.
METIS_MAX_EDGES = 50_000_000
PARTITIONERS = ("auto", "metis", "refined", "ranges")


def _ids(pairs: Tensor) -> Tensor:
    """``pairs`` as an index (int32 or int64, as torch's indexing takes them)."""
    return pairs if pairs.dtype in (torch.int32, torch.int64) else pairs.long()


def _share(num_pairs: int, share: Tuple[int, int]) -> slice:
    """The edges ``share = (rank, world)`` counts: its ``1/world`` of them."""
    rank, world = share
    return slice(num_pairs * rank // world, num_pairs * (rank + 1) // world)


def range_parts(pairs: Tensor, num_nodes: int, num_parts: int, deg: Optional[Tensor] = None) -> Tensor:
    """Contiguous node ranges with about the same number of directed edges each (the work of a
    BP step is per edge). No graph structure is used: on a graph with random node ids about
    ``1 - 1/num_parts`` of the edges are cut. ``deg``: :func:`degree`, if already known."""
    deg = pair_degree(pairs, num_nodes) if deg is None else deg
    cum = torch.cumsum(deg.double() + 1e-9, 0)  # + eps: edgeless nodes still split
    bounds = torch.arange(1, num_parts, dtype=torch.float64) * (cum[-1] / num_parts)
    starts = torch.searchsorted(cum, bounds)
    part = torch.zeros(num_nodes, dtype=torch.int32)
    for s in starts.tolist():
        part[s:] += 1
    return part


def refine_parts(pairs: Tensor, part: Tensor, num_parts: int, iterations: int = 12, min_gain: float = 0.002,
                 seed: int = 0, share: Tuple[int, int] = (0, 1),
                 all_reduce: Optional[Callable[[Tensor], None]] = None, deg: Optional[Tensor] = None) -> Tensor:
    r"""Fewer cut edges, the same edge balance: balanced label propagation from ``part`` ``[N]``.

    Each iteration counts every node's neighbours in every part (two passes over the edges),
    and a node whose neighbours mostly lie in another part :math:`q` becomes a candidate to move
    there, with gain :math:`n_q - n_{\mathrm{own}}`; half the candidates, drawn at random, are kept
    (two neighbours moving past each other would otherwise both stay cut). For each pair of
    parts the candidates moving each way are taken best gain first, as far as both directions
    carry the same number of directed edges, so every part keeps its share of the BP work.
    Stops after ``iterations`` or when an iteration uncuts fewer than ``min_gain`` of the edges.
    Memory: ``N x num_parts`` int32 counts (``N`` for two parts) plus chunk temporaries.

    Several processes can share the counting: with ``share=(rank, world)`` each counts over its
    ``1/world`` of the edges and ``all_reduce`` sums the counts in place; every process then
    makes the same seeded moves and returns the same parts. ``deg``: :func:`degree`, if already known."""
    num_nodes = part.numel()
    pairs = _ids(pairs)
    deg = (pair_degree(pairs, num_nodes) if deg is None else deg).to(torch.int32)
    u, v = pairs[:, _share(pairs.size(1), share)]
    gen = torch.Generator().manual_seed(seed)
    part = part.to(torch.int64 if num_parts > 127 else torch.int8).clone()
    count = _part_counter(u, v, deg, num_parts, all_reduce)
    cut_before = None
    for _ in range(iterations):
        counts = count(part)
        own = counts.gather(1, part.long().unsqueeze(1)).squeeze(1)
        best, target = counts.max(1)
        cut = int((deg - own).sum()) // 2
        logger.debug(f"refine: {100 * cut / max(pairs.size(1), 1):.2f}% of edges cut")
        if cut_before is not None and cut_before - cut < min_gain * pairs.size(1):
            break
        cut_before = cut
        gain = best - own
        cand = ((gain > 0) & (torch.rand(num_nodes, generator=gen) < 0.5)).nonzero().view(-1)
        src, dst = part.long()[cand], target[cand]
        order = torch.argsort(-gain[cand], stable=True)  # best gain first
        cand, src, dst = cand[order], src[order], dst[order]
        key = src * num_parts + dst
        for p in range(num_parts):
            for q in range(p + 1, num_parts):
                fwd, back = cand[key == p * num_parts + q], cand[key == q * num_parts + p]
                if fwd.numel() == 0 or back.numel() == 0:
                    continue
                wf, wb = torch.cumsum(deg[fwd].long(), 0), torch.cumsum(deg[back].long(), 0)
                limit = min(int(wf[-1]), int(wb[-1]))
                nf = int(torch.searchsorted(wf, limit, right=True))
                nb = int(torch.searchsorted(wb, limit, right=True))
                part[fwd[:nf]] = q
                part[back[:nb]] = p
    return part.to(torch.int32)


def _part_counter(u: Tensor, v: Tensor, deg: Tensor, num_parts: int,
                  all_reduce: Optional[Callable[[Tensor], None]]) -> Callable[[Tensor], Tensor]:
    """A function of the parts ``[N]`` giving every node's neighbours per part ``[N, num_parts]``
    (int32) over the edges ``(u, v)`` (both directions), summed over processes by ``all_reduce``.
    ``deg`` is the full degree. Two parts count only the neighbours in part 1 (the rest are in
    part 0): half the scattered array, which then stays in cache, is about twice as fast."""
    num_nodes = deg.numel()
    step = min(1 << 20, max(u.numel(), 1))  # edges per chunk: small reused temporaries
    theirs = torch.empty(step, dtype=torch.int64 if num_parts > 127 else torch.int8)
    flat = torch.empty(step, dtype=torch.int64 if num_parts > 2 else torch.int32)
    ones = torch.ones(1, dtype=torch.int32).expand(step)

    def count(part: Tensor) -> Tensor:
        counts = torch.zeros(num_nodes * (num_parts if num_parts > 2 else 1), dtype=torch.int32)
        for a, b in ((u, v), (v, u)):  # neighbours b of a
            for start in range(0, a.numel(), step):
                n = min(step, a.numel() - start)
                torch.index_select(part, 0, b[start:start + n], out=theirs[:n])
                if num_parts == 2:  # counts[a] += part[b]
                    counts.index_add_(0, a[start:start + n], flat[:n].copy_(theirs[:n]))
                else:  # counts[a, part[b]] += 1
                    # in int64: a[k] * num_parts can pass 2^31 with int32 ids
                    flat[:n].copy_(a[start:start + n]).mul_(num_parts).add_(theirs[:n])
                    counts.index_add_(0, flat[:n], ones[:n])
        if all_reduce is not None:
            all_reduce(counts)
        if num_parts == 2:
            return torch.stack([deg - counts, counts], 1)
        return counts.view(num_nodes, num_parts)

    return count


def metis_parts(pairs: Tensor, num_nodes: int, num_parts: int) -> Tensor:
    """METIS (``pymetis``) parts: few cut edges, balanced node counts."""
    from gbpn.graph.partition import metis_clusters
    from gbpn.graph.csr import CSRGraph

    return metis_clusters(CSRGraph.from_pairs(pairs, num_nodes), num_parts).to(torch.int32)


def resolve_partitioner(method: str, num_pairs: int) -> str:
    """``method`` itself, or for ``auto``: METIS when ``pymetis`` is installed and the graph has at
    most :data:`METIS_MAX_EDGES` directed edges, else ``refined``."""
    if method not in PARTITIONERS:
        raise GBPNError(f"unknown partitioner {method!r}: choose one of {', '.join(PARTITIONERS)}")
    if method != "auto":
        return method
    try:
        import pymetis  # noqa: F401
        return "metis" if 2 * num_pairs <= METIS_MAX_EDGES else "refined"
    except ImportError:
        return "refined"


def partition(pairs: Tensor, num_nodes: int, num_parts: int, method: str = "auto", share: Tuple[int, int] = (0, 1),
              all_reduce: Optional[Callable[[Tensor], None]] = None) -> Tensor:
    """The part ``[N]`` (int32) of every node (:func:`resolve_partitioner`; ``refined`` is
    :func:`range_parts` improved by :func:`refine_parts`, which ``share`` and ``all_reduce`` spread
    over processes)."""
    method = resolve_partitioner(method, pairs.size(1))
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.int32)
    if method == "metis":
        return metis_parts(pairs, num_nodes, num_parts)
    if method == "refined" and all_reduce is not None:  # the degrees too: each process counts its share
        deg = pair_degree(pairs[:, _share(pairs.size(1), share)], num_nodes)
        all_reduce(deg)
    else:
        deg = pair_degree(pairs, num_nodes)
    part = range_parts(pairs, num_nodes, num_parts, deg)
    return refine_parts(pairs, part, num_parts, share=share, all_reduce=all_reduce, deg=deg) if method == "refined" else part


def save_parts(path: str | Path, part: Tensor, num_pairs: int, method: str) -> None:
    """Write node parts ``[N]`` for :func:`load_parts` (atomically), with the graph's size and the method."""
    from gbpn.io import save_torch

    save_torch(path, {"part": part.to(torch.int32), "num_pairs": int(num_pairs), "method": method})


def load_parts(path: str | Path, num_nodes: int, num_pairs: int, num_parts: int) -> Optional[Tuple[Tensor, str]]:
    """The parts and method :func:`save_parts` wrote to ``path``; ``None`` if there is no such file.
    A file that does not fit this graph (node or edge count) or this number of parts is an error."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        part, pairs, method = saved["part"], int(saved["num_pairs"]), str(saved["method"])
    except Exception as err:
        raise GBPNError(f"{path} is corrupt or not a gbpn parts file ({type(err).__name__}): delete it to "
                        "partition again") from None
    if part.dim() != 1 or part.numel() != num_nodes or pairs != num_pairs:
        raise GBPNError(f"{path} holds parts of a graph with {part.numel()} nodes and {pairs} edges, this one has "
                        f"{num_nodes} and {num_pairs}: delete it or give another parts file")
    found = int(part.max()) + 1 if part.numel() else 0
    if part.numel() and (int(part.min()) < 0 or found != num_parts):
        raise GBPNError(f"{path} splits the graph into {found} parts, this run has {num_parts} processes: "
                        "run with as many, or give another parts file")
    return part.to(torch.int32), method


@dataclass
class Part:
    """What one part holds. ``nodes``: its nodes' global ids (ascending); ``pairs`` ``[2, P_r]``:
    local edges in local ids; ``cut_node`` ``[B]``: the local end of every cut edge and
    ``cut_other`` ``[B]``: the global id of its other end; ``cut_peer_counts[q]``: how many of
    them lead to part ``q``, rows grouped by ``q`` and, within a peer, in the order of the global
    ``pairs`` (so both parts list a shared edge at the same row); ``halo``: the number of distinct
    nodes of other parts adjacent to this one (the distinct ``cut_other``)."""

    nodes: Tensor
    pairs: Tensor
    cut_node: Tensor
    cut_other: Tensor
    cut_peer_counts: List[int]
    halo: int

    def stats(self) -> Dict[str, int]:
        return {"nodes": self.nodes.numel(), "local_pairs": self.pairs.size(1), "cut_edges": self.cut_node.numel(),
                "halo": self.halo}


def build_part(pairs: Tensor, part: Tensor, rank: int, num_parts: int) -> Part:
    """The :class:`Part` of ``rank`` from the global undirected ``pairs`` ``[2, P]`` (each edge once)
    and the node parts ``part`` ``[N]``. Streams over the pairs in chunks: besides the result it
    needs ``O(N)`` and one chunk. Node ids are int32 up to 2^31 nodes. With one part, the part's
    ``pairs`` are the given ones (not a copy) when they already have that dtype."""
    num_nodes = part.numel()
    pairs = _ids(pairs)
    index_dtype = torch.int32 if num_nodes < 2**31 else torch.int64
    if num_parts == 1:  # everything is local
        return Part(nodes=torch.arange(num_nodes), pairs=pairs.to(index_dtype),
                    cut_node=torch.empty(0, dtype=index_dtype), cut_other=torch.empty(0, dtype=index_dtype),
                    cut_peer_counts=[0], halo=0)
    nodes = (part == rank).nonzero().view(-1)
    local_id = torch.full((num_nodes,), -1, dtype=index_dtype)
    local_id[nodes] = torch.arange(nodes.numel(), dtype=index_dtype)
    local, cut_node, cut_peer, cut_other = [], [], [], []
    step = 1 << 24
    for start in range(0, max(pairs.size(1), 1), step):  # once at least: an edgeless graph has parts too
        uv = pairs[:, start:start + step]
        u, v = uv[0], uv[1]
        # int32 ids index directly: no int64 copies of the chunk
        u_mine, v_mine = torch.index_select(part, 0, u) == rank, torch.index_select(part, 0, v) == rank
        both = u_mine & v_mine
        local.append(torch.index_select(local_id, 0, uv[:, both].reshape(-1)).view(2, -1))
        # one selection in the order of the pairs: both ends of a cut edge meet it at the same
        # point of the same global list, so their rows for each other come out in the same order
        cut = u_mine ^ v_mine
        first = u_mine[cut]
        uc, vc = uv[:, cut]
        m = torch.where(first, uc, vc)
        o = torch.where(first, vc, uc)
        cut_node.append(torch.index_select(local_id, 0, m))
        cut_other.append(o.to(index_dtype))
        cut_peer.append(torch.index_select(part, 0, o).to(torch.int32))
    peer, node, other = torch.cat(cut_peer), torch.cat(cut_node), torch.cat(cut_other)
    if not bool((peer[1:] >= peer[:-1]).all()):  # with two parts every cut edge has the same peer
        order = torch.argsort(peer, stable=True)  # grouped by peer, the pairs' order kept within a peer
        node, other = node[order], other[order]
    counts = torch.bincount(peer.long(), minlength=num_parts).tolist()
    halo = torch.zeros(num_nodes, dtype=torch.bool)
    halo[other.long()] = True  # a scatter instead of sorting every cut edge
    return Part(nodes=nodes, pairs=torch.cat(local, 1) if local else torch.empty((2, 0), dtype=index_dtype),
                cut_node=node, cut_other=other, cut_peer_counts=counts, halo=int(halo.sum()))


def partition_summary(parts: List[Dict[str, int]], num_pairs: int) -> Dict[str, object]:
    """Cut fraction and per-part sizes from every part's :meth:`Part.stats`."""
    cut = sum(p["cut_edges"] for p in parts) // 2
    return {"parts": len(parts), "pairs": num_pairs, "cut_pairs": cut,
            "cut_fraction": cut / max(num_pairs, 1), "per_part": parts}
