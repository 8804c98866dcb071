import pytest
import torch
from conftest import brute_force_marginals

from gbpn.data import grid_graph, make_synthetic, neighbour_agreement, sample_mrf
from gbpn.data.mrf import DEFAULT_COUPLING, greedy_coloring


def test_grid_graph_shape_and_coordinates():
    ei, coords = grid_graph(4)
    assert ei.size(1) == 2 * 2 * 4 * 3 and coords.shape == (16, 2)
    assert coords.min() == -1 and coords.max() == 1
    d = (coords[ei[0]] - coords[ei[1]]).abs().sum(1)
    assert torch.allclose(d, torch.full_like(d, 2 / 3))  # only nearest neighbours


def test_greedy_coloring_is_proper():
    ei, _ = grid_graph(5)
    tri = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    for e, n in ((ei, 25), (tri, 3)):
        col = greedy_coloring(e, n)
        assert (col[e[0]] != col[e[1]]).all()


@pytest.mark.parametrize("c,method", [(2, "metropolis"), (3, "gibbs"), (2, "gibbs")])
def test_sampled_marginals_match_enumeration(c, method):
    ei, coords = grid_graph(3)  # 9 nodes: 2^9 or 3^9 configurations
    g = torch.Generator().manual_seed(0)
    log_phi = torch.randn(9, c, generator=g, dtype=torch.float64) * 0.7
    A = torch.randn(c, c, generator=g, dtype=torch.float64) * 0.5
    log_H = A + A.T
    und = ei[:, ei[0] < ei[1]].T.tolist()
    exact = brute_force_marginals(9, und, log_phi, log_H)
    n = 3000
    ys = sample_mrf(ei, log_phi, log_H, num_samples=n, burn_in=200, thin=2, method=method,
                    generator=torch.Generator().manual_seed(1))
    emp = torch.nn.functional.one_hot(ys, c).double().mean(0)
    # 5 standard errors, with room for autocorrelation between thinned samples
    tol = 5 * (exact * (1 - exact) / n).sqrt().max() * 1.5
    assert (emp - exact).abs().max() < tol


def test_negative_coupling_gives_more_disagreeing_neighbours():
    ei, coords = grid_graph(20)
    zero = torch.zeros(400, 2, dtype=torch.float64)
    pos = sample_mrf(ei, zero, torch.tensor([[0.4, -0.4], [-0.4, 0.4]], dtype=torch.float64), 5, 100, 10)
    neg = sample_mrf(ei, zero, torch.tensor([[-0.4, 0.4], [0.4, -0.4]], dtype=torch.float64), 5, 100, 10)
    agree_pos = sum(neighbour_agreement(ei, y) for y in pos) / 5
    agree_neg = sum(neighbour_agreement(ei, y) for y in neg) / 5
    assert agree_neg < 0.5 < agree_pos


def test_make_synthetic_is_seeded_and_uses_the_default_coupling():
    a = make_synthetic("mrf+", n=8, burn_in=20, thin=2, seed=5)
    b = make_synthetic("mrf+", n=8, burn_in=20, thin=2, seed=5)
    assert torch.equal(a.y_samples, b.y_samples) and a.y_samples.shape == (10, 64)
    assert torch.allclose(a.true_H, DEFAULT_COUPLING["mrf+"].float())
    assert not torch.equal(a.y_samples, make_synthetic("mrf+", n=8, burn_in=20, thin=2, seed=6).y_samples)


def test_progress_bar_leaves_the_samples_unchanged():
    quiet = make_synthetic("mrf+", n=6, num_samples=2, burn_in=5, thin=2, seed=1)
    shown = make_synthetic("mrf+", n=6, num_samples=2, burn_in=5, thin=2, seed=1, progress=True)
    assert torch.equal(quiet.y_samples, shown.y_samples)
