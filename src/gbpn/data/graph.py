"""Graph hygiene: one cleaning pass and input validation before any model sees a graph."""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from gbpn.errors import GBPNError
from gbpn.graph.reverse import reverse_edge_index
from gbpn.graph.transforms import attach_reverse_index


def clean_graph(data: Data) -> Data:
    """Return a copy of ``data`` with a symmetric, coalesced, self-loop-free edge list and its reverse index.

    Edges are made undirected (an edge given in one direction gets its reverse),
    duplicates are merged (``edge_weight`` averaged), self-loops dropped. Isolated
    nodes stay: their belief is their self-potential. Adds ``data.rev_index``.
    """
    data = data.clone()
    edge_index = data.edge_index.long()
    weight = getattr(data, "edge_weight", None)
    edge_index, weight = remove_self_loops(edge_index, weight)
    if weight is not None:
        edge_index, weight = to_undirected(edge_index, weight.float(), num_nodes=data.num_nodes, reduce="mean")
        data.edge_weight = weight
    else:
        edge_index = to_undirected(edge_index, num_nodes=data.num_nodes)
    data.edge_index = edge_index
    return attach_reverse_index(data, reverse_edge_index(edge_index, data.num_nodes))


def as_training_graph(data: Data) -> Data:
    """``data`` as training reads it: as it is when it came from :func:`gbpn.data.load_dataset`
    (it has ``num_classes`` and ``rev_index``), else a checked (:func:`validate_data`) and cleaned
    (:func:`clean_graph`) copy, with ``num_classes`` from its labels where not given; so a PyG
    data set's ``Data`` trains as it is."""
    y = getattr(data, "y", None)
    if y is None:
        raise GBPNError("training needs node labels in data.y (-1 for unlabelled nodes)")
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise GBPNError(f"data.y must hold integer class ids (-1 for unlabelled nodes), got {y.dtype}; "
                        "e.g. data.y = data.y.long()")
    if "rev_index" in data and "num_classes" in data and y.dtype == torch.long:
        return data
    data = data.clone()
    data.y = y.long()  # int32 and the like: the loss takes int64 class ids
    if "rev_index" in data and "num_classes" in data:
        return data
    if "num_classes" not in data:
        data.num_classes = int(data.y.max()) + 1 if data.y.numel() else 0
    validate_data(data)
    return clean_graph(data)


def validate_data(data: Data) -> None:
    """Check a graph before training or prediction; raise :class:`GBPNError` saying what to fix."""
    x = getattr(data, "x", None)
    if x is None or data.num_nodes is None or data.num_nodes == 0:
        raise GBPNError("the graph is empty: it has no nodes (or no feature matrix)")
    if x.dim() != 2:
        raise GBPNError(f"features must be a 2-D matrix [num_nodes, num_features], got shape {tuple(x.shape)}")
    n = x.size(0)
    if not torch.isfinite(x if not x.is_sparse else x.coalesce().values()).all():
        bad = (~torch.isfinite(x.to_dense())).any(1).nonzero().view(-1)[:5].tolist()
        raise GBPNError(f"features contain NaN or inf (first bad rows: {bad}); impute or drop them")
    ei = data.edge_index
    if ei.dim() != 2 or ei.size(0) != 2:
        raise GBPNError(f"edge_index must have shape [2, E], got {tuple(ei.shape)}")
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise GBPNError(f"edge_index refers to nodes outside 0..{n - 1} (min {int(ei.min())}, max {int(ei.max())})")
    y = getattr(data, "y", None)
    if y is not None:
        if y.dim() != 1 or y.numel() != n:
            raise GBPNError(f"labels must be a vector of length {n} (one per node), got shape {tuple(y.shape)}")
        c = int(data.num_classes)
        if int(y.max()) >= c or int(y.min()) < -1:
            raise GBPNError(
                f"labels must lie in 0..{c - 1} (or -1 for unknown), got min {int(y.min())}, max {int(y.max())}"
            )
    w = getattr(data, "edge_weight", None)
    if w is not None and (w.numel() != ei.size(1) or not torch.isfinite(w).all()):
        raise GBPNError(f"edge_weight must hold one finite value per edge ({ei.size(1)}), got {w.numel()}")
