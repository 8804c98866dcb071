"""The triangular lattice and the Gibbs sampler of the MRF with triangle potentials (gbpn.data.triangle_mrf)."""
import itertools

import pytest
import torch

from gbpn.data.triangle_mrf import (
    angular_field,
    make_triangle_mrf,
    potts_triangle,
    sample_triangle_mrf,
    triangular_lattice,
)
from gbpn.errors import GBPNError
from gbpn.graph.triangles import enumerate_triangles

D = torch.float64


@pytest.mark.parametrize("rows,cols", [(2, 2), (2, 3), (4, 5), (7, 3)])
def test_lattice_structure(rows, cols):
    lat = triangular_lattice(rows, cols)
    n = rows * cols
    assert lat.edge_index.size(1) == 2 * (3 * rows * cols - 2 * rows - 2 * cols + 1)
    assert lat.triangles.size(1) == 2 * (rows - 1) * (cols - 1)
    # the lattice's own triangles are exactly the graph's (no others close), in the same order
    assert torch.equal(lat.triangles, enumerate_triangles(lat.edge_index, n))
    src, dst = lat.edge_index
    assert not bool((lat.colors[src] == lat.colors[dst]).any())
    assert lat.coords.abs().max() <= 1 + 1e-12 and lat.coords.shape == (n, 2)
    with pytest.raises(GBPNError):
        triangular_lattice(1, 4)


def _brute_force(n, log_phi, pairs, log_H, triangles, log_T):
    c = log_phi.size(1)
    ys = torch.cartesian_prod(*[torch.arange(c)] * n)
    lp = log_phi[torch.arange(n), ys].sum(1)
    for i, j in pairs:
        lp = lp + log_H[ys[:, i], ys[:, j]]
    for i, j, k in triangles:
        lp = lp + log_T[ys[:, i], ys[:, j], ys[:, k]]
    w = torch.softmax(lp, 0)
    return torch.stack([torch.zeros(c, dtype=D).index_add(0, ys[:, i], w) for i in range(n)])


@pytest.fixture
def one_thread():
    """The chains' tensors are tiny ([3000, 2, 3]): a second thread only adds synchronisation, which on a
    busy machine costs 20x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("given_colors", [True, False])
def test_gibbs_marginals_match_enumeration(given_colors, one_thread):
    g = torch.Generator().manual_seed(0)
    lat = triangular_lattice(2, 3)
    n, c = 6, 3
    log_phi = torch.randn(n, c, generator=g, dtype=D) * 0.7
    A = torch.randn(c, c, generator=g, dtype=D) * 0.4
    log_H = A + A.T
    W = torch.randn(c, c, c, generator=g, dtype=D)
    log_T = sum(W.permute(p) for p in itertools.permutations(range(3))) / 6 + potts_triangle(c, 1.0)
    pairs = lat.edge_index[:, lat.edge_index[0] < lat.edge_index[1]].T.tolist()
    exact = _brute_force(n, log_phi, pairs, log_H, lat.triangles.T.tolist(), log_T)
    ys = sample_triangle_mrf(lat.edge_index, lat.triangles, log_phi, log_H, log_T, num_samples=40, burn_in=20,
                             thin=2, generator=torch.Generator().manual_seed(1),
                             colors=lat.colors if given_colors else None, num_chains=3000)
    assert ys.shape == (40, 3000, n)
    emp = torch.nn.functional.one_hot(ys.reshape(-1, n), c).to(D).mean(0)
    # 120k correlated draws: a standard error of a few 1e-3
    torch.testing.assert_close(emp, exact, atol=0.015, rtol=0)
    # the triangle term matters here: the model without it is measurably different
    no_tri = _brute_force(n, log_phi, pairs, log_H, [], torch.zeros(c, c, c, dtype=D))
    assert (no_tri - exact).abs().max() > 0.05


def test_sampler_is_seeded_and_checks_its_inputs():
    lat = triangular_lattice(3, 3)
    c = 2
    log_phi = torch.zeros(9, c, dtype=D)
    log_H, log_T = torch.zeros(c, c, dtype=D), potts_triangle(c, 0.8)

    def run(seed):
        return sample_triangle_mrf(lat.edge_index, lat.triangles, log_phi, log_H, log_T, 3, 5, 2,
                                   generator=torch.Generator().manual_seed(seed), colors=lat.colors)

    assert run(4).shape == (3, 9) and torch.equal(run(4), run(4)) and not torch.equal(run(4), run(5))
    bad = torch.zeros(9, dtype=torch.long)
    with pytest.raises(GBPNError, match="colouring"):
        sample_triangle_mrf(lat.edge_index, lat.triangles, log_phi, log_H, log_T, 1, 1, 1, colors=bad)
    with pytest.raises(GBPNError, match="symmetric"):
        sample_triangle_mrf(lat.edge_index, lat.triangles, log_phi, log_H, torch.randn(c, c, c, dtype=D), 1, 1, 1)


def test_make_triangle_mrf():
    data = make_triangle_mrf(6, 7, num_classes=3, pair_strength=0.2, triangle_strength=1.5, num_samples=2,
                             burn_in=10, thin=2, seed=3)
    assert data.num_nodes == 42 and data.y.shape == (42,) and data.y_samples.shape == (2, 42)
    assert data.triangle_index.shape == (3, 60) and data.true_T.shape == (3, 3, 3)
    assert torch.equal(data.y, make_triangle_mrf(6, 7, 3, 0.2, 1.5, num_samples=2, burn_in=10, thin=2, seed=3).y)
    field = angular_field(data.x.double(), 3, 1.0)
    assert field.shape == (42, 3) and torch.allclose(field.abs().max(), torch.tensor(1.0, dtype=D), atol=0.2)
