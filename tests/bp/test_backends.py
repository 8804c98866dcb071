"""Every backend of the dispatch table computes the reference step (the eager backend): beliefs,
residuals, messages and gradients, with evidence, damping, edge and message weights, wherever the
backend accepts the call; and the table picks the first backend that does not decline."""
import pytest
import torch
from conftest import random_graph

from gbpn.bp.backends.eager import Eager
from gbpn.bp.dispatch import BACKENDS, explain_dispatch, select
from gbpn.bp.layer import BeliefPropagation

COMPILED = [b for b in BACKENDS if b.name != "eager"]
TOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def _call(c, dtype, damping, weighted, seed=0):
    n = 40
    ei = random_graph(n, 0.15, seed=seed)
    g = torch.Generator().manual_seed(seed)
    layer = BeliefPropagation(c, num_steps=4, damping=damping).to(dtype)
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
    phi = torch.randn(n, c, generator=g, dtype=dtype).requires_grad_()
    kw = dict(known_labels=torch.randint(0, c, (n,), generator=g), known_mask=torch.rand(n, generator=g) < 0.3,
              return_residuals=True)
    if weighted:
        kw["message_weight"] = torch.rand(ei.size(1), generator=g, dtype=dtype) * 2
    return layer, phi, ei, kw


def _run(backend, layer, phi, ei, kw):
    problem = layer.problem(phi, ei, **kw)
    why = backend.why_not(problem)
    if why is not None:
        pytest.skip(f"{backend.name} declines: {why}")
    log_b, res = backend.run(problem)[:2]
    (g_phi, g_H) = torch.autograd.grad(log_b.exp().pow(2).sum(), (phi, layer.coupling.weight))
    return log_b.detach(), torch.stack(res).detach(), g_phi, g_H


@pytest.mark.parametrize("backend", COMPILED, ids=lambda b: b.name)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("c", [2, 5])
@pytest.mark.parametrize("damping, weighted", [(0.0, False), (0.3, True)])
def test_backend_equals_the_reference_step(backend, dtype, c, damping, weighted):
    layer, phi, ei, kw = _call(c, dtype, damping, weighted)
    got = _run(backend, layer, phi, ei, kw)
    want = _run(Eager(), layer, phi, ei, kw)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=TOL[dtype], atol=TOL[dtype] * max(1.0, float(b.abs().max())))


def test_the_table_runs_the_first_backend_that_accepts():
    layer, phi, ei, kw = _call(5, torch.float64, 0.0, False)
    problem = layer.problem(phi, ei, **kw)
    backend, declined = select(problem)
    names = [b.name for b in BACKENDS]
    assert [name for name, _ in declined] == names[:names.index(backend.name)]
    assert all(b.why_not(problem) is None for b in BACKENDS if b.name == backend.name)
    text = explain_dispatch(problem)
    assert text.startswith(backend.name) and all(f"{name} declined: {why}" in text for name, why in declined)


def test_eager_asked_for_runs_eager_and_fused_asked_for_says_why_not():
    layer, phi, ei, kw = _call(5, torch.float64, 0.0, False)
    assert select(layer.problem(phi, ei, **kw, kernel="eager"))[0].name == "eager"
    with torch.no_grad(), pytest.raises(ValueError, match="kernel='fused' does not apply to this call: .*edge_chunk"):
        layer(phi, ei, edge_chunk=8, kernel="fused")
    layer(phi, ei)
    assert layer.last_backend == select(layer.problem(phi, ei))[0].name
