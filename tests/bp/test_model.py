import torch
from conftest import undirected

from gbpn import GBPN, MLP
from gbpn.models.mlp import dropout


def _graph(n=6):
    edges = [(i, (i + 1) % n) for i in range(n)]
    return undirected(edges)


def test_gbpn_returns_normalised_log_beliefs_and_runs_on_an_unseen_graph():
    model = GBPN(4, 3, hidden_channels=8, num_steps=3)
    x = torch.randn(6, 4)
    out = model(x, _graph(6))
    assert out.shape == (6, 3)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(6))
    other = model(torch.randn(11, 4), _graph(11))  # inductive: a graph of another size
    assert other.shape == (11, 3) and torch.isfinite(other).all()


def test_zero_steps_is_the_mlp_alone():
    model = GBPN(4, 3, hidden_channels=8, num_steps=0).eval()
    x = torch.randn(6, 4)
    torch.testing.assert_close(model(x, _graph()), model.self_potential(x))


def test_sparse_and_dense_features_give_the_same_output():
    model = GBPN(10, 3, hidden_channels=8).eval()
    x = (torch.rand(6, 10) < 0.2).float()
    torch.testing.assert_close(model(x.to_sparse(), _graph()), model(x, _graph()))


def test_sparse_input_gradients_match_dense():
    torch.manual_seed(0)
    mlp = MLP(10, 8, 3)
    x = (torch.rand(6, 10) < 0.3).float()
    mlp(x).sum().backward()
    dense_grad = mlp.lins[0].weight.grad.clone()
    mlp.zero_grad()
    mlp(x.to_sparse()).sum().backward()
    torch.testing.assert_close(mlp.lins[0].weight.grad, dense_grad)


def test_dropout_is_inverted_and_keeps_sparse_zeros():
    torch.manual_seed(0)
    x = torch.ones(20000)
    y = dropout(x, 0.6, True)
    assert abs(float((y == 0).float().mean()) - 0.6) < 0.02
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.4), rtol=1e-4)
    assert torch.equal(dropout(x, 0.6, False), x)
    s = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    out = dropout(s, 0.5, True).to_dense()
    assert out[0, 0] == 0 and out[1, 1] == 0


def test_repr_and_reset_parameters():
    model = GBPN(4, 3, hidden_channels=8, dropout=0.3, num_steps=7)
    text = repr(model)
    assert "num_steps=7" in text and "dropout=0.3" in text and "num_classes=3" in text
    before = model.encoder.lins[0].weight.clone()
    with torch.no_grad():
        model.bp.coupling.weight.fill_(3.0)
    model.reset_parameters()
    assert not torch.equal(before, model.encoder.lins[0].weight)
    assert torch.equal(model.H, torch.ones(3, 3))


def test_relu_dropout_matches_relu_then_mask_and_passes_gradcheck():
    from gbpn.models.mlp import relu_dropout

    h = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(1)
    out = relu_dropout(h, 0.5, True)
    kept = out != 0
    assert torch.allclose(out[kept], 2.0 * h[kept]) and (h[kept] > 0).all()
    assert abs(float(kept.double().mean()) - 0.25) < 0.1  # half are negative, half of the rest dropped
    out.sum().backward()
    torch.testing.assert_close(h.grad, (out != 0).double() * 2.0)
    torch.testing.assert_close(relu_dropout(h, 0.5, False), torch.relu(h))


def test_bf16_mlp_is_close_to_fp32_and_trains():
    torch.manual_seed(0)
    fp = GBPN(6, 3, hidden_channels=32).eval()
    bf = GBPN(6, 3, hidden_channels=32, precision="bf16").eval()
    bf.load_state_dict(fp.state_dict())
    x = torch.randn(20, 6)
    out = bf(x, _graph(20))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, fp(x, _graph(20)), atol=0.05, rtol=0)
    bf.train()
    bf(x, _graph(20)).sum().backward()
    assert bf.encoder.lins[1].weight.grad.dtype == torch.float32
