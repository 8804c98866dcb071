"""Input checks of the BP layer's public entry points: a bad input fails loudly instead of
turning into a wrong belief (an index taken for a mask, a self-loop read as an edge, one NaN
row spreading over its component, a pair list given in both directions).

Each check is a few passes over ``[E]`` or ``[N, c]``; ``with unchecked():`` skips them where
the inputs are known to be valid and every pass counts. The coupling-range check of
:func:`check_coupling_range` always runs (it guards the arithmetic itself, not the caller).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import Tensor

from gbpn.graph.cache import GraphCache
from gbpn.bp.numerics import REFUSE

_enabled = True


class NonFinitePotentialError(ValueError):
    """A self-potential with NaN or +inf (from finite features: weights that diverged in training)."""


@contextmanager
def unchecked() -> Iterator[None]:
    """Skip the input checks of :class:`~gbpn.bp.layer.BeliefPropagation` inside this block."""
    global _enabled
    old, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = old


def _check_per_edge(name: str, w: Optional[Tensor], num_edges: int) -> None:
    if w is None:
        return
    if w.shape != (num_edges,) or not w.is_floating_point():
        raise ValueError(f"{name} must be a float tensor of shape [{num_edges}], got {w.dtype} {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{name} holds NaN or inf")


def _check_range(name: str, index: Tensor, num_nodes: int, where: str = "") -> bool:
    """An integer ``[2, E]`` tensor of ids in ``0..num_nodes-1`` (``where``: said after the range)."""
    if index.dim() != 2 or index.size(0) != 2 or index.is_floating_point() or index.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor of shape [2, E], got {index.dtype} {tuple(index.shape)}")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= num_nodes):
        raise ValueError(f"{name} refers to nodes outside 0..{num_nodes - 1}{where}")
    return True


def _check_ids(name: str, index: Tensor, num_nodes: int) -> None:
    _check_range(name, index, num_nodes)
    loops = index[0] == index[1]
    if bool(loops.any()):
        node = int(index[0, loops.nonzero()[0, 0]])
        raise ValueError(f"{name} has a self-loop ({node}, {node}): BP factors are pairwise; drop self-loops "
                         "(torch_geometric.utils.remove_self_loops) and put a node's own evidence in log_self")


def check_node_ids(edge_index: Tensor, num_nodes: int) -> None:
    """``ValueError`` unless ``edge_index`` is an integer ``[2, E]`` tensor of ids in ``0..num_nodes-1``:
    for the encoders, which index their adjacency with the ids before BP's own checks run (an id
    past the features' rows would write outside their buffers). Once per graph, as BP's checks."""
    if not _enabled or torch.compiler.is_compiling():
        return
    _checked_graphs.get([edge_index], ("node ids", num_nodes),
                        lambda: _check_range("edge_index", edge_index, num_nodes, f" (x has {num_nodes} rows)"))


def _check_graph(edge_index: Tensor, rev_index: Optional[Tensor], num_nodes: int) -> bool:
    _check_ids("edge_index", edge_index, num_nodes)
    num_edges = edge_index.size(1)
    if rev_index is not None:
        if rev_index.shape != (num_edges,) or rev_index.is_floating_point():
            raise ValueError(f"rev_index must be an integer tensor [{num_edges}], got {tuple(rev_index.shape)}")
        src, dst = edge_index
        if num_edges and (int(rev_index.min()) < 0 or int(rev_index.max()) >= num_edges
                          or not torch.equal(src.index_select(0, rev_index), dst)
                          or not torch.equal(dst.index_select(0, rev_index), src)):
            raise ValueError("rev_index does not pair every edge (i, j) with its reverse (j, i); compute it with "
                             "gbpn.graph.reverse.reverse_edge_index, or attach it with gbpn.graph.transforms.AddReverseIndex "
                             "as the last transform (a plain Data's rev_index is offset as a node index when batched, "
                             "and not renumbered by subgraph)")
    return True


# graphs that passed _check_graph: a training loop passes the same edge tensors every step
_checked_graphs = GraphCache(6)


def check_not_meta(**tensors: Optional[Tensor]) -> None:
    """Raise ``ValueError`` naming the tensors on the meta device: the checks and the steps read
    values, which meta tensors do not hold."""
    meta = [name for name, t in tensors.items() if isinstance(t, Tensor) and t.is_meta]
    if meta:
        raise ValueError(f"{', '.join(meta)} {'is' if len(meta) == 1 else 'are'} on the meta device (a shape without "
                         "values): BP needs the values; create the tensors on the CPU or a GPU")


def check_bp_inputs(
    log_self: Tensor,
    edge_index: Tensor,
    num_classes: int,
    rev_index: Optional[Tensor] = None,
    edge_weight: Optional[Tensor] = None,
    known_labels: Optional[Tensor] = None,
    known_mask: Optional[Tensor] = None,
    message_weight: Optional[Tensor] = None,
) -> None:
    """Raise ``ValueError`` saying what is wrong with the inputs of :meth:`BeliefPropagation.forward`."""
    if not _enabled:
        return
    check_not_meta(log_self=log_self, edge_index=edge_index, rev_index=rev_index, edge_weight=edge_weight,
                   known_labels=known_labels, known_mask=known_mask, message_weight=message_weight)
    if log_self.dim() != 2 or log_self.size(1) != num_classes or not log_self.is_floating_point():
        raise ValueError(f"log_self must be a float tensor [N, {num_classes}], got {log_self.dtype} "
                         f"{tuple(log_self.shape)}")
    num_nodes = log_self.size(0)
    # -inf (log 0) is a valid potential, as long as every row keeps some finite entry
    finite = torch.isfinite(log_self)
    bad = None if bool(finite.all()) else torch.isnan(log_self).any(1) | (log_self == math.inf).any(1) | ~finite.any(1)
    if bad is not None and bool(bad.any()):
        raise NonFinitePotentialError(f"log_self has NaN, +inf or all -inf in row(s) "
                                      f"{bad.nonzero().view(-1)[:5].tolist()}: one such row would turn its whole "
                                      "connected component into NaN")
    _checked_graphs.get((edge_index, rev_index), num_nodes, lambda: _check_graph(edge_index, rev_index, num_nodes))
    num_edges = edge_index.size(1)
    _check_per_edge("edge_weight", edge_weight, num_edges)
    _check_per_edge("message_weight", message_weight, num_edges)
    if known_labels is not None and known_mask is None:  # unclamped without a word would look like clamping
        raise ValueError("known_labels given without known_mask: pass known_mask as well (True where the label is "
                         "clamped, e.g. data.train_mask; known_labels >= 0 clamps every labelled node)")
    if known_mask is not None:
        if known_mask.dtype != torch.bool or known_mask.shape != (num_nodes,):
            raise ValueError(f"known_mask must be a bool tensor [{num_nodes}] (True = clamped), got "
                             f"{known_mask.dtype} {tuple(known_mask.shape)}; from indices idx use "
                             "mask = torch.zeros(N, dtype=torch.bool); mask[idx] = True")
        if known_labels is not None:
            if known_labels.shape != (num_nodes,) or known_labels.is_floating_point():
                raise ValueError(f"known_labels must be an integer tensor [{num_nodes}], got "
                                 f"{known_labels.dtype} {tuple(known_labels.shape)}")
            lab = known_labels[known_mask]
            if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= num_classes):
                raise ValueError(f"known_labels of clamped nodes must lie in 0..{num_classes - 1}")


def check_symmetric_weight(edge_weight: Optional[Tensor], rev_index: Tensor) -> None:
    """Raise ``ValueError`` unless edge (i, j) and its reverse (j, i) carry the same weight, up to
    rounding (a symmetric normalisation such as ``gcn_norm`` multiplies in another order for the
    two directions)."""
    if not _enabled or edge_weight is None or edge_weight.numel() == 0:
        return
    _checked_graphs.get((edge_weight, rev_index), "symmetric", lambda: _check_symmetric(edge_weight, rev_index))


def _check_symmetric(edge_weight: Tensor, rev_index: Tensor) -> bool:
    w = edge_weight.detach()
    rev = w.index_select(0, rev_index)
    apart = ~torch.isclose(w, rev, rtol=1e-5, atol=0.0)
    if bool(apart.any()):
        k = int(apart.nonzero()[0])
        raise ValueError(f"edge_weight must be symmetric: edge (i, j) and its reverse (j, i) share one coupling, "
                         f"but edge {k} has {float(w[k]):g} and its reverse {float(rev[k]):g}; symmetrise it, "
                         "e.g. with torch_geometric.utils.to_undirected(edge_index, edge_weight, reduce='mean')")
    return True


def check_pairs(pairs: Tensor, num_nodes: int) -> None:
    """Raise ``ValueError`` unless ``pairs`` lists each undirected edge once, without self-loops
    (the input of :meth:`BeliefPropagation.infer_pairs`)."""
    if not _enabled:
        return
    _check_ids("pairs", pairs, num_nodes)
    lo, hi = pairs.min(0).values.long(), pairs.max(0).values.long()
    if torch.unique(lo * num_nodes + hi).numel() != pairs.size(1):
        raise ValueError("pairs must list each undirected edge once; it has an edge twice (in one or both "
                         "directions): keep pairs[:, pairs[0] < pairs[1]] of a symmetric edge_index")


def check_coupling_range(log_H: Tensor, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` when ``log H`` spreads wider than ``dtype`` represents exactly in the
    message update (see :func:`~gbpn.bp.functional.log_matmul_exp`)."""
    limit = REFUSE.get(dtype)
    if limit is None or log_H.numel() == 0:
        return
    if not bool(torch.isfinite(log_H.detach()).all()):
        raise ValueError("the coupling H holds NaN, inf or 0 (log H not finite): if training made it so, it diverged "
                         "(lower the learning rate, coupling_lr in gbpn.train.fit); a coupling_init must be positive "
                         "and finite")
    spread = float(log_H.detach().max() - log_H.detach().min())
    if not spread <= limit:
        wider = "run BP in float64 (.double()) or keep" if dtype != torch.float64 else "keep"  # none wider
        raise ValueError(f"log H spans {spread:.1f} (max - min), beyond the {limit:.0f} that {dtype} messages "
                         f"compute exactly; {wider} the coupling milder")
