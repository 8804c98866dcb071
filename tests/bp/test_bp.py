import pytest
import torch
from conftest import KERNELS, brute_force_marginals, undirected

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.coupling import Coupling
from gbpn.bp.functional import log_matmul_exp_dense, log_normalize
from gbpn.graph.reverse import reverse_edge_index

# A tree of 7 nodes with diameter 4: 0-1, 1-2, 1-3, 3-4, 3-5, 5-6
TREE = [(0, 1), (1, 2), (1, 3), (3, 4), (3, 5), (5, 6)]


def _bp(c, log_H, steps, **kw):
    layer = BeliefPropagation(c, num_steps=steps, learn_coupling=False, coupling_init=log_H.exp(), **kw).double()
    return layer


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("c", [2, 3])
@pytest.mark.parametrize("evidence", [None, {2: 1, 6: 0}])
def test_bp_on_a_tree_is_exact(c, evidence, kernel):
    g = torch.Generator().manual_seed(c)
    n = 7
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    A = torch.randn(c, c, generator=g, dtype=torch.float64)
    log_H = A + A.T
    exact = brute_force_marginals(n, TREE, log_phi, log_H, evidence)
    layer = _bp(c, log_H, steps=4, kernel=kernel)
    kw = {}
    if evidence:
        labels = torch.zeros(n, dtype=torch.long)
        mask = torch.zeros(n, dtype=torch.bool)
        for i, v in evidence.items():
            labels[i], mask[i] = v, True
        kw = {"known_labels": labels, "known_mask": mask}
    log_b = layer(log_phi, undirected(TREE), **kw)
    assert (layer.last_backend == "eager") == (kernel == "eager")
    torch.testing.assert_close(log_b.exp(), exact, atol=1e-6, rtol=0)


def test_too_few_steps_are_not_exact_on_a_tree():
    # guards the exactness test against passing trivially
    g = torch.Generator().manual_seed(0)
    log_phi = torch.randn(7, 2, generator=g, dtype=torch.float64)
    log_H = torch.tensor([[1.5, -1.5], [-1.5, 1.5]], dtype=torch.float64)
    exact = brute_force_marginals(7, TREE, log_phi, log_H)
    log_b = _bp(2, log_H, steps=1)(log_phi, undirected(TREE))
    assert (log_b.exp() - exact).abs().max() > 1e-3


def _fixed_point_residual(layer, log_phi, ei):
    """Run BP to convergence and return the messages' deviation from the BP equations."""
    n, c = log_phi.shape
    rev = reverse_edge_index(ei, n)
    log_H = layer.log_H
    log_b = layer(log_phi, ei, rev_index=rev)
    # rebuild the converged messages from the beliefs: m_ij ∝ Σ_a H[a,b] p_i(a) / m_ji(a) needs the messages,
    # so iterate the plain E×c×c update from the layer's beliefs until it is stationary
    log_m = torch.full((ei.size(1), c), -torch.log(torch.tensor(float(c))), dtype=log_phi.dtype)
    for _ in range(500):
        belief = log_normalize(log_phi.index_add(0, ei[1], log_m))
        new = log_normalize(log_matmul_exp_dense(belief[ei[0]] - log_m[rev], log_H))
        log_m = new
    belief = log_normalize(log_phi.index_add(0, ei[1], log_m))
    again = log_normalize(log_matmul_exp_dense(belief[ei[0]] - log_m[rev], log_H))
    return (again - log_m).abs().max(), (belief - log_b).abs().max()


def test_loopy_bp_converges_to_a_fixed_point():
    # a 3x3 grid with 4 cycles, moderate coupling: BP converges
    edges = [(r * 3 + k, r * 3 + k + 1) for r in range(3) for k in range(2)]
    edges += [(r * 3 + k, (r + 1) * 3 + k) for r in range(2) for k in range(3)]
    ei = undirected(edges)
    g = torch.Generator().manual_seed(3)
    log_phi = torch.randn(9, 3, generator=g, dtype=torch.float64)
    log_H = torch.tensor([[0.8, -0.2, 0.0], [-0.2, 0.6, 0.1], [0.0, 0.1, 0.7]], dtype=torch.float64)
    layer = _bp(3, log_H, steps=200)
    msg_res, belief_res = _fixed_point_residual(layer, log_phi, ei)
    assert msg_res < 1e-10
    assert belief_res < 1e-8  # the lean layer reaches the same fixed point as the plain E×c×c update


def test_damping_and_tolerance_reach_the_same_fixed_point():
    edges = [(0, 1), (1, 2), (2, 0), (2, 3)]
    ei = undirected(edges)
    log_phi = torch.randn(4, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    log_H = torch.tensor([[0.7, -0.7], [-0.7, 0.7]], dtype=torch.float64)
    plain = _bp(2, log_H, steps=300)(log_phi, ei)
    damped, res = _bp(2, log_H, steps=300, damping=0.5, tol=1e-12)(log_phi, ei, return_residuals=True)
    torch.testing.assert_close(damped, plain, atol=1e-9, rtol=0)
    assert res.numel() < 300 and res[-1] < 1e-12  # stopped early once converged
    assert (res[1:] <= res[:-1] * 1.5 + 1e-15).all()  # residuals decay


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradcheck_through_bp_steps(kernel):
    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)])
    log_phi = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    known = torch.tensor([False, False, False, True, False])
    labels = torch.tensor([0, 0, 0, 2, 0])
    layer = BeliefPropagation(3, num_steps=4, kernel=kernel).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(3, 3, dtype=torch.float64))

    w = layer.coupling.weight.detach().clone().requires_grad_(True)

    def g(phi, weight):
        return torch.func.functional_call(layer, {"coupling.weight": weight}, (phi, ei),
                                          {"known_labels": labels, "known_mask": known})

    assert torch.autograd.gradcheck(g, (log_phi, w), eps=1e-6, atol=1e-5)
    assert (layer.last_backend == "eager") == (kernel == "eager")


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradcheck_with_edge_weights(kernel):
    ei = undirected([(0, 1), (1, 2), (2, 0)])
    w_edge = torch.tensor([0.5, 1.0, 2.0, 0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    log_phi = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    layer = BeliefPropagation(2, num_steps=3, learn_coupling=False,
                              coupling_init=torch.tensor([[2.0, 0.5], [0.5, 2.0]]), kernel=kernel).double()
    assert torch.autograd.gradcheck(lambda p, w: layer(p, ei, edge_weight=w), (log_phi, w_edge), eps=1e-6, atol=1e-5)
    assert (layer.last_backend == "eager") == (kernel == "eager")


def test_edge_weight_changes_the_result_and_one_is_neutral():
    ei = undirected([(0, 1), (1, 2)])
    log_phi = torch.randn(3, 2, dtype=torch.float64)
    layer = _bp(2, torch.tensor([[1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64), steps=3)
    base = layer(log_phi, ei)
    torch.testing.assert_close(layer(log_phi, ei, edge_weight=torch.ones(4, dtype=torch.float64)), base)
    assert not torch.allclose(layer(log_phi, ei, edge_weight=torch.full((4,), 3.0, dtype=torch.float64)), base)


def test_clamped_nodes_stay_clamped_and_no_nan():
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    log_phi = torch.randn(4, 3, requires_grad=True)
    layer = BeliefPropagation(3, num_steps=6)
    labels = torch.tensor([2, 0, 1, 0])
    mask = torch.tensor([True, False, True, False])
    out = layer(log_phi, ei, known_labels=labels, known_mask=mask)
    assert torch.equal(out[mask].argmax(1), labels[mask])
    torch.testing.assert_close(out[mask].exp(), torch.nn.functional.one_hot(labels[mask], 3).float())
    out[~mask].sum().backward()
    assert torch.isfinite(log_phi.grad).all() and torch.isfinite(layer.coupling.weight.grad).all()
    assert torch.isfinite(out).all()


def test_heterophilous_coupling_pushes_a_node_away_from_its_clamped_neighbour():
    ei = undirected([(0, 1)])
    log_phi = torch.zeros(2, 2)
    hetero = BeliefPropagation(2, num_steps=2, learn_coupling=False, coupling_init=torch.tensor([[0.2, 1.0], [1.0, 0.2]]))
    homo = BeliefPropagation(2, num_steps=2, learn_coupling=False, coupling_init=torch.tensor([[1.0, 0.2], [0.2, 1.0]]))
    kw = dict(known_labels=torch.tensor([1, 0]), known_mask=torch.tensor([True, False]))
    assert hetero(log_phi, ei, **kw)[1].exp()[1] < 0.5  # neighbour is class 1 -> node leans to class 0
    assert homo(log_phi, ei, **kw)[1].exp()[1] > 0.5


def test_isolated_nodes_keep_their_self_potential():
    ei = undirected([(0, 1)])
    log_phi = log_normalize(torch.randn(3, 2, dtype=torch.float64))
    out = _bp(2, torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64), steps=3)(log_phi, ei)
    torch.testing.assert_close(out[2], log_phi[2])


@pytest.mark.parametrize("kernel", KERNELS)
def test_permuting_the_edge_list_does_not_change_beliefs(kernel):
    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 1)])
    log_phi = torch.randn(5, 3, dtype=torch.float64)
    layer = BeliefPropagation(3, num_steps=5, kernel=kernel).double()
    with torch.no_grad():
        layer.coupling.weight.normal_()
    base = layer(log_phi, ei)
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(1))
    ei_p = ei[:, perm]
    rev_p = reverse_edge_index(ei_p, 5)
    torch.testing.assert_close(layer(log_phi, ei_p, rev_index=rev_p), base)


@pytest.mark.parametrize("seed", range(3))
def test_coupling_is_symmetric_and_positive_for_any_parameters(seed):
    coup = Coupling(4)
    with torch.no_grad():
        coup.weight.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)) * 10)
    H = coup.H
    assert torch.equal(H, H.T) and (H > 0).all()
    torch.testing.assert_close(coup.normalized().log().mean(), torch.tensor(0.0), atol=1e-6, rtol=0)


def test_coupling_fixed_is_not_a_parameter():
    coup = Coupling(2, learnable=False, init=torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
    assert len(list(coup.parameters())) == 0
    torch.testing.assert_close(coup.H, torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
    with pytest.raises(ValueError):
        Coupling(2, init=torch.tensor([[1.0, 2.0], [3.0, 1.0]]))


def test_in_place_pair_inference_equals_the_synchronous_update():
    ei = undirected([(i, (i + 1) % 40) for i in range(40)] + [(i, (i + 9) % 40) for i in range(40)])
    pairs = ei[:, ei[0] < ei[1]]
    log_phi = torch.randn(40, 5)
    layer = BeliefPropagation(5, num_steps=6, damping=0.2)
    with torch.no_grad():
        layer.coupling.weight.normal_()
        labels, mask = torch.randint(0, 5, (40,)), torch.rand(40) < 0.3
        full = layer(log_phi, ei, known_labels=labels, known_mask=mask)
        in_place = layer.infer_pairs(log_phi, pairs, labels, mask, pair_chunk=7, message_dtype=torch.float32)
        half = layer.infer_pairs(log_phi, pairs, labels, mask, pair_chunk=7, message_dtype=torch.bfloat16)
        fp16 = layer.infer_pairs(log_phi, pairs, labels, mask, pair_chunk=7, message_dtype=torch.float16)  # log domain
    torch.testing.assert_close(in_place, full, atol=1e-5, rtol=1e-5)
    assert (half.exp() - full.exp()).abs().max() < 2e-2  # only the stored messages are rounded
    assert (fp16.exp() - full.exp()).abs().max() < 2e-2
    assert torch.equal(in_place[mask].argmax(1), labels[mask])  # evidence stays clamped


def test_paired_order_puts_reverses_half_the_list_apart():
    from gbpn.graph.reverse import paired_order, reverse_edge_index

    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3)])
    rev = reverse_edge_index(ei, 4)
    perm = paired_order(rev)
    h = ei.size(1) // 2
    assert sorted(perm.tolist()) == list(range(ei.size(1)))
    paired = ei[:, perm]
    assert torch.equal(paired[:, :h], paired[:, h:].flip(0))
    with_loop = torch.cat([ei, torch.tensor([[3], [3]])], 1)
    assert paired_order(reverse_edge_index(with_loop, 4)) is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_potentials_run_bp_in_float32(dtype):
    """A coupling whose log spread is 12 overflows float16's linear domain (e^12 > 65504): BP runs
    in float32 and only the beliefs come back in the caller's dtype."""
    import math

    ei = undirected([(i, j) for i in range(12) for j in range(i + 1, 12) if (i * 7 + j) % 3 == 0])
    g = torch.Generator().manual_seed(0)
    log_phi = torch.randn(12, 3, generator=g).log_softmax(-1).to(dtype)
    layer = BeliefPropagation(3, coupling_init=torch.ones(3, 3) + torch.eye(3) * (math.exp(12) - 1))
    with torch.no_grad():
        out = layer(log_phi, ei)
        ref = layer(log_phi.float(), ei)
    assert out.dtype == dtype and bool(torch.isfinite(out.float()).all())
    assert torch.allclose(out.float().exp(), ref.exp(), atol=2e-2)
    log_phi.requires_grad_()
    layer(log_phi, ei).float().sum().backward()
    assert log_phi.grad.dtype == dtype and bool(torch.isfinite(log_phi.grad.float()).all())


@pytest.mark.parametrize("steps", [2.5, "3", True, -1])
def test_a_step_count_that_is_not_a_whole_number_is_refused(steps):
    ei = undirected([(0, 1), (1, 2)])
    with pytest.raises(ValueError, match="num_steps must be a whole number"):
        BeliefPropagation(2)(torch.zeros(3, 2), ei, num_steps=steps)
    with pytest.raises(ValueError, match="num_steps must be a whole number"):
        BeliefPropagation(2, num_steps=steps)
