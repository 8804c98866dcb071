"""PyG transforms that precompute what the BP layer would otherwise recompute every forward."""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from gbpn.nn.functional import paired_order, reverse_edge_index


class AddReverseIndex(BaseTransform):
    r"""Attach ``data.rev_index`` (the position of every edge's reverse) once, so repeated
    forwards of :class:`~gbpn.nn.BeliefPropagation` / :class:`~gbpn.GBPN` skip the sort that
    finds it.

    With ``paired=True`` (default) the edges are also reordered into the *paired layout* of
    :func:`~gbpn.nn.functional.paired_order` (one direction of every edge in the first half,
    the reverses in the same order in the second), together with every edge-level attribute
    (``edge_weight``, ``edge_attr``, ...). The layer recognises that layout and reads reverse
    messages as contiguous halves, without reordering the edges in each forward.

    The graph must be undirected without duplicate edges: apply
    ``torch_geometric.transforms.ToUndirected()`` first if it is not.

    Example::

        import torch_geometric.transforms as T
        transform = T.Compose([T.ToUndirected(), AddReverseIndex()])
        data = transform(data)
        log_p = model(data.x, data.edge_index, rev_index=data.rev_index)
    """

    def __init__(self, paired: bool = True):
        self.paired = paired

    def forward(self, data: Data) -> Data:
        rev = reverse_edge_index(data.edge_index, data.num_nodes)
        perm = paired_order(rev) if self.paired else None
        if perm is not None:
            num_edges = perm.numel()
            for store in data.edge_stores:
                for key, value in store.items():
                    if key != "rev_index" and torch.is_tensor(value) and store.is_edge_attr(key):
                        dim = data.__cat_dim__(key, value, store)  # -1 for edge_index, 0 for edge_weight
                        store[key] = value.index_select(dim, perm)
            rev = torch.arange(num_edges, device=rev.device).roll(num_edges // 2)
        data.rev_index = rev
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(paired={self.paired})"
