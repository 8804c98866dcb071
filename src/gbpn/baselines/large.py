"""Mini-batch GNN baselines for large graphs (paper section 4.3, Table 5).

==================  ==========================================================================
``sage-sampled``    GraphSAGE (mean) trained on sampled neighbourhoods, ``fanout`` per hop
``gat-sampled``     GAT (4 heads x 64 units) trained on sampled neighbourhoods
``cluster-gcn``     ClusterGCN (Chiang et al. 2019): METIS clusters of about ``cluster_size``
                    nodes, ``clusters_per_batch`` of them (and the edges between them) per
                    batch; the network is the two-layer mean-aggregator GraphSAGE, as in PyG's
                    ClusterGCN example
==================  ==========================================================================

Neighbourhoods come from :func:`gbpn.sampling.neighbor.sample_subgraph` (PyG's
``NeighborLoader`` needs ``pyg-lib`` or ``torch-sparse``, which have no wheels for every
torch release); METIS partitions from ``pymetis`` (``pip install 'gbpn[scale]'``). Batches
are cut into PyG ``Data`` and run through the same PyG layers as the full-batch baselines.
Evaluation is exact and layer-wise: every node's first-layer output from all its
neighbours, in node chunks, then the second layer the same way (never the whole graph's
``[E, hidden]`` messages at once).
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from gbpn.baselines.gnn import GAT, SAGE, TwoLayerGNN
from gbpn.baselines.training import Masks
from gbpn.data.splits import check_masks
from gbpn.errors import GBPNError
from gbpn.sampling.neighbor import in_edges, sample_subgraph
from gbpn.graph.csr import CSRGraph
from gbpn.train.loop import optimizer_step, train_with_selection
from gbpn.data.features import prepare_features
from gbpn.graph.partition import induced_subgraph, metis_clusters

LARGE_BASELINES = ("sage-sampled", "gat-sampled", "cluster-gcn")


@torch.no_grad()
def layerwise_inference(model: TwoLayerGNN, x: Tensor, graph: CSRGraph, node_chunk: int = 65536) -> Tensor:
    """Logits ``[N, c]`` of a two-layer model with every neighbour, one layer at a time in
    chunks of ``node_chunk`` target nodes (exact for mean aggregation and attention)."""
    model.eval()

    def apply(layer, h: Tensor) -> Tensor:
        # neighbourhoods are rebuilt per layer rather than held for the whole graph (O(E) memory)
        outs = []
        for start in range(0, graph.num_nodes, node_chunk):
            targets = torch.arange(start, min(start + node_chunk, graph.num_nodes))
            nodes, ei = in_edges(graph, targets)
            outs.append(layer(h.index_select(0, nodes), ei)[: targets.numel()])
        return torch.cat(outs)

    return apply(model.conv2, F.relu(apply(model.first_layer, x)))


def fit_large_baseline(
    name: str,
    data: Data,
    masks: Masks,
    seed: int = 0,
    epochs: int = 20,
    batch_size: int = 1024,
    fanout: int = 5,
    cluster_size: int = 256,
    clusters_per_batch: int = 3,
    lr: float = 1e-3,
    weight_decay: float = 2.5e-4,
    dropout: float = 0.1,
    hidden: int = 256,
    node_chunk: int = 65536,
    progress: bool = False,
) -> Dict[str, float]:
    """Train one of :data:`LARGE_BASELINES` with mini-batches; keep the best validation epoch.

    Returns the metrics of :func:`gbpn.train.loop.train_with_selection` plus ``baseline``.
    """
    key = name.lower()
    if key not in LARGE_BASELINES:
        raise GBPNError(f"unknown large-graph baseline {name!r}; choose one of {', '.join(LARGE_BASELINES)}")
    if min(epochs, batch_size, fanout, cluster_size, clusters_per_batch, hidden, node_chunk) < 1:
        raise GBPNError("epochs, batch size, fanout, cluster size, clusters per batch and hidden must be positive")
    masks = check_masks(masks, data.y)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    c = int(data.num_classes)
    x, y = prepare_features(data.x), data.y
    graph = CSRGraph.from_edge_index(data.edge_index, data.num_nodes)
    model = (GAT(data.num_features, hidden, c, heads=4, dropout=dropout) if key == "gat-sampled"
             else SAGE(data.num_features, hidden, c, dropout))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    train_mask = masks[0]
    train_idx = train_mask.nonzero().view(-1)
    if key == "cluster-gcn":
        cluster = metis_clusters(graph, max(1, round(data.num_nodes / cluster_size)))
        order = torch.argsort(cluster, stable=True)
        sizes = torch.bincount(cluster)
        members = torch.split(order, sizes.tolist())

    def train_epoch(epoch: int) -> float:
        losses = []
        if key == "cluster-gcn":
            perm = torch.randperm(len(members), generator=gen)
            for start in range(0, perm.numel(), clusters_per_batch):
                nodes = torch.cat([members[int(k)] for k in perm[start : start + clusters_per_batch]])
                target = train_mask[nodes].nonzero().view(-1)
                if target.numel() == 0:
                    continue
                out = model(x.index_select(0, nodes), induced_subgraph(graph, nodes))
                losses.append(optimizer_step(opt, F.cross_entropy(out[target], y[nodes[target]])))
        else:
            perm = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
            for start in range(0, perm.numel(), batch_size):
                seeds = perm[start : start + batch_size]
                nodes, ei = sample_subgraph(graph, seeds, [fanout, fanout], gen)
                out = model(x.index_select(0, nodes), ei)[: seeds.numel()]
                losses.append(optimizer_step(opt, F.cross_entropy(out, y[seeds])))
        return sum(losses) / max(len(losses), 1)

    metrics, _, _ = train_with_selection(model, train_epoch, lambda epoch: layerwise_inference(model, x, graph, node_chunk),
                                         y, masks, epochs, progress, key)
    return {**metrics, "baseline": key, "dropout": dropout}
