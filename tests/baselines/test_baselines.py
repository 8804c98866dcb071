import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from gbpn.baselines import BASELINES, fit_baseline
from gbpn.models.dagnn import DAGNN, normalized_adjacency
from gbpn.baselines.gmnn import GMNN
from gbpn.baselines.gnn import SAGE
from gbpn.baselines.propagation import LabelPropagationModel
from gbpn.data import random_split
from gbpn.errors import GBPNError


def planted_graph(n=100, c=2, p_in=0.12, p_out=0.01, f=16, noise=1.0, seed=0):
    """``c`` planted communities; features are a noisy class signature (each half-informative)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % c
    same = y[:, None] == y[None, :]
    prob = torch.where(same, torch.tensor(p_in), torch.tensor(p_out))
    adj = torch.rand(n, n, generator=g) < prob
    adj = torch.triu(adj, diagonal=1)
    ei = to_undirected(adj.nonzero().T, num_nodes=n)
    centers = torch.randn(c, f, generator=g)
    x = centers[y] + noise * torch.randn(n, f, generator=g)
    return Data(x=x, y=y, edge_index=ei, num_classes=c, name="planted", num_nodes=n)


@pytest.fixture(scope="module")
def graph():
    return planted_graph()


@pytest.fixture(scope="module")
def masks(graph):
    return random_split(graph.y, 0.3, 0.2, seed=0)


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_beats_chance(graph, masks, name):
    torch.set_num_threads(1)
    r = fit_baseline(name, graph, masks, seed=0, epochs=30, lr=1e-2, hidden=32, dropout=0.1)
    for k in ("train_accuracy", "val_accuracy", "test_accuracy"):
        assert 0.0 <= r[k] <= 1.0
    assert r["test_accuracy"] > 0.8, r
    assert 0 <= r["best_epoch"] < 30 and r["train_seconds"] >= 0


def test_fit_baseline_is_seeded(graph, masks):
    a = fit_baseline("gmnn", graph, masks, seed=3, epochs=20, hidden=16)
    b = fit_baseline("gmnn", graph, masks, seed=3, epochs=20, hidden=16)
    assert a["test_accuracy"] == b["test_accuracy"] and a["best_epoch"] == b["best_epoch"]


def test_unknown_baseline_raises(graph, masks):
    with pytest.raises(GBPNError, match="unknown baseline"):
        fit_baseline("no-such-model", graph, masks)


def test_bad_masks_raise(graph, masks):
    with pytest.raises(GBPNError):
        fit_baseline("mlp", graph, masks[:2])


def test_dagnn_retention_scores_in_open_unit_interval(graph):
    torch.manual_seed(0)
    model = DAGNN(graph.num_features, 2, hidden_channels=16, K=10)
    out, s = model(graph.x, graph.edge_index, return_scores=True)
    assert s.shape == (graph.num_nodes, 11)
    assert bool((s > 0).all() and (s < 1).all())
    assert torch.allclose(out.exp().sum(-1), torch.ones(graph.num_nodes))


def test_dagnn_output_is_weighted_sum_of_hops(graph):
    torch.manual_seed(0)
    model = DAGNN(graph.num_features, 2, hidden_channels=16, K=3).eval()
    adj = normalized_adjacency(graph.edge_index, graph.num_nodes).to_dense()
    z = model.mlp(graph.x)
    hops = [z, adj @ z, adj @ adj @ z, adj @ adj @ adj @ z]
    w, b = model.retain.weight.view(-1), model.retain.bias
    expected = sum(torch.sigmoid(h @ w + b)[:, None] * h for h in hops)
    assert torch.allclose(model(graph.x, graph.edge_index), torch.log_softmax(expected, -1), atol=1e-5)
    # symmetric normalisation with self-loops: row i, col j = 1 / sqrt((d_i + 1)(d_j + 1))
    deg = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes).float() + 1
    assert torch.allclose(adj.diagonal(), 1 / deg)


def test_lp_with_all_labels_reproduces_them(graph):
    everyone = torch.ones(graph.num_nodes, dtype=torch.bool)
    for clamp in (True, False):
        out = LabelPropagationModel(2, num_layers=50, alpha=0.9, clamp_known=clamp)(graph.y, graph.edge_index, everyone)
        assert torch.equal(out.argmax(-1), graph.y)


def test_lp_clamps_known_nodes(graph, masks):
    out = LabelPropagationModel(2, alpha=0.99)(graph.y, graph.edge_index, masks[0])
    known = masks[0]
    assert torch.equal(out[known], torch.nn.functional.one_hot(graph.y[known], 2).float())


def test_sage_sparse_first_layer_matches_dense():
    torch.manual_seed(0)
    x = (torch.rand(30, 12) < 0.2).float()
    ei = to_undirected(torch.randint(0, 30, (2, 60)), num_nodes=30)
    model = SAGE(12, 8, 3).eval()
    dense = model(x, ei)
    sparse = model(x.to_sparse().coalesce(), ei)
    assert torch.allclose(dense, sparse, atol=1e-5)


def test_gmnn_p_ignores_own_label(graph):
    """p_phi(y_n | y_NB(n)): changing only node 0's input label leaves p's output at node 0 unchanged."""
    torch.manual_seed(0)
    model = GMNN(graph.num_features, 2, hidden_channels=8).eval()
    y_hat = torch.nn.functional.one_hot(graph.y, 2).float()
    flipped = y_hat.clone()
    flipped[0] = 1 - flipped[0]
    assert torch.allclose(model.p(y_hat, graph.edge_index)[0], model.p(flipped, graph.edge_index)[0])


def test_gmnn_draw_keeps_gold_labels(graph, masks):
    torch.manual_seed(0)
    model = GMNN(graph.num_features, 2, hidden_channels=8)
    y_hat = model.draw_labels(graph.x, graph.edge_index, graph.y, masks[0], torch.Generator().manual_seed(0))
    assert torch.equal(y_hat.sum(-1), torch.ones(graph.num_nodes))
    assert torch.equal(y_hat[masks[0]].argmax(-1), graph.y[masks[0]])
