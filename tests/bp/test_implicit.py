import itertools

import pytest
import torch
from conftest import KERNELS, num_threads, random_graph, undirected

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.backends.cpu_fused import fused_unavailable
from gbpn.bp.implicit import FALLBACK_STEPS

TREE = [(0, 1), (1, 2), (1, 3), (3, 4), (3, 5), (5, 6)]
GRID = [(r * 3 + k, r * 3 + k + 1) for r in range(3) for k in range(2)] + \
       [(r * 3 + k, (r + 1) * 3 + k) for r in range(2) for k in range(3)]
LOOPY = {
    "cycle5": [(i, (i + 1) % 5) for i in range(5)],
    "cycle4-with-tail": [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)],
    "grid3x3": GRID,
    "K4": list(itertools.combinations(range(4), 2)),
}


@pytest.fixture(params=KERNELS)
def kernel(request):
    """Both implementations of the implicit pass: autograd/hand-written VJPs, and the fused kernels."""
    return request.param


def _layer(c, weight, backward, steps, **kw):
    layer = BeliefPropagation(c, num_steps=steps, backward=backward, **kw).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(weight)
    return layer


def _loss(log_b):
    # a fixed, generic linear functional of the beliefs: every entry gets its own weight
    n, c = log_b.shape
    return (log_b * torch.arange(n * c, dtype=log_b.dtype).view(n, c).sin()).sum()


def _grads(layer, log_phi, ei, **kw):
    log_phi = log_phi.detach().requires_grad_()
    out = layer(log_phi, ei, **kw)
    return (out, *torch.autograd.grad(_loss(out), [log_phi, layer.coupling.weight]))


def _rel(a, b):
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.mark.parametrize("graph", sorted(LOOPY))
@pytest.mark.parametrize("clamped", [False, True])
def test_implicit_gradient_equals_long_unrolled_gradient(graph, clamped, kernel):
    edges = LOOPY[graph]
    n, c = max(max(e) for e in edges) + 1, 3
    g = torch.Generator().manual_seed(len(edges))
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    weight = 0.6 * torch.randn(c, c, generator=g, dtype=torch.float64)  # moderate coupling: BP converges
    ei = undirected(edges)
    kw = {}
    if clamped:
        kw = {"known_labels": torch.arange(n) % c, "known_mask": torch.arange(n) % 3 == 1}
    unrolled = _grads(_layer(c, weight, "unroll", 400), log_phi, ei, **kw)
    implicit_layer = _layer(c, weight, "implicit", 400, tol=1e-13, kernel=kernel)
    implicit = _grads(implicit_layer, log_phi, ei, **kw)
    stats = implicit_layer.implicit_stats
    assert (implicit_layer.last_backend == "eager") == (kernel == "eager")
    assert stats.forward_converged == 1 and stats.adjoint_converged == 1 and stats.fallbacks == 0
    assert stats.forward_steps < 400  # it stopped at the fixed point, not at the budget
    torch.testing.assert_close(implicit[0], unrolled[0], atol=1e-10, rtol=0)
    assert _rel(implicit[1], unrolled[1]) < 1e-6  # self-potentials
    assert _rel(implicit[2], unrolled[2]) < 1e-6  # coupling


@pytest.mark.parametrize("damping, edge_weights", [(0.3, True), (0.0, False)])  # the autograd and hand-written VJPs
def test_implicit_gradient_with_damping_and_edge_and_message_weights(damping, edge_weights, kernel):
    edges = GRID
    n, c = 9, 2
    ei = undirected(edges)
    g = torch.Generator().manual_seed(7)
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    weight = torch.randn(c, c, generator=g, dtype=torch.float64)
    half = torch.rand(len(edges), generator=g, dtype=torch.float64) + 0.5
    edge_weight = torch.cat([half, half])  # symmetric
    message_weight = torch.rand(ei.size(1), generator=g, dtype=torch.float64) + 0.5
    kw = {"edge_weight": edge_weight if edge_weights else None, "message_weight": message_weight,
          "known_labels": torch.zeros(n, dtype=torch.long), "known_mask": torch.arange(n) == 4}
    unrolled = _grads(_layer(c, weight, "unroll", 600, damping=damping), log_phi, ei, **kw)
    implicit = _grads(_layer(c, weight, "implicit", 600, damping=damping, tol=1e-13, kernel=kernel), log_phi, ei,
                      **kw)
    torch.testing.assert_close(implicit[0], unrolled[0], atol=1e-10, rtol=0)
    assert _rel(implicit[1], unrolled[1]) < 1e-6 and _rel(implicit[2], unrolled[2]) < 1e-6


def _exact_log_marginals(n, edges, log_phi, log_H, evidence):
    """Differentiable brute force: log p(y_i) of p(y) ∝ Π φ_i(y_i) Π H[y_i, y_j] given the evidence."""
    c = log_phi.size(1)
    ys = torch.tensor(list(itertools.product(range(c), repeat=n)))  # [c^n, n]
    keep = torch.ones(ys.size(0), dtype=torch.bool)
    for i, v in evidence.items():
        keep &= ys[:, i] == v
    ys = ys[keep]
    score = log_phi.gather(1, ys.T).sum(0)  # Σ_i log φ_i(y_i)
    for i, j in edges:
        score = score + log_H[ys[:, i], ys[:, j]]
    onehot = torch.nn.functional.one_hot(ys, c).bool()  # [configs, n, c]
    per = torch.where(onehot, score.view(-1, 1, 1), torch.tensor(float("-inf"), dtype=score.dtype))
    return torch.logsumexp(per, 0) - torch.logsumexp(score, 0)


@pytest.mark.parametrize("evidence", [{}, {2: 1, 6: 0}])
def test_implicit_gradient_on_a_tree_is_the_exact_marginal_likelihood_gradient(evidence, kernel):
    n, c = 7, 3
    g = torch.Generator().manual_seed(11)
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    weight = torch.randn(c, c, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 1, 0, 2, 0])
    free = torch.tensor([i not in evidence for i in range(n)])
    labels = torch.tensor([evidence.get(i, 0) for i in range(n)])

    phi = log_phi.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    exact = _exact_log_marginals(n, TREE, phi, 0.5 * (w + w.T), evidence)
    nll = -exact[free].gather(1, y[free].view(-1, 1)).sum()
    exact_grads = torch.autograd.grad(nll, [phi, w])

    layer = _layer(c, weight, "implicit", 50, tol=1e-13, kernel=kernel)
    phi2 = log_phi.clone().requires_grad_()
    out = layer(phi2, undirected(TREE), known_labels=labels, known_mask=~free)
    torch.testing.assert_close(out.exp(), exact.exp(), atol=1e-10, rtol=0)
    nll = -out[free].gather(1, y[free].view(-1, 1)).sum()
    grads = torch.autograd.grad(nll, [phi2, layer.coupling.weight])
    for a, b in zip(grads, exact_grads):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7)


def test_non_convergent_bp_takes_the_truncated_fallback_and_stays_finite(kernel):
    # K4 is all triangles: a strong heterophilous (antiferromagnetic) coupling frustrates every odd
    # cycle and undamped BP oscillates forever between two states
    ei = undirected(list(itertools.combinations(range(4), 2)))
    log_phi = 0.3 * torch.randn(4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weight = torch.tensor([[0.0, 3.0], [3.0, 0.0]], dtype=torch.float64)
    layer = _layer(2, weight, "implicit", 100, kernel=kernel)
    out, phi_grad, w_grad = _grads(layer, log_phi, ei)
    residuals = layer(log_phi, ei, return_residuals=True)[1]
    assert residuals.numel() == 100 and residuals[-1] > 1.0  # really not converging
    stats = layer.implicit_stats
    assert stats.forward_converged == 0 and stats.fallbacks == 1
    assert stats.adjoint_steps == FALLBACK_STEPS - 1  # the adjoint truncated after K terms
    assert torch.isfinite(out).all() and torch.isfinite(phi_grad).all() and torch.isfinite(w_grad).all()
    assert phi_grad.abs().max() > 0 and w_grad.abs().max() > 0


def _saved_bytes(layer, log_phi, ei):
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(log_phi.detach().requires_grad_(), ei).sum()
    return total


def test_implicit_memory_does_not_grow_with_the_number_of_steps(kernel):
    ei = undirected(GRID)
    log_phi = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    weight = torch.zeros(3, 3, dtype=torch.float64)
    # tol = 0: both run their whole budget
    short = _saved_bytes(_layer(3, weight, "implicit", 5, tol=0.0, kernel=kernel), log_phi, ei)
    long = _saved_bytes(_layer(3, weight, "implicit", 60, tol=0.0, kernel=kernel), log_phi, ei)
    unrolled = _saved_bytes(_layer(3, weight, "unroll", 60), log_phi, ei)
    assert short == long
    assert unrolled > 10 * long


def test_no_grad_and_zero_steps_take_the_plain_paths(kernel):
    ei = undirected(GRID)
    log_phi = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    weight = 0.5 * torch.ones(3, 3, dtype=torch.float64)
    layer = _layer(3, weight, "implicit", 200, tol=1e-12, kernel=kernel)
    with torch.no_grad():
        inferred = layer(log_phi, ei)
    trained = layer(log_phi.requires_grad_(), ei)
    torch.testing.assert_close(inferred, trained.detach(), atol=1e-9, rtol=0)
    assert layer.implicit_stats.forward_calls == 1  # inference did not go through the implicit pass
    torch.testing.assert_close(layer(log_phi, ei, num_steps=0, kernel="auto"), torch.log_softmax(log_phi, -1))


def test_backward_is_validated():
    with pytest.raises(ValueError, match="backward"):
        BeliefPropagation(2, backward="neumann")
    assert BeliefPropagation(2, backward="implicit").tol == 1e-4


@pytest.mark.parametrize("dtype, tol, c, threads, reorder", [
    (torch.float64, 1e-9, 4, 1, False), (torch.float32, 1e-4, 4, 2, False),
    (torch.float64, 1e-9, 9, 3, False),  # 9 classes: BLAS products
    (torch.float64, 1e-9, 4, 2, True)])  # the layout renumbers the nodes, as on large graphs
def test_fused_and_eager_implicit_passes_agree_on_a_random_graph(dtype, tol, c, threads, reorder, monkeypatch):
    if fused_unavailable(dtype):
        pytest.skip(fused_unavailable(dtype))
    if reorder:
        import gbpn.graph.layouts as layouts

        monkeypatch.setattr(layouts, "REORDER_MIN_NODES", 0)
    n = 300
    ei = random_graph(n, 0.02, seed=3)
    g = torch.Generator().manual_seed(5)
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64).to(dtype)
    weight = 0.25 * torch.randn(c, c, generator=g, dtype=torch.float64)
    kw = {"known_labels": torch.arange(n) % c, "known_mask": torch.arange(n) % 4 == 0}
    got = {}
    for kernel in ("eager", "fused"):
        layer = _layer(c, weight, "implicit", 300, tol=tol, damping=0.2, kernel=kernel).to(dtype)
        with num_threads(threads):
            got[kernel] = _grads(layer, log_phi, ei, **kw)
        assert (layer.last_backend == "eager") == (kernel == "eager") and layer.implicit_stats.fallbacks == 0
    for a, b in zip(got["fused"], got["eager"]):
        assert _rel(a, b) < (1e-6 if dtype == torch.float64 else 2e-4)


def test_fused_implicit_with_a_flat_coupling_and_damping_converges_on_the_damping_carry():
    # H all equal (the default initialisation): the cavity gradients vanish and only the damping's
    # carry holds the gradient on; a series that stopped on the cavities alone lost (1 - damping)
    if fused_unavailable(torch.float32):
        pytest.skip(fused_unavailable(torch.float32))
    n, c = 200, 2
    ei = random_graph(n, 0.03, seed=4)
    log_phi = torch.randn(n, c, generator=torch.Generator().manual_seed(4))
    kw = {"known_labels": torch.arange(n) % c, "known_mask": torch.arange(n) % 5 == 0}
    got = {}
    for kernel in ("eager", "fused"):
        layer = BeliefPropagation(c, num_steps=300, damping=0.5, backward="implicit", tol=1e-6, kernel=kernel)
        got[kernel] = _grads(layer, log_phi, ei, **kw)
        assert (layer.last_backend == "eager") == (kernel == "eager") and layer.implicit_stats.fallbacks == 0
    for a, b in zip(got["fused"], got["eager"]):
        assert _rel(a, b) < 1e-4


@pytest.mark.parametrize("damping", [0.0, 0.2])
def test_fused_and_eager_fallbacks_agree_where_bp_does_not_converge(damping):
    # off the fixed point both take the gradient of FALLBACK_STEPS steps linearised at the last iterate
    if fused_unavailable(torch.float64):
        pytest.skip(fused_unavailable(torch.float64))
    ei = undirected(list(itertools.combinations(range(4), 2)))
    log_phi = 0.3 * torch.randn(4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weight = torch.tensor([[0.0, 3.0], [3.0, 0.0]], dtype=torch.float64)
    got = {}
    for kernel in ("eager", "fused"):
        layer = _layer(2, weight, "implicit", 100, damping=damping, kernel=kernel)
        got[kernel] = _grads(layer, log_phi, ei)
        assert layer.implicit_stats.fallbacks == 1 and layer.implicit_stats.forward_converged == 0
    for a, b in zip(got["fused"], got["eager"]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


def test_fused_implicit_refuses_a_reverse_index_that_does_not_pair_the_edges():
    if fused_unavailable(torch.float64):
        pytest.skip(fused_unavailable(torch.float64))
    # a duplicated edge: both copies name the same reverse, which is a valid reverse for BP
    ei = torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 2, 1]])
    rev = torch.tensor([2, 2, 0, 4, 3])
    log_phi = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    weight = torch.tensor([[1.0, -0.5], [-0.5, 1.0]], dtype=torch.float64)
    auto = _layer(2, weight, "implicit", 100, tol=1e-12)
    got = _grads(auto, log_phi, ei, rev_index=rev)
    assert auto.last_backend == "eager"
    want = _grads(_layer(2, weight, "implicit", 100, tol=1e-12, kernel="eager"), log_phi, ei, rev_index=rev)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="paired with its own reverse"):
        _layer(2, weight, "implicit", 100, tol=1e-12, kernel="fused")(log_phi.requires_grad_(), ei, rev_index=rev)
