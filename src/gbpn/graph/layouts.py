"""The edge orders the BP kernels run on, built once per graph and cached: the CSR order by
destination (CPU and CUDA) and the paired order of the two-class kernels."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from gbpn.graph.cache import GraphCache
from gbpn.graph.reverse import pairing


@dataclass
class CSRLayout:
    """Edges sorted by destination. ``perm``: CSR position -> original edge (``None``: already sorted);
    ``rowptr`` ``[N+1]``, ``src``, ``dst`` and ``rev`` (CSR positions of the reverses) ``[E]``, int64 numpy.
    ``order``: the layout's node ``j`` is the graph's node ``order[j]`` (``None``: the graph's own
    numbering), ``rank`` its inverse; node-indexed inputs and outputs go through :meth:`to_layout`
    and :meth:`from_layout`."""

    perm: Optional[Tensor]
    rowptr: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    rev: np.ndarray
    order: Optional[Tensor] = None
    rank: Optional[Tensor] = None

    def to_layout(self, x: Optional[Tensor]) -> Optional[Tensor]:
        """Rows of a node-indexed tensor in the layout's node order."""
        return x if x is None or self.order is None else x.index_select(0, self.order)

    def from_layout(self, x: Tensor) -> Tensor:
        """Rows of a layout-ordered node tensor back in the graph's node order."""
        return x if self.rank is None else x.index_select(0, self.rank)

    @functools.cached_property
    def reverse_pairs(self) -> bool:
        """Whether ``rev`` pairs every edge with another edge, whose reverse it is (what the in-place
        implicit kernel needs; a duplicate edge or a self-loop breaks it)."""
        E = self.rev.shape[0]
        return bool((self.rev[self.rev] == np.arange(E)).all() and (self.rev != np.arange(E)).all())

    def blocks(self, threads: int) -> np.ndarray:
        """Boundaries of one node block per thread, with about equal edges + nodes each."""
        n = self.rowptr.shape[0] - 1
        nb = max(1, min(n, threads))
        work = self.rowptr + np.arange(n + 1)
        cuts = np.searchsorted(work, np.linspace(0, work[-1], nb + 1)[1:-1])
        return np.unique(np.concatenate([[0], cuts, [n]])).astype(np.int64)


def sort_by_destination(edge_index: Tensor, rev_index: Tensor, by_source: bool = False
                        ) -> Tuple[Optional[Tensor], Tensor, Tensor, Tensor]:
    """``(perm, src, dst, rev)`` of the edges in CSR order by destination (then by source, with
    ``by_source``), on their device (int64): ``perm`` maps CSR positions to original edges (``None``:
    already sorted), ``rev`` gives CSR positions."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    if by_source:
        perm = torch.argsort(dst * (int(edge_index.max()) + 1 if src.numel() else 1) + src)
    else:
        perm = None if bool((dst[1:] >= dst[:-1]).all()) else torch.argsort(dst, stable=True)
    rev = rev_index.long()
    if perm is not None:
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel(), device=perm.device)
        src, dst, rev = src[perm], dst[perm], inv[rev[perm]]
    return perm, src.contiguous(), dst.contiguous(), rev.contiguous()


_layouts = GraphCache(6)


def cached_layout(edge_index: Tensor, rev_index: Tensor, key: object, build):
    """``build()`` for a graph, cached for the last few ``(edge_index, rev_index, key)`` (tensors by
    identity and in-place version, so a modified or new tensor is sorted again)."""
    return _layouts.get((edge_index, rev_index), key, build)


# From this many nodes on, the CPU layout renumbers them (:func:`locality_order`). Below it the
# beliefs a step gathers sit in the L2 cache at a few classes whatever the order, and none of the
# real data sets here (at most 20k nodes) nor the mini-batch trees are touched; at 169k nodes and
# c = 40-47 the step took 1.05-2.34x less time with it (README, "Node renumbering").
REORDER_MIN_NODES = 1 << 16


def locality_order(edge_index: Tensor, num_nodes: int) -> Tensor:
    """A node order in which neighbours are near each other: reverse Cuthill-McKee (SciPy) of the
    symmetrised graph. The kernels' slow part is gathering the neighbours' beliefs and the reverse
    messages, rows in no useful order and a cache miss each on a large graph; numbered so, the
    rows a node reads lie close together. Returns ``order``: new position -> node."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    ei = edge_index.cpu().numpy()
    adj = sp.csr_matrix((np.ones(ei.shape[1], np.int32), (ei[0], ei[1])), shape=(num_nodes, num_nodes))
    return torch.from_numpy(reverse_cuthill_mckee(adj, symmetric_mode=False).astype(np.int64))


def csr_layout(edge_index: Tensor, rev_index: Tensor, num_nodes: int, reorder: Optional[bool] = None) -> CSRLayout:
    """The CSR layout of a graph on CPU (cached, :func:`cached_layout`); ``reorder``: renumber the
    nodes by :func:`locality_order` (``None``: from :data:`REORDER_MIN_NODES` nodes on)."""
    if reorder is None:
        reorder = num_nodes >= REORDER_MIN_NODES

    def build() -> CSRLayout:
        order = rank = None
        if reorder:
            order = locality_order(edge_index, num_nodes)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(num_nodes)
        perm, src, dst, rev = sort_by_destination(edge_index if rank is None else rank[edge_index], rev_index,
                                                  by_source=reorder)
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        rowptr[1:] = torch.bincount(dst, minlength=num_nodes).cumsum(0)
        return CSRLayout(perm, rowptr.numpy(), src.numpy(), dst.numpy(), rev.numpy(), order, rank)

    return cached_layout(edge_index, rev_index, ("cpu", num_nodes, reorder), build)


@dataclass
class PairLayout:
    """The paired layout: ``perm`` (paired position -> original edge; ``None``: already paired),
    ``u``, ``v`` ``[h]`` the ends of each pair's first edge (int32 when the node ids fit)."""

    perm: Optional[Tensor]
    u: np.ndarray
    v: np.ndarray


def pair_layout(edge_index: Tensor, rev_index: Tensor, num_nodes: int) -> Optional[PairLayout]:
    """The paired layout of a graph (cached), or ``None`` when an edge is its own reverse."""
    def build() -> Optional[PairLayout]:
        perm, paired = pairing(rev_index)
        if not paired:
            return None
        h = rev_index.numel() // 2
        src, dst = (edge_index[0], edge_index[1]) if perm is None else (edge_index[0][perm], edge_index[1][perm])
        idx = torch.int32 if num_nodes < 2**31 else torch.int64
        return PairLayout(perm, src[:h].to(idx).numpy().copy(), dst[:h].to(idx).numpy().copy())

    return cached_layout(edge_index, rev_index, ("pairs", num_nodes), build)


@dataclass
class DeviceCSR:
    """Edges sorted by destination, on the graph's device: ``perm`` (CSR position -> original edge,
    ``None`` if already sorted), ``rowptr`` ``[N+1]``, ``src`` and ``rev`` (CSR positions of the
    reverses) ``[E]``, int32 below 2^31 edges."""

    perm: Optional[Tensor]
    rowptr: Tensor
    src: Tensor
    rev: Tensor


def device_csr(edge_index: Tensor, rev_index: Tensor, num_nodes: int) -> DeviceCSR:
    """The CSR order of a graph on its device (cached, :func:`~gbpn.graph.layouts.cached_layout`)."""
    def build() -> DeviceCSR:
        perm, src, dst, rev = sort_by_destination(edge_index, rev_index)
        index = torch.int32 if src.numel() < 2**31 else torch.int64
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=src.device)
        rowptr[1:] = torch.bincount(dst, minlength=num_nodes).cumsum(0)
        return DeviceCSR(perm, rowptr.to(index), src.to(index), rev.to(index))

    return cached_layout(edge_index, rev_index, (str(edge_index.device), num_nodes), build)
