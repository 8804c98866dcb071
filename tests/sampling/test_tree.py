import torch
from conftest import undirected

from gbpn.data.mrf import grid_graph
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.reverse import reverse_edge_index
from gbpn.sampling import sample_tree
from gbpn.graph.csr import CSRGraph


def _loopy():
    return undirected([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (1, 5), (0, 6)]), 7


def test_forest_shape_reverse_index_and_no_step_back():
    ei, _ = grid_graph(8)
    g = CSRGraph.from_edge_index(ei, 64)
    targets = torch.tensor([0, 9, 27, 63])
    tree = sample_tree(g, targets, num_hops=3, fanout=2, generator=torch.Generator().manual_seed(0))
    assert tree.num_nodes == tree.edge_index.size(1) // 2 + targets.numel()  # a forest with 4 roots
    assert torch.equal(tree.node_map[:4], targets) and (tree.parent[:4] == -1).all()
    assert torch.equal(tree.edge_index[:, tree.rev_index], tree.edge_index.flip(0))
    # every tree edge is a graph edge
    gkeys = set((ei[0] * 64 + ei[1]).tolist())
    assert all(int(a) * 64 + int(b) in gkeys for a, b in tree.node_map[tree.edge_index].T)
    # no node's child is its own parent in the graph
    k = (tree.depth >= 2).nonzero().view(-1)
    assert (tree.node_map[k] != tree.node_map[tree.parent[tree.parent[k]]]).all()
    # at most `fanout` children each; all of them when fewer are available
    children = torch.bincount(tree.parent[tree.parent >= 0], minlength=tree.num_nodes)
    assert children.max() <= 2
    deg = g.degree()[tree.node_map]
    avail = deg - (tree.parent >= 0).long()
    inner = tree.depth < 3
    assert torch.equal(children[inner], avail[inner].clamp_max(2))


def test_sampling_is_seeded():
    ei, _ = grid_graph(6)
    g = CSRGraph.from_edge_index(ei, 36)
    a = sample_tree(g, torch.arange(5), 2, 2, torch.Generator().manual_seed(3))
    b = sample_tree(g, torch.arange(5), 2, 2, torch.Generator().manual_seed(3))
    c = sample_tree(g, torch.arange(5), 2, 2, torch.Generator().manual_seed(4))
    assert torch.equal(a.node_map, b.node_map) and not torch.equal(a.node_map, c.node_map)


def test_bp_on_the_full_computation_tree_equals_loopy_bp_at_the_roots():
    ei, n = _loopy()
    torch.manual_seed(0)
    log_phi = torch.randn(n, 3, dtype=torch.float64)
    layer = BeliefPropagation(3, num_steps=3).double()
    with torch.no_grad():
        layer.coupling.weight.normal_()
    graph_beliefs = layer(log_phi, ei, rev_index=reverse_edge_index(ei, n))
    tree = sample_tree(CSRGraph.from_edge_index(ei, n), torch.arange(n), num_hops=3, fanout=None)
    tree_beliefs = layer(log_phi[tree.node_map], tree.edge_index, rev_index=tree.rev_index)
    torch.testing.assert_close(tree_beliefs[:n], graph_beliefs)
