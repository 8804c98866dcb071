"""The reverse-edge index and the paired layout: which row holds the message along ``(j, i)``."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor


def paired_order(rev: Tensor) -> Optional[Tensor]:
    r"""A permutation of the edges into the *paired layout*: the first half holds one direction
    of every undirected edge (in their given order), the second half their reverses in the same
    order, so that the reverse of row ``e`` is row ``e ± E/2`` and the cavity reads it as a
    contiguous half instead of a random gather. ``None`` when some edge is its own reverse.

    Shapes:
        rev: ``[E]`` (an involution, as from :func:`reverse_edge_index`) -> ``[E]`` or ``None``
    """
    idx = (torch.arange(rev.numel(), device=rev.device) < rev).nonzero().view(-1)
    if 2 * idx.numel() != rev.numel():
        return None
    return torch.cat([idx, rev.index_select(0, idx)])


def pairing(rev_index: Tensor) -> Tuple[Optional[Tensor], bool]:
    """The permutation into the paired layout of :func:`paired_order` (``None`` when the edges are
    already in it, as after :class:`~gbpn.graph.transforms.AddReverseIndex`) and whether the layout can be
    used at all."""
    h = rev_index.numel() // 2
    if 2 * h == rev_index.numel() and bool((rev_index == torch.arange(rev_index.numel(), device=rev_index.device)
                                            .roll(h)).all()):
        return None, True
    perm = paired_order(rev_index)
    return perm, perm is not None


def reverse_edge_index(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""For every directed edge :math:`e = (i, j)` return the position of :math:`(j, i)`.

    Raises ``ValueError`` if some edge has no reverse or the edge list has
    duplicates (then the reverse is ambiguous); clean the graph first with
    :func:`gbpn.data.graph.clean_graph`.

    Shapes:
        edge_index: ``[2, E]`` -> ``[E]``
    """
    src, dst = edge_index[0].long(), edge_index[1].long()
    key = src * num_nodes + dst
    order = torch.argsort(key)
    sorted_key = key[order]
    if sorted_key.numel() > 1 and bool((sorted_key[1:] == sorted_key[:-1]).any()):
        raise ValueError("edge_index has duplicate edges: coalesce it first, e.g. with "
                         "torch_geometric.transforms.ToUndirected() or torch_geometric.utils.coalesce")
    rkey = dst * num_nodes + src
    pos = torch.searchsorted(sorted_key, rkey).clamp_max(max(key.numel() - 1, 0))
    if key.numel() and not bool((sorted_key[pos] == rkey).all()):
        raise ValueError("edge_index is directed: some edge (i, j) has no reverse (j, i); BP needs both "
                         "directions, add them with torch_geometric.transforms.ToUndirected()")
    return order[pos]
