"""PyG transforms that precompute what the BP layer would otherwise recompute every forward."""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from gbpn.graph.reverse import paired_order, reverse_edge_index


class ReverseIndexData(Data):
    r"""A :class:`~torch_geometric.data.Data` whose ``rev_index`` PyG treats as what it is, edge
    positions: :class:`~torch_geometric.data.Batch` (and so ``DataLoader``) offsets it by each
    graph's number of edges, not of nodes, and :meth:`subgraph` / :meth:`edge_subgraph` find it
    again for the edges they keep (dropped when an edge subgraph keeps an edge without its
    reverse). :class:`AddReverseIndex` and :func:`gbpn.data.load_dataset` give plain ``Data``
    this class."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "rev_index":
            return self.num_edges
        return super().__inc__(key, value, *args, **kwargs)

    def _refresh(self) -> "ReverseIndexData":
        if "rev_index" in self:
            try:
                self.rev_index = reverse_edge_index(self.edge_index, self.num_nodes)
            except ValueError:  # an edge kept without its reverse: there is no reverse index
                del self.rev_index
        return self

    def subgraph(self, subset):
        return super().subgraph(subset)._refresh()

    def edge_subgraph(self, subset):
        return super().edge_subgraph(subset)._refresh()


# a dataset saved with this class (e.g. by a pre_transform) reloads under torch.load(weights_only=True)
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([ReverseIndexData])


def attach_reverse_index(data: Data, rev: torch.Tensor) -> Data:
    """``data.rev_index = rev``, making a plain ``Data`` a :class:`ReverseIndexData` (in place) so
    that batching and subgraphs keep the index right."""
    if type(data) is Data:
        object.__setattr__(data, "__class__", ReverseIndexData)  # Data's own __setattr__ stores attributes
    data.rev_index = rev
    return data


class AddReverseIndex(BaseTransform):
    r"""Attach ``data.rev_index`` (the position of every edge's reverse) once, so repeated
    forwards of :class:`~gbpn.BeliefPropagation` / :class:`~gbpn.GBPN` skip the sort that
    finds it.

    With ``paired=True`` (default) the edges are also reordered into the *paired layout* of
    :func:`~gbpn.graph.reverse.paired_order` (one direction of every edge in the first half,
    the reverses in the same order in the second), together with every edge-level attribute
    (``edge_weight``, ``edge_attr``, ...). The layer recognises that layout and reads reverse
    messages as contiguous halves, without reordering the edges in each forward.

    The graph must be undirected without duplicate edges: apply
    ``torch_geometric.transforms.ToUndirected()`` first if it is not. A plain ``Data`` comes back
    as a :class:`ReverseIndexData`, which batches and slices ``rev_index`` correctly; a transform
    that reorders or adds edges afterwards (``ToUndirected``, ``AddSelfLoops``, ``ToSparseTensor``)
    invalidates it, so apply this one last.

    Example::

        import torch_geometric.transforms as T
        transform = T.Compose([T.ToUndirected(), AddReverseIndex()])
        data = transform(data)
        log_p = model(data.x, data.edge_index, rev_index=data.rev_index)
    """

    def __init__(self, paired: bool = True):
        self.paired = paired

    def forward(self, data: Data) -> Data:
        if not isinstance(data, Data):
            raise TypeError(f"AddReverseIndex takes a homogeneous torch_geometric Data, got {type(data).__name__} "
                            "(BP has one coupling for one edge type)")
        if getattr(data, "edge_index", None) is None:
            raise ValueError("AddReverseIndex needs data.edge_index; after ToSparseTensor the graph is in adj_t: "
                             "apply AddReverseIndex before it, or pass adj_t to the layer as it is")
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
        return attach_reverse_index(data, rev)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(paired={self.paired})"
