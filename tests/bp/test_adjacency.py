"""The BP layer called the way PyG users call layers: edge_index, EdgeIndex, sparse adjacency."""
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric import EdgeIndex
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.transforms import AddReverseIndex


def _graph(n=30, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ei = to_undirected(erdos_renyi_graph(n, 0.15))
    log_phi = torch.randn(n, c, generator=g)
    labels = torch.randint(0, c, (n,), generator=g)
    mask = torch.rand(n, generator=g) < 0.3
    layer = BeliefPropagation(c, num_steps=4)
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
    return layer, log_phi, ei, labels, mask


def _sparse(ei, n, values=None):
    values = torch.ones(ei.size(1)) if values is None else values
    return torch.sparse_coo_tensor(ei, values, (n, n), check_invariants=True)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("grad", [False, True])
def test_edge_index_edgeindex_and_sparse_adjacency_give_the_same_beliefs(grad):
    layer, log_phi, ei, labels, mask = _graph()
    n = log_phi.size(0)
    kw = dict(known_labels=labels, known_mask=mask)
    with torch.set_grad_enabled(grad):
        base = layer(log_phi, ei, **kw)
        for adj in (EdgeIndex(ei, sparse_size=(n, n)), _sparse(ei, n), _sparse(ei, n).to_sparse_csr(),
                    _sparse(ei.flip(1), n)):  # the same graph with its edges listed in another order
            torch.testing.assert_close(layer(log_phi, adj, **kw), base)


def test_sparse_values_are_edge_weights_and_edge_weight_is_the_third_positional_argument():
    layer, log_phi, ei, _, _ = _graph(seed=1)
    n = log_phi.size(0)
    w = torch.rand(ei.size(1)) + 0.5
    w = (w + _sparse(ei, n, w).t().coalesce().to_dense()[ei[0], ei[1]]) / 2  # symmetric weights
    base = layer(log_phi, ei, edge_weight=w)
    torch.testing.assert_close(layer(log_phi, ei, w), base)
    torch.testing.assert_close(layer(log_phi, _sparse(ei, n, w)), base)
    assert not torch.allclose(layer(log_phi, ei), base)
    with pytest.raises(TypeError):  # rev_index is keyword-only now
        layer(log_phi, ei, None, torch.arange(ei.size(1)))


def test_a_directed_graph_names_the_fix():
    layer, log_phi, ei, _, _ = _graph()
    directed = ei[:, ei[0] < ei[1]]
    with pytest.raises(ValueError, match=r"ToUndirected\(\)"):
        layer(log_phi, directed)
    torch.testing.assert_close(layer(log_phi, T.ToUndirected()(Data(edge_index=directed, num_nodes=30)).edge_index),
                               layer(log_phi, ei))


def test_add_reverse_index_reorders_edges_once_and_keeps_the_beliefs():
    layer, log_phi, ei, labels, mask = _graph(seed=2)
    n = log_phi.size(0)
    w = torch.ones(ei.size(1)) * 2.0
    data = Data(edge_index=ei, edge_weight=w, edge_attr=ei[0].float().view(-1, 1), num_nodes=n)
    out = AddReverseIndex()(data.clone())
    e = out.edge_index
    assert torch.equal(e[:, out.rev_index], e.flip(0))  # rev_index points at every edge's reverse
    half = e.size(1) // 2
    assert torch.equal(e[:, :half], e[:, half:].flip(0))  # the paired layout: second half mirrors the first
    assert torch.equal(out.edge_attr.view(-1), e[0].float())  # edge attributes moved with their edges
    kw = dict(known_labels=labels, known_mask=mask)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(layer(log_phi, e, out.edge_weight, rev_index=out.rev_index, **kw),
                                       layer(log_phi, ei, w, **kw))
            torch.testing.assert_close(layer(log_phi, e, rev_index=out.rev_index, **kw), layer(log_phi, ei, **kw))
    plain = AddReverseIndex(paired=False)(data.clone())
    assert torch.equal(plain.edge_index, ei) and torch.equal(ei[:, plain.rev_index], ei.flip(0))


@pytest.mark.parametrize("known", [True, False])  # GBPN and GBPN-I
def test_inference_compiles_without_graph_breaks_once_indices_are_precomputed(known):
    layer, log_phi, ei, labels, mask = _graph(seed=3)
    data = AddReverseIndex()(Data(edge_index=ei, num_nodes=log_phi.size(0)))

    def infer(log_phi, edge_index, rev_index, labels=None, mask=None):
        return layer(log_phi, edge_index, rev_index=rev_index, known_labels=labels, known_mask=mask)

    args = (log_phi, data.edge_index, data.rev_index) + ((labels, mask) if known else ())
    with torch.no_grad():
        explanation = torch._dynamo.explain(infer)(*args)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(infer, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(*args), infer(*args), atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("potential,options", [("mlp", {}), ("sign", {"hops": 2}), ("gcn", {}), ("sage", {}),
                                               ("gat", {}), ("dagnn", {}), ("linkx", {"num_nodes": 30})])
def test_gbpn_takes_the_same_adjacency_forms_with_every_encoder(potential, options):
    from gbpn import GBPN

    _, _, ei, labels, mask = _graph(seed=4)
    n = 30
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(4))
    model = GBPN(5, 3, hidden_channels=8, potential=potential, potential_options=options).eval()
    with torch.no_grad():  # H = 1 at initialisation would make every edge weight irrelevant
        model.bp.coupling.weight.copy_(torch.randn(3, 3, generator=torch.Generator().manual_seed(5)))
    kw = dict(known_labels=labels, known_mask=mask)
    base = model(model.precompute(x, ei), ei, **kw)
    for adj in (EdgeIndex(ei, sparse_size=(n, n)), _sparse(ei, n), _sparse(ei, n).to_sparse_csr()):
        torch.testing.assert_close(model(model.precompute(x, adj), adj, **kw), base)
    if potential == "mlp":  # model(x, edge_index, edge_weight): the third positional argument is the weight
        w = torch.full((ei.size(1),), 2.0)
        torch.testing.assert_close(model(x, ei, w, **kw), model(x, ei, edge_weight=w, **kw))
        assert not torch.allclose(model(x, ei, w, **kw), base)


@pytest.mark.parametrize("potential,options", [("mlp", {}), ("sign", {"hops": 2}), ("gat", {})])
def test_gbpn_inference_compiles_without_graph_breaks(potential, options):
    from gbpn import GBPN

    _, _, ei, labels, mask = _graph(seed=3)
    data = AddReverseIndex()(Data(edge_index=ei, num_nodes=30))
    model = GBPN(5, 3, hidden_channels=8, potential=potential, potential_options=options).eval()
    inputs = model.precompute(torch.randn(30, 5), data.edge_index)

    def infer(inputs, edge_index, rev_index, labels, mask):
        return model(inputs, edge_index, rev_index=rev_index, known_labels=labels, known_mask=mask)

    with torch.no_grad():
        explanation = torch._dynamo.explain(infer)(inputs, data.edge_index, data.rev_index, labels, mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons


@pytest.mark.filterwarnings("ignore:Sparse")  # ToSparseTensor's CSR
def test_reverse_index_survives_batching_and_subgraphs():
    import pickle

    from torch_geometric.data import Batch
    from torch_geometric.loader import DataLoader

    from gbpn.graph.transforms import ReverseIndexData

    layer, log_phi, ei, _, _ = _graph(seed=6)
    graphs = [AddReverseIndex()(Data(edge_index=ei, num_nodes=30, x=log_phi)),
              AddReverseIndex()(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=5, x=log_phi[:5]))]
    assert all(type(g) is ReverseIndexData for g in graphs)
    batch = next(iter(DataLoader(graphs, batch_size=2)))
    assert torch.equal(batch.rev_index, Batch.from_data_list(graphs).rev_index)
    # the batch's beliefs are the graphs' own, with the batched rev_index accepted as it is
    torch.testing.assert_close(layer(batch.x, batch.edge_index, rev_index=batch.rev_index),
                               torch.cat([layer(g.x, g.edge_index, rev_index=g.rev_index) for g in graphs]))
    sub = graphs[0].subgraph(torch.arange(20))
    torch.testing.assert_close(layer(sub.x, sub.edge_index, rev_index=sub.rev_index), layer(sub.x, sub.edge_index))
    keep = torch.zeros(ei.size(1), dtype=torch.bool)
    keep[0] = True  # one direction of one edge: no reverse index exists
    assert "rev_index" not in graphs[0].edge_subgraph(keep)
    assert type(pickle.loads(pickle.dumps(graphs[0]))) is ReverseIndexData
    with pytest.raises(ValueError, match="apply AddReverseIndex before it"):
        AddReverseIndex()(T.ToSparseTensor()(Data(edge_index=ei, num_nodes=30)))
    with pytest.raises(ValueError, match="a plain Data's rev_index is offset as a node index"):
        plain = Data(edge_index=graphs[0].edge_index, rev_index=graphs[0].rev_index, num_nodes=30, x=log_phi)
        wrong = Batch.from_data_list([plain, plain])
        layer(wrong.x, wrong.edge_index, rev_index=wrong.rev_index)
