"""The published GNN families as encoders: Platonov et al.'s residual blocks and Luo et al.'s deep classic GNNs."""
import pytest
import torch
from conftest import undirected

from gbpn.errors import GBPNError
from gbpn.models.encoders import build_encoder
from gbpn.models.encoders.classic import ClassicGNN
from gbpn.models.encoders.registry import BLOCK_ENCODERS
from gbpn.models.encoders.residual import AGGREGATIONS, ResidualGNN, _Block

LOOPY = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (5, 6)]


def _dense(edge_index, n, self_loops=False):
    A = torch.zeros(n, n, dtype=torch.float64)
    A[edge_index[1], edge_index[0]] = 1.0  # row = target
    return A + torch.eye(n, dtype=torch.float64) if self_loops else A


@pytest.mark.parametrize("name", [*BLOCK_ENCODERS, "classic-gcn", "classic-sage", "classic-gat"])
def test_shapes_and_sparse_features(name):
    torch.manual_seed(0)
    ei = undirected(LOOPY)
    x = (torch.rand(7, 12) < 0.3).float()
    options = {"blocks": 2} if name in BLOCK_ENCODERS else {"num_layers": 3, "residual": True, "batch_norm": True}
    model = build_encoder(name, 12, 4, 16, 2, 0.0, **options).eval()
    out = model(x, ei)
    assert out.shape == (7, 4) and torch.isfinite(out).all()
    torch.testing.assert_close(model(x.to_sparse(), ei), out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5])
def test_depth_builds_that_many_blocks(depth):
    assert len(ResidualGNN(5, 3, "gat-sep", 16, depth).blocks) == depth
    assert len(ClassicGNN(5, 3, "sage", 16, depth).convs) == depth
    assert len(ClassicGNN(5, 3, "gcn", 16, 3 * depth, residual=True, layer_norm=True).norms) == 3 * depth


def test_aggregations_equal_dense_references():
    torch.manual_seed(0)
    n, d = 7, 16
    ei = undirected(LOOPY)
    z = torch.randn(n, d, dtype=torch.float64)
    A = _dense(ei, n)
    # gcn: D~^-1/2 (A + I) D~^-1/2 z, self-loops added as published
    At = _dense(ei, n, self_loops=True)
    s = At.sum(1).pow(-0.5)
    gcn = ResidualGNN(d, 3, "gcn", d, 1).double().precompute(z, ei).graph
    torch.testing.assert_close(torch.sparse.mm(gcn, z), (s[:, None] * At * s[None, :]) @ z)
    sage = ResidualGNN(d, 3, "sage", d, 1).double().precompute(z, ei).graph
    torch.testing.assert_close(torch.sparse.mm(sage, z), A / A.sum(1, keepdim=True) @ z)
    # attention: a softmax over each node's neighbours (and itself where published so), per head
    for agg in ("gat", "gat-sep", "gt", "gt-sep"):
        model = ResidualGNN(d, 3, agg, d, 1, heads=4).double()
        graph = model.precompute(z, ei).graph
        att = model.blocks[0].attention
        v, m = att(z, graph)
        mask = _dense(ei, n, self_loops=agg in ("gat", "gt")) > 0
        heads = []
        for h in range(4):
            sl = slice(4 * h, 4 * h + 4)
            if agg.startswith("gat"):
                e = att.score_dst(v)[:, h][:, None] + att.score_src(v)[:, h][None, :]
                e = torch.nn.functional.leaky_relu(e, 0.2)
            else:
                e = att.query(z)[:, sl] @ att.key(z)[:, sl].T / 2.0
            w = torch.softmax(e.masked_fill(~mask, float("-inf")), dim=1)
            heads.append(w @ v[:, sl])
        torch.testing.assert_close(m, torch.cat(heads, dim=1))


@pytest.mark.parametrize("aggregation", list(AGGREGATIONS))
def test_block_gradients_in_float64(aggregation):
    torch.manual_seed(0)
    n, d = 7, 8
    ei = undirected(LOOPY)
    model = ResidualGNN(d, 3, aggregation, d, 1, dropout=0.0, heads=2).double()
    graph = model.precompute(torch.zeros(n, d, dtype=torch.float64), ei).graph
    block: _Block = model.blocks[0]
    h = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: block(t, graph), (h,))


def test_bad_settings_are_refused():
    with pytest.raises(GBPNError, match="aggregation"):
        ResidualGNN(5, 3, "bogus")
    with pytest.raises(GBPNError, match="multiple of heads"):
        ResidualGNN(5, 3, "gt", 20, heads=8)
    with pytest.raises(GBPNError, match="one normalisation"):
        ClassicGNN(5, 3, "gcn", layer_norm=True, batch_norm=True)
    with pytest.raises(GBPNError, match="at least one"):
        ClassicGNN(5, 3, "gcn", num_layers=0)
