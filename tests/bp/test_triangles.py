"""Triangle factors: enumeration (gbpn.graph.triangles), the factor (gbpn.bp.triangle_factor) and BP on
the factor graph of unary, pairwise and triangle factors (gbpn.bp.motifs)."""
import itertools
import math

import pytest
import torch
from conftest import KERNELS, random_graph, undirected
from torch.func import functional_call

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.motifs import (
    MotifBeliefPropagation,
    check_triangles,
    triangle_message_cp,
    triangle_message_full,
)
from gbpn.bp.triangle_factor import TriangleFactor, default_form
from gbpn.graph.triangles import (
    cap_triangles,
    covered_edge_mask,
    enumerate_triangles,
    triangle_edge_positions,
)

D = torch.float64


def cp_from_potts(num_classes: int, strength: float, floor: float = 1e-8) -> torch.Tensor:
    r"""Exact CP factors ``[c + 1, c]`` of the triangle Potts potential
    :math:`T_{abc} = \exp(s\,[a = b = c])`: rank 1 of all ones (the 1 everywhere) plus, per class
    :math:`a`, :math:`u_a = (e^s - 1)^{1/3} e_a` (adds :math:`e^s - 1` on the diagonal); :math:`s > 0`.
    A reference for the CP form (a test helper). The zeros are floored at ``floor`` (the
    factors must be positive), which moves :math:`T` by a relative :math:`O(\text{floor})`.
    """
    if strength <= 0:
        raise ValueError("the CP form's factors are positive: the Potts triangle needs strength > 0")
    u = torch.full((num_classes + 1, num_classes), floor, dtype=torch.float64)
    u[0] = 1.0
    u[1:] += torch.eye(num_classes, dtype=torch.float64) * math.expm1(strength) ** (1.0 / 3.0)
    return u


def _dense_triangles(edge_index, n):
    """Brute force over node triples on the dense adjacency."""
    A = torch.zeros(n, n, dtype=torch.bool)
    A[edge_index[0], edge_index[1]] = True
    A = (A | A.T) & ~torch.eye(n, dtype=torch.bool)
    return [(i, j, k) for i, j, k in itertools.combinations(range(n), 3) if A[i, j] and A[j, k] and A[i, k]]


def _sym3(x):
    return sum(x.permute(p) for p in itertools.permutations(range(3))) / 6


# ---------------------------------------------------------------------------------------------- enumeration

@pytest.mark.parametrize("n,p,seed", [(8, 0.6, 0), (15, 0.4, 1), (25, 0.3, 2), (40, 0.15, 3), (12, 0.1, 4), (6, 1.0, 5)])
def test_triangles_equal_a_dense_reference(n, p, seed):
    ei = random_graph(n, p, seed)
    ref = _dense_triangles(ei, n)
    tri = enumerate_triangles(ei, n)
    assert [tuple(t) for t in tri.T.tolist()] == ref  # i < j < k, lexicographic
    assert enumerate_triangles(ei, n).size(1) == len(ref)
    # small chunks take the same path in pieces; one direction only, duplicates and self-loops read the same
    assert torch.equal(enumerate_triangles(ei, n, wedge_chunk=3), tri)
    messy = torch.cat([ei[:, ei[0] < ei[1]], ei[:, :5], torch.arange(3).repeat(2, 1)], dim=1)
    assert torch.equal(enumerate_triangles(messy, n), tri)


def test_no_triangles():
    assert enumerate_triangles(torch.empty(2, 0, dtype=torch.long), 5).shape == (3, 0)
    assert enumerate_triangles(undirected([(0, 1), (1, 2), (2, 3), (3, 0)]), 4, max_per_node=1).shape == (3, 0)


def test_dense_count_by_trace():
    ei = random_graph(30, 0.3, 7)
    A = torch.zeros(30, 30, dtype=D)
    A[ei[0], ei[1]] = 1
    assert enumerate_triangles(ei, 30).size(1) == round(float(torch.trace(A @ A @ A)) / 6)


def _hub_graph():
    """A clique of 10 (120 triangles) sharing node 0 with a wheel of 30 spokes: node 0 lies in 66 triangles."""
    pairs = list(itertools.combinations(range(10), 2))
    rim = list(range(10, 40))
    pairs += [(0, v) for v in rim] + [(rim[i], rim[(i + 1) % 30]) for i in range(30)]
    return undirected(pairs), 40


@pytest.mark.parametrize("cap", [1, 3, 10])
def test_cap_is_respected_and_seeded(cap):
    ei, n = _hub_graph()
    full = enumerate_triangles(ei, n)
    assert full.size(1) == 120 + 30 and int(torch.bincount(full.reshape(-1), minlength=n).max()) == 36 + 30
    a = enumerate_triangles(ei, n, max_per_node=cap, seed=3)
    assert a.size(1) > 0 and int(torch.bincount(a.reshape(-1), minlength=n).max()) <= cap
    assert torch.equal(a, enumerate_triangles(ei[:, torch.randperm(ei.size(1))], n, max_per_node=cap, seed=3))
    assert torch.equal(a, enumerate_triangles(ei, n, max_per_node=cap, generator=torch.Generator().manual_seed(3)))
    keys = set(map(tuple, full.T.tolist()))
    assert set(map(tuple, a.T.tolist())) <= keys  # a subset, in the same order
    others = {tuple(map(tuple, enumerate_triangles(ei, n, max_per_node=cap, seed=s).T.tolist())) for s in range(6)}
    assert len(others) > 1  # the seed matters
    assert torch.equal(cap_triangles(full, n, 10**6), full)
    with pytest.raises(ValueError, match="max_per_node"):
        enumerate_triangles(ei, n, max_per_node=0)


def test_edge_positions_and_covered_mask():
    ei = random_graph(12, 0.5, 11)
    tri = enumerate_triangles(ei, 12)
    pos = triangle_edge_positions(tri, ei, 12)
    i, j, k = tri
    for row, (a, b) in enumerate([(j, k), (i, k), (i, j), (k, j), (k, i), (j, i)]):
        assert torch.equal(ei[0, pos[row]], a) and torch.equal(ei[1, pos[row]], b)
    mask = covered_edge_mask(tri, ei, 12)
    sides = {frozenset(e) for t in tri.T.tolist() for e in itertools.combinations(t, 2)}
    assert mask.tolist() == [frozenset(e) in sides for e in ei.T.tolist()]
    assert (triangle_edge_positions(torch.tensor([[0], [1], [2]]), torch.empty(2, 0, dtype=torch.long), 3) == -1).all()


# ------------------------------------------------------------------------------------------------ the factor

@pytest.mark.parametrize("form", ["full", "cp"])
def test_factor_is_positive_and_symmetric(form):
    torch.manual_seed(0)
    f = TriangleFactor(4, form=form, rank=3 if form == "cp" else None)
    with torch.no_grad():
        f.weight.normal_()
    T = f.T
    assert T.shape == (4, 4, 4) and bool((T > 0).all())
    for p in itertools.permutations(range(3)):
        torch.testing.assert_close(T.permute(p), T, rtol=1e-6, atol=0)
    assert "form=" in repr(f) and f.normalized().log().mean().abs() < 1e-5
    f.reset_parameters()
    if form == "full":
        assert torch.equal(f.T, torch.ones(4, 4, 4))
    else:  # a random start breaks the symmetry between ranks
        assert f.log_factors.std() > 0


def test_factor_init_and_defaults():
    T = _sym3(torch.randn(3, 3, 3, dtype=D)).exp()
    torch.testing.assert_close(TriangleFactor(3, "full", init=T).T, T, rtol=1e-12, atol=0)
    u = torch.rand(5, 3, dtype=D) + 0.1
    f = TriangleFactor(3, "cp", rank=5, init=u)
    torch.testing.assert_close(f.T, torch.einsum("ra,rb,rc->abc", u, u, u), rtol=1e-12, atol=0)
    assert default_form(3) == "full" and default_form(40) == "cp"
    with pytest.raises(ValueError, match="symmetric"):
        TriangleFactor(3, "full", init=torch.rand(3, 3, 3) + 0.1)
    with pytest.raises(ValueError, match="rank"):
        TriangleFactor(3, "full", rank=2)
    potts = TriangleFactor(4, "cp", rank=5, init=cp_from_potts(4, 1.5)).T
    ref = torch.ones(4, 4, 4, dtype=D)
    ref[range(4), range(4), range(4)] = torch.exp(torch.tensor(1.5, dtype=D))
    torch.testing.assert_close(potts, ref, rtol=1e-6, atol=0)


def test_messages_full_cp_and_dense_agree():
    g = torch.Generator().manual_seed(0)
    m, c, r = 17, 5, 3
    x, y = torch.randn(m, c, generator=g, dtype=D) * 3, torch.randn(m, c, generator=g, dtype=D) * 3
    log_u = torch.randn(r, c, generator=g, dtype=D)
    log_T = torch.logsumexp(log_u[:, :, None, None] + log_u[:, None, :, None] + log_u[:, None, None, :], 0)
    dense = torch.logsumexp(log_T[None] + x[:, None, :, None] + y[:, None, None, :], dim=(2, 3))  # [M, c, c, c]
    for block in (1, 2 * c * m, 1 << 24):
        torch.testing.assert_close(triangle_message_full(x, y, log_T, block), dense, rtol=0, atol=1e-12)
    torch.testing.assert_close(triangle_message_cp(x, y, log_u), dense, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------- exactness on trees

# A tree of triangles (any two share at most one node, no cycle through them) and a chain of plain edges:
# (0,1,2) meets (2,3,4) at 2 and (1,5,6) at 1; (2,3,4) meets (4,7,8) at 4; plain edges 3-9-10.
TREE_TRIANGLES = [(0, 1, 2), (2, 3, 4), (1, 5, 6), (4, 7, 8)]
TREE_PLAIN = [(3, 9), (9, 10)]
N_TREE = 11


def _tree_graph():
    sides = [e for t in TREE_TRIANGLES for e in itertools.combinations(t, 2)]
    ei = undirected(sides + TREE_PLAIN)
    return ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))], torch.tensor(TREE_TRIANGLES).T


def brute_force(n, log_phi, pairs, log_H, triangles, log_T, evidence=None, pair_weight=None):
    """Exact marginals of p(y) ∝ Π φ_i(y_i) Π_pairs H^w Π_triangles T, enumerating every labelling at once."""
    c = log_phi.size(1)
    ys = torch.cartesian_prod(*[torch.arange(c)] * n)
    lp = log_phi[torch.arange(n), ys].sum(1)
    for e, (i, j) in enumerate(pairs):
        lp = lp + (1.0 if pair_weight is None else pair_weight[e]) * log_H[ys[:, i], ys[:, j]]
    for i, j, k in triangles:
        lp = lp + log_T[ys[:, i], ys[:, j], ys[:, k]]
    for i, v in (evidence or {}).items():
        lp = torch.where(ys[:, i] == v, lp, torch.tensor(-torch.inf, dtype=D))
    w = torch.softmax(lp, 0)
    return torch.stack([torch.zeros(c, dtype=D).index_add(0, ys[:, i], w) for i in range(n)])


def _clamps(evidence, n):
    labels, mask = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.bool)
    for i, v in evidence.items():
        labels[i], mask[i] = v, True
    return {"known_labels": labels, "known_mask": mask}


@pytest.mark.parametrize("form", ["full", "cp"])
@pytest.mark.parametrize("c", [2, 3])
@pytest.mark.parametrize("evidence", [None, {2: 1, 10: 0}, {0: 1, 4: 0, 6: 1}])
@pytest.mark.parametrize("weighted", [False, True])
def test_bp_on_a_tree_of_triangles_is_exact(form, c, evidence, weighted):
    g = torch.Generator().manual_seed(10 * c + len(evidence or ()))
    ei, tri = _tree_graph()
    log_phi = torch.randn(N_TREE, c, generator=g, dtype=D)
    A = torch.randn(c, c, generator=g, dtype=D)
    log_H = A + A.T
    if form == "full":
        init = _sym3(torch.randn(c, c, c, generator=g, dtype=D) * 1.5).exp()
    else:
        init = torch.randn(4, c, generator=g, dtype=D).exp()
    layer = MotifBeliefPropagation(c, num_steps=12, learn_coupling=False, coupling_init=log_H.exp(),
                                   triangle_form=form, rank=4 if form == "cp" else None, triangle_init=init,
                                   pairwise_on_triangle_edges=False).double()
    kw = {} if evidence is None else _clamps(evidence, N_TREE)
    weight, pair_weight = None, None
    if weighted:  # symmetric per-edge weights; those of triangle sides are dropped with their H
        key = torch.minimum(ei[0], ei[1]) * N_TREE + torch.maximum(ei[0], ei[1])
        weight = 0.5 + (key % 7).to(D) / 4
        pair_weight = [0.5 + ((min(i, j) * N_TREE + max(i, j)) % 7) / 4 for i, j in TREE_PLAIN]
    log_b = layer(log_phi, ei, tri, edge_weight=weight, **kw).detach()
    assert layer.last_backend == "motif_eager"
    exact = brute_force(N_TREE, log_phi, TREE_PLAIN, log_H, TREE_TRIANGLES, layer.log_T.detach(), evidence,
                        pair_weight)
    torch.testing.assert_close(log_b.exp(), exact, atol=1e-8, rtol=0)
    if evidence:
        for i, v in evidence.items():  # clamped nodes stay clamped
            assert int(log_b[i].argmax()) == v and float(log_b[i].exp()[v]) == 1.0


def test_triangles_only_and_pairwise_on_sides_absorbed():
    """No plain edge at all (every edge a triangle side) is a tree too; and the model with H on every edge
    equals, on a tree of triangles, the one without H on the sides and T' = T H H H (the absorbed form)."""
    g = torch.Generator().manual_seed(5)
    c = 3
    ei, tri = _tree_graph()
    sides = ei[:, covered_edge_mask(tri, ei, N_TREE)]
    log_phi = torch.randn(N_TREE, c, generator=g, dtype=D)
    A = torch.randn(c, c, generator=g, dtype=D)
    log_H = 0.5 * (A + A.T)
    log_T = _sym3(torch.randn(c, c, c, generator=g, dtype=D))
    absorbed = log_T + log_H[:, :, None] + log_H[None, :, :] + log_H[:, None, :]
    layer = MotifBeliefPropagation(c, num_steps=12, coupling_init=log_H.exp(), triangle_form="full",
                                   triangle_init=absorbed.exp(), pairwise_on_triangle_edges=False).double()
    tri_pairs = [e for t in TREE_TRIANGLES for e in itertools.combinations(t, 2)]
    exact = brute_force(N_TREE, log_phi, tri_pairs + TREE_PLAIN, log_H, TREE_TRIANGLES, log_T)
    torch.testing.assert_close(layer(log_phi, ei, tri).exp(), exact, atol=1e-8, rtol=0)
    exact_sides = brute_force(N_TREE, log_phi, [], log_H, TREE_TRIANGLES, absorbed)  # 9, 10: isolated
    torch.testing.assert_close(layer(log_phi, sides, tri).exp(), exact_sides, atol=1e-8, rtol=0)


# --------------------------------------------------------------------------- reduction to the pairwise layer

def _loopy(n=14, p=0.35, seed=3):
    ei = random_graph(n, p, seed)
    return ei, enumerate_triangles(ei, n)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backward", ["unroll", "implicit"])
def test_without_triangles_equals_pairwise_bit_for_bit(kernel, backward):
    g = torch.Generator().manual_seed(1)
    ei, _ = _loopy()
    n, c = 14, 3
    A = torch.randn(c, c, generator=g, dtype=D)
    H = (A + A.T).exp()
    log_phi = torch.randn(n, c, generator=g, dtype=D, requires_grad=True)
    kw = _clamps({0: 2, 5: 1}, n)
    ref_layer = BeliefPropagation(c, 6, damping=0.2, coupling_init=H, backward=backward, kernel=kernel).double()
    motif = MotifBeliefPropagation(c, 6, damping=0.2, coupling_init=H, backward=backward, kernel=kernel).double()
    ref = ref_layer(log_phi, ei, **kw)
    (g_ref,) = torch.autograd.grad(ref.sum(), log_phi)
    for tri in (None, torch.empty(3, 0, dtype=torch.long)):
        out = motif(log_phi, ei, tri, **kw)
        assert torch.equal(out, ref)
        assert motif.last_backend == ref_layer.last_backend
        (g_out,) = torch.autograd.grad(out.sum(), log_phi)
        assert torch.equal(g_out, g_ref)
    assert motif.coupling is motif.pairwise.coupling
    assert sum(p.numel() for p in motif.parameters()) == c * c + c ** 3  # H once, T once


@pytest.mark.parametrize("damping", [0.0, 0.3])
def test_constant_triangle_factor_reduces_to_pairwise(damping):
    """T = 1 sends uniform messages: on a loopy graph the beliefs are the pairwise layer's up to rounding,
    with edge weights and clamps."""
    g = torch.Generator().manual_seed(2)
    ei, tri = _loopy()
    assert tri.size(1) > 5
    n, c = 14, 3
    A = torch.randn(c, c, generator=g, dtype=D)
    H = (A + A.T).exp()
    log_phi = torch.randn(n, c, generator=g, dtype=D)
    key = torch.minimum(ei[0], ei[1]) * n + torch.maximum(ei[0], ei[1])
    w = 0.5 + (key % 5).to(D) / 3
    kw = _clamps({1: 0, 7: 2}, n)
    ref = BeliefPropagation(c, 7, damping=damping, coupling_init=H, kernel="eager").double()(log_phi, ei, w, **kw)
    for form, init in (("full", None), ("cp", torch.ones(2, c, dtype=D))):
        motif = MotifBeliefPropagation(c, 7, damping=damping, coupling_init=H, triangle_form=form,
                                       rank=2 if form == "cp" else None, triangle_init=init).double()
        out = motif(log_phi, ei, tri, edge_weight=w, **kw)
        torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_cp_and_full_forms_agree_on_a_loopy_graph():
    g = torch.Generator().manual_seed(4)
    ei, tri = _loopy()
    n, c = 14, 4
    log_phi = torch.randn(n, c, generator=g, dtype=D)
    cp = MotifBeliefPropagation(c, 6, damping=0.1, triangle_form="cp", rank=3,
                                triangle_init=torch.randn(3, c, generator=g, dtype=D).exp()).double()
    full = MotifBeliefPropagation(c, 6, damping=0.1, triangle_form="full", triangle_init=cp.T).double()
    with torch.no_grad():
        full.coupling.weight.copy_(cp.coupling.weight.normal_(generator=g))
    torch.testing.assert_close(cp(log_phi, ei, tri), full(log_phi, ei, tri), atol=1e-10, rtol=0)


def test_invariant_under_permuted_edges_and_triangles():
    g = torch.Generator().manual_seed(6)
    ei, tri = _loopy()
    n, c = 14, 3
    layer = MotifBeliefPropagation(c, 5, triangle_form="full",
                                   triangle_init=_sym3(torch.randn(c, c, c, generator=g, dtype=D)).exp()).double()
    log_phi = torch.randn(n, c, generator=g, dtype=D)
    ref = layer(log_phi, ei, tri)
    pe, pt = torch.randperm(ei.size(1), generator=g), torch.randperm(tri.size(1), generator=g)
    corners = torch.stack([torch.randperm(3, generator=g) for _ in range(tri.size(1))], 1)  # reorder each corner
    out = layer(log_phi, ei[:, pe], tri[:, pt].gather(0, corners))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_float32_clamps_residuals_and_errors():
    g = torch.Generator().manual_seed(8)
    ei, tri = _loopy()
    n, c = 14, 3
    layer = MotifBeliefPropagation(c, 30, tol=1e-5, triangle_form="cp", rank=2)
    log_phi = torch.randn(n, c, generator=g, requires_grad=True)
    kw = _clamps({3: 1}, n)
    out, res = layer(log_phi, ei, tri, return_residuals=True, **kw)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(log_phi.grad).all()
    assert float(out[3].detach().exp()[1]) == 1.0 and res.numel() <= 30
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
    assert layer(log_phi.detach().half(), ei, tri).dtype == torch.float16
    with pytest.raises(ValueError, match="repeats a node"):
        layer(log_phi, ei, torch.tensor([[0], [0], [1]]))
    with pytest.raises(ValueError, match=r"\[3, T\]"):
        check_triangles(torch.zeros(2, 3, dtype=torch.long), n)
    with pytest.raises(ValueError, match="fused"):
        layer(log_phi, ei, tri, kernel="fused")
    implicit = MotifBeliefPropagation(c, 5, backward="implicit")
    implicit(log_phi, ei, tri)
    assert "implicit" in implicit.last_reason
    assert "triangle_form='cp', rank=2" in repr(layer)


# --------------------------------------------------------------------------------------------------- gradcheck

@pytest.mark.parametrize("form", ["full", "cp"])
@pytest.mark.parametrize("pairwise_on_sides", [True, False])
def test_gradcheck(form, pairwise_on_sides):
    g = torch.Generator().manual_seed(9)
    n, c = 6, 3
    ei = undirected([(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (2, 4), (4, 5), (0, 3)])  # loops included
    tri = enumerate_triangles(ei, n)
    layer = MotifBeliefPropagation(c, 3, damping=0.2, triangle_form=form, rank=2 if form == "cp" else None,
                                   pairwise_on_triangle_edges=pairwise_on_sides).double()
    params = {"pairwise.coupling.weight": torch.randn(c, c, generator=g, dtype=D, requires_grad=True),
              "triangle.weight": torch.randn(*layer.triangle.weight.shape, generator=g, dtype=D, requires_grad=True)}
    log_phi = torch.randn(n, c, generator=g, dtype=D, requires_grad=True)
    w = torch.full((ei.size(1),), 0.7, dtype=D)
    kw = _clamps({5: 1}, n)

    def f(phi, wh, wt):
        return functional_call(layer, {"pairwise.coupling.weight": wh, "triangle.weight": wt},
                               (phi, ei, tri), {"edge_weight": w, **kw})

    assert torch.autograd.gradcheck(f, (log_phi, *params.values()))
