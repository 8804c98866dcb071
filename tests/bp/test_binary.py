"""The binary log-odds BP kernel (gbpn.bp.backends.cpu_binary): two classes, inference, against the eager path."""

import pytest
import torch
from conftest import FUSED_SKIP, num_threads, random_graph, undirected

import gbpn.bp.backends.cpu_binary as bp_module
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.reverse import reverse_edge_index

pytestmark = pytest.mark.skipif(FUSED_SKIP is not None, reason=str(FUSED_SKIP))

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _case(n, p, seed, dtype, steps, damping, weight, clamped, weighted):
    """A random graph (edges neither paired nor sorted), potentials, a two-class layer with coupling
    ``weight`` and the keyword arguments for clamps and message weights."""
    ei = random_graph(n, p, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, 2, generator=g, dtype=dtype)
    layer = BeliefPropagation(2, num_steps=steps, damping=damping).to(dtype)
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.tensor(weight))
    kw = {}
    if clamped:
        kw.update(known_labels=torch.randint(0, 2, (n,), generator=g), known_mask=torch.rand(n, generator=g) < 0.3)
    if weighted:
        kw["message_weight"] = torch.rand(ei.size(1), generator=g, dtype=dtype) + 0.5
    return ei, reverse_edge_index(ei, n), x, layer, kw


def _assert_equal_outputs(got, want, dtype):
    tol = TOL[dtype]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, float(b.abs().max())))


@pytest.fixture
def calls(monkeypatch):
    seen = []
    real = bp_module.CPUBinary.run  # the dispatch's calls, not the kernels' own self-test
    monkeypatch.setattr(bp_module.CPUBinary, "run", lambda *a, **k: seen.append(1) or real(*a, **k))
    return seen


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("damping", [0.0, 0.3])
@pytest.mark.parametrize("clamped, weighted", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("threads", [1, 3])
def test_binary_kernel_equals_eager(dtype, damping, clamped, weighted, threads, calls):
    ei, rev, x, layer, kw = _case(40, 0.12, 1, dtype, 6, damping, [[1.5, -0.8], [-0.8, 0.4]], clamped, weighted)
    with num_threads(threads), torch.no_grad():
        outs = {k: layer(2 * x, ei, rev_index=rev, kernel=k, return_residuals=True, return_messages=True, **kw)
                for k in ("eager", "fused")}
    assert len(calls) == 1
    _assert_equal_outputs(outs["fused"], outs["eager"], dtype)
    if clamped:  # a clamped label stays clamped
        known = kw["known_mask"]
        assert torch.equal(outs["fused"][0][known].argmax(-1), kw["known_labels"][known])
        assert bool((outs["fused"][0][known].exp().amax(-1) == 1).all())


def test_binary_kernel_stops_at_tol_like_eager(calls):
    n = 30
    ei = random_graph(n, 0.15, seed=3)
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    layer = BeliefPropagation(2, num_steps=50, tol=1e-6).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.tensor([[0.6, -0.3], [-0.3, 0.5]]))
        eager = layer(x, ei, kernel="eager", return_residuals=True)
        fused = layer(x, ei, kernel="fused", return_residuals=True)
    assert calls and 1 < fused[1].numel() < 50 and fused[1].numel() == eager[1].numel()
    torch.testing.assert_close(fused[0], eager[0], rtol=1e-10, atol=1e-10)


def test_binary_kernel_runs_without_edge_weights_and_returns_messages_at_inference_only(calls):
    n = 20
    ei = random_graph(n, 0.2, seed=5)
    layer = BeliefPropagation(2, num_steps=3)
    x = torch.randn(n, 2, requires_grad=True)
    layer(x, ei, kernel="fused", return_messages=True)[0].sum().backward()  # messages in training: general kernel
    assert not calls and x.grad is not None
    with torch.no_grad():
        w = torch.rand(ei.size(1))
        w = torch.minimum(w, w[reverse_edge_index(ei, n)])  # symmetric
        layer(x, ei, w, kernel="fused")  # edge weights: the general kernel
        assert not calls
        layer(x, ei)  # auto at inference
        assert len(calls) == 1
    layer(x, ei).sum().backward()  # auto in training
    assert len(calls) == 2


def _grads(layer, x, ei, rev, kernel, kw, seed=0):
    x = x.detach().clone().requires_grad_()
    layer.zero_grad()
    log_b, res = layer(x, ei, rev_index=rev, kernel=kernel, return_residuals=True, **kw)
    g = torch.Generator().manual_seed(seed)
    (log_b * torch.randn(log_b.shape, generator=g, dtype=log_b.dtype)).sum().backward()
    return log_b.detach(), res, x.grad, layer.coupling.weight.grad.clone()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("damping", [0.0, 0.4])
@pytest.mark.parametrize("clamped, weighted", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_binary_training_equals_eager(dtype, damping, clamped, weighted, threads, calls):
    ei, rev, x, layer, kw = _case(36, 0.15, 6, dtype, 5, damping, [[0.9, -0.6], [-0.6, 0.3]], clamped, weighted)
    with num_threads(threads):
        eager = _grads(layer, x, ei, rev, "eager", kw)
        fused = _grads(layer, x, ei, rev, "fused", kw)
    assert len(calls) == 1
    _assert_equal_outputs(fused, eager, dtype)


def test_binary_gradcheck_and_double_backward(calls):
    n = 8
    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (5, 6), (6, 7)])
    layer = BeliefPropagation(2, num_steps=4, damping=0.2).double()
    known = torch.zeros(n, dtype=torch.bool)
    known[1] = True
    labels = torch.ones(n, dtype=torch.long)
    x = torch.randn(n, 2, dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[0.7, -0.4], [-0.2, 0.5]], dtype=torch.float64, requires_grad=True)

    def run(v, weight):
        out = torch.func.functional_call(layer, {"coupling.weight": weight}, (v, ei),
                                         {"known_labels": labels, "known_mask": known, "kernel": "fused"})
        return out

    assert torch.autograd.gradcheck(run, (x, w), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradgradcheck(run, (x, w), eps=1e-6, atol=1e-6)
    assert calls
