import torch

from gbpn.bp.functional import aggregate, cavity, clamp_log_potential, log_matmul_exp, log_matmul_exp_dense, log_matmul_exp_weighted, log_normalize
from gbpn.bp.numerics import LOG_ZERO
from gbpn.graph.reverse import reverse_edge_index


def test_log_normalize_rows_sum_to_one():
    x = torch.randn(5, 4, dtype=torch.float64) * 30
    assert torch.allclose(log_normalize(x).exp().sum(-1), torch.ones(5, dtype=torch.float64))


def test_lean_product_equals_dense_form():
    g = torch.Generator().manual_seed(0)
    for c in (2, 3, 7, 40):
        v = torch.randn(50, c, generator=g, dtype=torch.float64) * 5
        log_H = torch.randn(c, c, generator=g, dtype=torch.float64)
        torch.testing.assert_close(log_matmul_exp(v, log_H), log_matmul_exp_dense(v, log_H))


def test_lean_product_survives_extreme_inputs():
    v = torch.tensor([[0.0, LOG_ZERO, LOG_ZERO], [500.0, -500.0, 0.0]])
    log_H = torch.tensor([[20.0, -20.0, 0.0], [-20.0, 20.0, 0.0], [0.0, 0.0, 20.0]])
    out = log_matmul_exp(v, log_H)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, log_matmul_exp_dense(v, log_H))


def test_weighted_product_equals_dense_form():
    g = torch.Generator().manual_seed(1)
    v = torch.randn(30, 4, generator=g, dtype=torch.float64)
    log_H = torch.randn(4, 4, generator=g, dtype=torch.float64)
    w = torch.rand(30, generator=g, dtype=torch.float64) * 2
    torch.testing.assert_close(log_matmul_exp_weighted(v, log_H, w), log_matmul_exp_dense(v, log_H, w))
    ones = torch.ones(30, dtype=torch.float64)
    torch.testing.assert_close(log_matmul_exp_weighted(v, log_H, ones), log_matmul_exp(v, log_H))


def test_reverse_edge_index_points_to_the_reverse_edge():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))
    ei = ei[:, perm]
    rev = reverse_edge_index(ei, 4)
    assert torch.equal(ei[0, rev], ei[1]) and torch.equal(ei[1, rev], ei[0])


def test_reverse_edge_index_rejects_asymmetric_and_duplicate_edges():
    import pytest

    with pytest.raises(ValueError, match="ToUndirected"):
        reverse_edge_index(torch.tensor([[0, 1], [1, 2]]), 3)
    with pytest.raises(ValueError, match="duplicate"):
        reverse_edge_index(torch.tensor([[0, 0, 1], [1, 1, 0]]), 2)


def test_cavity_removes_the_reverse_message():
    ei = torch.tensor([[0, 1], [1, 0]])
    rev = reverse_edge_index(ei, 2)
    log_b = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    log_m = torch.tensor([[0.5, 0.25], [0.125, 1.0]])  # messages 0->1 and 1->0
    out = cavity(log_b, log_m, ei[0], rev)
    assert torch.equal(out[0], log_b[0] - log_m[1])
    assert torch.equal(out[1], log_b[1] - log_m[0])


def test_aggregate_sums_incoming_messages_then_normalises():
    log_self = torch.zeros(3, 2)
    log_m = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    dst = torch.tensor([0, 0, 2])
    out = aggregate(log_self, log_m, dst)
    torch.testing.assert_close(out[0], log_normalize(torch.tensor([1.0, 2.0])))
    torch.testing.assert_close(out[1], log_normalize(torch.zeros(2)))


def test_clamp_log_potential_is_one_hot_in_log_space():
    out = clamp_log_potential(torch.tensor([2, 0]), 3)
    assert torch.equal(out.argmax(1), torch.tensor([2, 0]))
    assert torch.allclose(out.exp().sum(1), torch.ones(2))


def test_fused_normalized_message_equals_composition_in_value_and_gradient():
    from gbpn.bp.functional import normalized_message

    g = torch.Generator().manual_seed(2)
    v = (torch.randn(40, 5, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    v.data[0, 1:] = LOG_ZERO  # a clamped sender
    log_H = torch.randn(5, 5, generator=g, dtype=torch.float64)
    log_H = (log_H + log_H.T).requires_grad_(True)
    torch.testing.assert_close(normalized_message(v, log_H), log_normalize(log_matmul_exp_dense(v, log_H)))
    assert torch.autograd.gradcheck(normalized_message, (v, log_H), eps=1e-6, atol=1e-6)
