"""Large synthetic attributed graphs with planted classes, for benchmarks at sizes we have no data for.

:func:`planted_partition_graph` draws a degree-corrected stochastic block model: each node
gets a class uniformly and a heavy-tailed degree weight :math:`\\theta_i`; each undirected
edge picks its first end point with probability :math:`\\propto \\theta`, and its second
end point from the same class with probability ``homophily`` (else from the whole graph),
again :math:`\\propto \\theta`. Features are class means plus unit Gaussian noise,
:math:`x_i = \\mu_{y_i} + \\epsilon_i`, with :math:`\\mu_k \\sim N(0, s^2 I)`.
Everything is vectorised and seeded.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from gbpn.data.graph import clean_graph

# sizes of the paper's large graphs (nodes, undirected edges, features, classes)
ARXIV_SIZE = (169_343, 1_166_243, 128, 40)
PRODUCTS_SIZE = (2_449_029, 61_859_140, 100, 47)


def planted_partition_graph(
    num_nodes: int,
    num_edges: int,
    num_features: int,
    num_classes: int,
    homophily: float = 0.7,
    degree_exponent: float = 2.5,
    feature_scale: float = 0.5,
    seed: int = 0,
    clean: bool = True,
    pairs_only: bool = False,
) -> Data:
    """A DC-SBM graph with ``num_edges`` sampled undirected edges (fewer after removing
    self-loops and duplicates when ``clean``) and class-dependent Gaussian features.

    ``pairs_only`` returns the cleaned undirected edges once each as ``data.pairs``
    ``[2, P]`` and no ``edge_index``: for Products-sized graphs, whose symmetric edge
    list and reverse index alone would take 4 GB (see
    :meth:`gbpn.bp.layer.BeliefPropagation.infer_pairs`)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (num_nodes,), generator=g)
    # Pareto(degree_exponent - 1) weights give a power-law degree tail
    theta = torch.rand(num_nodes, generator=g).clamp_min(1e-12).pow(-1.0 / (degree_exponent - 1.0))
    theta = theta.clamp_max(theta.quantile(0.9999) if num_nodes > 10_000 else theta.max())
    src = torch.multinomial(theta, num_edges, replacement=True, generator=g)
    same = torch.rand(num_edges, generator=g) < homophily
    dst = torch.multinomial(theta, num_edges, replacement=True, generator=g)
    # same-class partner: draw within the class of src by inverse CDF on per-class cumulative weights
    order = torch.argsort(y, stable=True)  # nodes grouped by class
    cls_sorted = y[order]
    cum = torch.cumsum(theta[order].double(), 0)
    bounds = torch.searchsorted(cls_sorted, torch.arange(num_classes + 1))
    lo = torch.where(bounds[:-1] > 0, cum[(bounds[:-1] - 1).clamp_min(0)], torch.zeros(num_classes, dtype=torch.float64))
    hi = cum[(bounds[1:] - 1).clamp_min(0)]
    s_idx = same.nonzero().view(-1)
    c = y[src[s_idx]]
    u = lo[c] + torch.rand(s_idx.numel(), generator=g, dtype=torch.float64) * (hi[c] - lo[c])
    pos = torch.searchsorted(cum, u).clamp(max=num_nodes - 1)
    pos = torch.minimum(torch.maximum(pos, bounds[:-1][c]), (bounds[1:][c] - 1).clamp_min(0))
    dst[s_idx] = order[pos]
    mu = torch.randn(num_classes, num_features, generator=g) * feature_scale
    x = mu[y] + torch.randn(num_nodes, num_features, generator=g)
    if pairs_only:
        keep = src != dst
        lo, hi = torch.minimum(src[keep], dst[keep]), torch.maximum(src[keep], dst[keep])
        del src, dst, keep
        key = torch.unique(lo * num_nodes + hi)
        del lo, hi
        data = Data(x=x, y=y, pairs=torch.stack([key // num_nodes, key % num_nodes]), num_nodes=num_nodes)
    else:
        data = Data(x=x, y=y, edge_index=torch.stack([src, dst]))
    data.num_classes = num_classes
    data.name = f"dcsbm-{num_nodes}"
    return clean_graph(data) if clean and not pairs_only else data
