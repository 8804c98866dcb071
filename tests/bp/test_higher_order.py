"""Gradients of every order through the fused message kernel and the BP layer (issue 12, item 2)."""
import torch

from gbpn import BeliefPropagation
from gbpn.bp.functional import log_matmul_exp, log_normalize, normalized_message

from conftest import undirected


def _reference(v, log_H):
    return log_normalize(log_matmul_exp(v, log_H))  # plain autograd ops, differentiable to any order


def test_gradgradcheck_of_the_message_kernel():
    torch.manual_seed(0)
    v = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    log_H = torch.randn(3, 3, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradgradcheck(normalized_message, (v, log_H))
    # third order as well: the backward of the backward is differentiable again
    first = lambda v, h: torch.autograd.grad((normalized_message(v, h) ** 2).sum(), (v, h), create_graph=True)  # noqa: E731
    assert torch.autograd.gradgradcheck(first, (v, log_H))


def test_torch_func_hessian_equals_the_plain_autograd_one():
    torch.manual_seed(1)
    v, log_H = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    w = torch.randn(5, 4, dtype=torch.float64)
    fused = torch.func.hessian(lambda v: (normalized_message(v, log_H) * w).sum())(v)
    plain = torch.func.hessian(lambda v: (_reference(v, log_H) * w).sum())(v)
    torch.testing.assert_close(fused, plain)


def test_hessian_vector_product_through_bp():
    """A Hessian-vector product through BeliefPropagation equals that of the plain E x c x c form."""
    torch.manual_seed(2)
    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3)])
    log_phi = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    layer = BeliefPropagation(3, num_steps=3).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(3, 3, dtype=torch.float64))
    target = torch.tensor([0, 2, 1, 1])

    def loss(phi):
        return torch.nn.functional.nll_loss(layer(phi, ei, known_labels=target,
                                                  known_mask=torch.tensor([True, False, False, False])), target)

    assert torch.autograd.gradgradcheck(loss, (log_phi,))
    vec = torch.randn_like(log_phi)
    (g,) = torch.autograd.grad(loss(log_phi), log_phi, create_graph=True)
    (hvp,) = torch.autograd.grad(g, log_phi, vec)
    # central differences of the gradient along vec
    eps = 1e-6
    gp = torch.autograd.grad(loss(log_phi + eps * vec), log_phi)[0]
    gm = torch.autograd.grad(loss(log_phi - eps * vec), log_phi)[0]
    torch.testing.assert_close(hvp, (gp - gm) / (2 * eps), atol=1e-7, rtol=1e-5)
    # and torch.func.grad, which used to raise on the fused kernel, gives the same gradient
    torch.testing.assert_close(torch.func.grad(loss)(log_phi.detach()), g.detach())
