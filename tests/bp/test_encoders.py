import pytest
import torch
from conftest import brute_force_marginals, undirected

from gbpn.errors import GBPNError
from gbpn.bp.layer import BeliefPropagation
from gbpn.models.encoders import GNNEncoder, Propagated, SIGNEncoder, propagate_features
from gbpn.models.gbpn import GBPN
from gbpn.models.mlp import MLP

TREE = [(0, 1), (1, 2), (1, 3), (3, 4), (3, 5), (5, 6)]
LOOPY = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3)]


def _dense_adjacency(edges, n):
    A = torch.zeros(n, n, dtype=torch.float64)
    for i, j in edges:
        A[i, j] = A[j, i] = 1.0
    return A


def test_mlp_potential_is_the_papers_model():
    # same seed: the same parameters and outputs as an MLP followed by BP, built by hand
    x, ei = torch.randn(7, 5), undirected(TREE)
    torch.manual_seed(0)
    model = GBPN(5, 3, hidden_channels=16, dropout=0.0).eval()
    torch.manual_seed(0)
    mlp, bp = MLP(5, 16, 3, 2, 0.0).eval(), BeliefPropagation(3, 5)
    mlp.reset_parameters()  # GBPN re-initialises its parts once built, as before encoders existed
    bp.reset_parameters()
    expected = bp(torch.log_softmax(mlp(x), -1), ei)
    assert torch.equal(model(x, ei), expected)


def test_propagated_features_equal_a_dense_reference():
    n, edges = 6, LOOPY[:6]
    x = torch.randn(n, 4, dtype=torch.float64)
    A = _dense_adjacency(edges, n)
    ei = undirected(edges)
    mean = A / A.sum(1, keepdim=True).clamp_min(1)
    hops = propagate_features(x.float(), ei, hops=2, separate=True)
    for got, want in zip(hops, [x, mean @ x, mean @ mean @ x]):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)
    At = A + torch.eye(n, dtype=torch.float64)
    d = At.sum(1).pow(-0.5)
    gcn = d[:, None] * At * d[None, :]
    mixed = propagate_features(x.float(), ei, hops=2, separate=False)
    assert len(mixed) == 2
    for got, want in zip(mixed, [gcn @ x, gcn @ gcn @ x]):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_sparse_features_propagate_like_dense_ones():
    x = (torch.rand(7, 30) < 0.05).float()
    ei = undirected(TREE)
    dense = propagate_features(x, ei, hops=2)
    sparse = propagate_features(x.to_sparse(), ei, hops=2)
    for a, b in zip(dense, sparse):
        torch.testing.assert_close(b.to_dense() if b.is_sparse else b, a)


def test_ego_and_neighbour_channels_stay_separate():
    x, ei = torch.randn(7, 3), undirected(TREE)
    y = x.clone()
    y[1] += 10.0  # change node 1's own features only
    sep_x, sep_y = propagate_features(x, ei, 1, True), propagate_features(y, ei, 1, True)
    assert not torch.equal(sep_x[0][1], sep_y[0][1])  # ego channel moves
    torch.testing.assert_close(sep_x[1][1], sep_y[1][1])  # node 1's neighbour channel does not
    mix_x, mix_y = propagate_features(x, ei, 1, False), propagate_features(y, ei, 1, False)
    assert not torch.allclose(mix_x[0][1], mix_y[0][1])  # mixed: the node is in its own neighbourhood


@pytest.mark.parametrize("potential,options", [
    ("sign", {}), ("sign", {"separate": False, "hops": 3}), ("gcn", {}), ("gcn", {"separate": False}),
    ("sage", {"residual": True, "layer_norm": True, "num_layers": 3}), ("gat", {"separate": False}),
])
def test_graph_encoders_see_the_neighbourhood_and_precompute_matches(potential, options):
    torch.manual_seed(0)
    model = GBPN(4, 2, hidden_channels=16, dropout=0.0, potential=potential, potential_options=options).eval()
    x, ei = torch.randn(7, 4), undirected(TREE)
    out = model(x, ei)
    torch.testing.assert_close(model(model.precompute(x, ei), ei), out)  # precomputed input: same beliefs
    y = x.clone()
    y[0] += 5.0  # node 0's features move node 1's potential: its neighbour
    assert not torch.allclose(model.self_potential(y, ei)[1], model.self_potential(x, ei)[1])


def test_mlp_potential_ignores_the_neighbourhood():
    model = GBPN(4, 2, hidden_channels=16, dropout=0.0).eval()
    x, ei = torch.randn(7, 4), undirected(TREE)
    y = x.clone()
    y[0] += 5.0
    torch.testing.assert_close(model.self_potential(y, ei)[1], model.self_potential(x, ei)[1])


@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_bp_on_a_tree_is_exact_with_a_graph_encoder_below(conv):
    torch.manual_seed(1)
    model = GBPN(3, 2, hidden_channels=8, dropout=0.0, num_steps=4, potential=conv).double().eval()
    with torch.no_grad():
        model.bp.coupling.weight.copy_(torch.tensor([[1.0, -0.5], [-0.5, 0.7]]))
    x, ei = torch.randn(7, 3, dtype=torch.float64), undirected(TREE)
    log_phi = model.self_potential(x, ei)
    exact = brute_force_marginals(7, TREE, log_phi.detach(), model.log_H.detach().double())
    torch.testing.assert_close(model(x, ei).exp(), exact, atol=1e-7, rtol=0)


@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_gradcheck_through_a_graph_encoder_and_bp(conv):
    torch.manual_seed(2)
    model = GBPN(3, 3, hidden_channels=4, dropout=0.0, num_steps=3, potential=conv,
                 potential_options={"layer_norm": True, "residual": True}).double().eval()
    ei = undirected(LOOPY)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    known = torch.tensor([False, True, False, False, False, False])
    labels = torch.tensor([0, 2, 0, 0, 0, 0])
    assert torch.autograd.gradcheck(lambda v: model(v, ei, known_labels=labels, known_mask=known), (x,),
                                    eps=1e-6, atol=1e-5)


def test_gnn_encoders_refuse_sampled_trees():
    enc = GNNEncoder(4, 2, "sage", hidden_channels=8)
    inputs = enc.precompute(torch.randn(7, 4), undirected(TREE))
    with pytest.raises(GBPNError, match="full batch"):
        inputs.index_select(0, torch.tensor([0, 1]))


def test_propagated_inputs_index_by_node():
    enc = SIGNEncoder(4, 2, hidden_channels=8, dropout=0.0).eval()
    x, ei = torch.randn(7, 4), undirected(TREE)
    p = enc.precompute(x, ei)
    assert isinstance(p, Propagated) and p.size(0) == 7
    idx = torch.tensor([5, 2])
    torch.testing.assert_close(enc(p.index_select(0, idx)), enc(p)[idx])


def test_sage_has_no_mixed_form():
    with pytest.raises(GBPNError, match="root weight"):
        GNNEncoder(4, 2, "sage", separate=False)


def test_linkx_potential_reads_which_nodes_a_node_links_to():
    torch.manual_seed(0)
    model = GBPN(4, 2, hidden_channels=16, dropout=0.0, potential="linkx", potential_options={"num_nodes": 7}).eval()
    x, ei = torch.randn(7, 4), undirected(TREE)
    torch.testing.assert_close(model(model.precompute(x, ei), ei), model(x, ei))
    y = x.clone()
    y[0] += 5.0  # a neighbour's features do not enter node 1's potential: its neighbours' identities do
    torch.testing.assert_close(model.self_potential(y, ei)[1], model.self_potential(x, ei)[1])
    assert not torch.allclose(model.self_potential(y, ei)[0], model.self_potential(x, ei)[0])
    rewired = undirected([(0, 1), (1, 2), (1, 3), (3, 4), (3, 5), (5, 6), (1, 6)])
    assert not torch.allclose(model.self_potential(x, rewired)[1], model.self_potential(x, ei)[1])
    # leaves 2 and 4 (and 0) with the same features hang off different nodes: only 0 and 2 share one
    x[[0, 2, 4]] = x[0].clone()
    phi = model.self_potential(x, ei)
    torch.testing.assert_close(phi[0], phi[2])
    assert not torch.allclose(phi[0], phi[4])


def test_linkx_potential_is_exact_on_a_tree_and_passes_gradcheck():
    torch.manual_seed(3)
    model = GBPN(3, 2, hidden_channels=8, dropout=0.0, num_steps=4, potential="linkx",
                 potential_options={"num_nodes": 7}).double().eval()
    x, ei = torch.randn(7, 3, dtype=torch.float64, requires_grad=True), undirected(TREE)
    exact = brute_force_marginals(7, TREE, model.self_potential(x, ei).detach(), model.log_H.detach().double())
    torch.testing.assert_close(model(x, ei).exp(), exact, atol=1e-7, rtol=0)
    assert torch.autograd.gradcheck(lambda v: model(v, ei), (x,), eps=1e-6, atol=1e-5)
    w = model.encoder.lin_adj.weight
    assert torch.autograd.gradcheck(lambda v: torch.func.functional_call(
        model, {"encoder.lin_adj.weight": v}, (x.detach(), ei)), (w.detach().clone().requires_grad_(),),
        eps=1e-6, atol=1e-5)


def test_linkx_potential_refuses_another_graph_and_sampled_trees():
    with pytest.raises(GBPNError, match="potential_options=.*num_nodes"):
        GBPN(4, 2, potential="linkx")
    model = GBPN(4, 2, hidden_channels=8, potential="linkx", potential_options={"num_nodes": 7})
    with pytest.raises(GBPNError, match="7-node graph"):
        model(torch.randn(5, 4), undirected([(0, 1), (1, 2), (2, 3), (3, 4)]))
    with pytest.raises(GBPNError, match="full batch"):
        model.precompute(torch.randn(7, 4), undirected(TREE)).index_select(0, torch.tensor([0, 1]))


def test_dagnn_potential_is_the_dagnn_baseline_below_bp():
    from gbpn.models.dagnn import DAGNN

    torch.manual_seed(4)
    model = GBPN(4, 3, hidden_channels=8, dropout=0.0, potential="dagnn", potential_options={"K": 3}).eval()
    base = DAGNN(4, 3, 8, num_hidden=1, K=3).eval()
    base.load_state_dict(model.encoder.dagnn.state_dict())
    x, ei = torch.randn(7, 4), undirected(LOOPY + [(5, 6)])
    torch.testing.assert_close(model.self_potential(x, ei), base(x, ei))
    torch.testing.assert_close(model(model.precompute(x, ei), ei), model(x, ei))
    with pytest.raises(GBPNError, match="full batch"):
        model.precompute(x, ei).index_select(0, torch.tensor([0]))
