import pytest
import torch

from gbpn.baselines.gnn import GAT, SAGE
from gbpn.baselines.large import fit_large_baseline, layerwise_inference
from gbpn.graph.partition import induced_subgraph
from gbpn.data.generators import planted_partition_graph
from gbpn.data.splits import random_split
from gbpn.graph.csr import CSRGraph
from gbpn.sampling.neighbor import sample_subgraph


@pytest.fixture(scope="module")
def graph():
    return planted_partition_graph(400, 3000, 8, 3, homophily=0.8, seed=1)


def test_sampled_subgraph_is_a_deduplicated_sample_of_the_graph(graph):
    g = CSRGraph.from_edge_index(graph.edge_index, graph.num_nodes)
    seeds = torch.tensor([5, 17, 3, 250])
    nodes, ei = sample_subgraph(g, seeds, [3, 2], torch.Generator().manual_seed(0))
    assert torch.equal(nodes[:4], seeds) and nodes.unique().numel() == nodes.numel()
    keys = set((graph.edge_index[0] * 400 + graph.edge_index[1]).tolist())
    assert all(int(nodes[a]) * 400 + int(nodes[b]) in keys for a, b in ei.T)  # every sampled edge exists
    indeg = torch.bincount(ei[1], minlength=nodes.numel())
    assert indeg[:4].max() <= 3
    deg = g.degree()[seeds]
    assert torch.equal(indeg[:4], torch.clamp(deg, max=3))  # all neighbours when fewer than the fanout


def test_layerwise_inference_equals_the_full_graph_pass(graph):
    g = CSRGraph.from_edge_index(graph.edge_index, graph.num_nodes)
    for model in (SAGE(8, 16, 3), GAT(8, 16, 3, heads=4)):
        model.eval()
        with torch.no_grad():
            full = model(graph.x, graph.edge_index)
        torch.testing.assert_close(layerwise_inference(model, graph.x, g, node_chunk=37), full, atol=1e-5, rtol=1e-5)


def test_induced_subgraph_keeps_only_inner_edges(graph):
    g = CSRGraph.from_edge_index(graph.edge_index, graph.num_nodes)
    nodes = torch.arange(0, 400, 3)
    ei = induced_subgraph(g, nodes)
    inner = torch.isin(graph.edge_index, nodes).all(0).sum()
    assert ei.size(1) == int(inner)


@pytest.mark.parametrize("name", ["sage-sampled", "gat-sampled", "cluster-gcn"])
def test_large_baselines_learn_a_homophilous_graph(graph, name):
    pytest.importorskip("pymetis") if name == "cluster-gcn" else None
    masks = random_split(graph.y, 0.3, 0.2, 0)
    out = fit_large_baseline(name, graph, masks, epochs=15, batch_size=32, cluster_size=32, hidden=32, lr=1e-2)
    assert out["baseline"] == name and out["test_accuracy"] > 0.6  # three classes: chance is 1/3
