"""The Triton BP inference kernels (gbpn.bp.backends.triton_kernels, behind the cuda_triton backend) against the eager reference step.

On a GPU they run through ``BeliefPropagation`` on CUDA. Without one, where triton is installed
(the test extra brings it), they run in Triton's interpreter on CPU tensors: tests/conftest.py sets
``TRITON_INTERPRET=1`` before anything imports triton (``@triton.jit`` and triton's own library
read it when they are defined), and the tests call the backend's ``triton_bp`` directly, at small
sizes, with small blocks so that a step spans several programs. Dispatch is unchanged: on the CPU
it declines the Triton backend ("runs on CUDA"). Elsewhere the tests skip with the reason.
"""
import importlib.util

import numpy as np
import pytest
import torch

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.functional import clamp_log_potential, log_normalize
from gbpn.graph.reverse import reverse_edge_index

CUDA = torch.cuda.is_available()
TRITON = importlib.util.find_spec("triton") is not None
NO_TRITON = "triton is not installed (pip install -e '.[test]' brings it; CUDA builds of torch ship it)"
if TRITON:  # the kernel module imports triton
    from gbpn.bp.backends.triton_kernels import PRODUCTS, _product
else:
    PRODUCTS, _product = (), None
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CASES = [(dtype, damping, mw, c) for dtype in (torch.float64, torch.float32) for damping in (0.0, 0.4)
         for mw in (False, True) for c in (2, 7, 40)]
# In the interpreter (seconds per case): each product, dtype, damping, edge weights and class count
# (2, one padded to 8, one padded to 32) at least once, and every pair of the five options together.
# None is the automatic product: "loop", or "dot" for float32 from 16 classes on.
F64, F32 = torch.float64, torch.float32
INTERPRETED = [(F64, 0.0, False, 2, None), (F64, 0.4, True, 5, "loop"), (F64, 0.0, False, 20, "broadcast"),
               (F64, 0.0, True, 20, None), (F32, 0.4, True, 20, None), (F32, 0.0, False, 5, "dot"),
               (F32, 0.4, True, 2, "broadcast"), (F32, 0.4, False, 5, "loop"), (F32, 0.4, True, 5, "broadcast"),
               (F32, 0.0, True, 2, "dot")]


def _graph(n, p, seed):
    """An Erdos-Renyi graph, directed edges in random order (not CSR), and its reverse index."""
    g = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, 1).nonzero().T
    ei = torch.cat([upper, upper.flip(0)], 1)
    ei = ei[:, torch.randperm(ei.size(1), generator=g)]
    return ei, reverse_edge_index(ei, n)


def _inputs(dtype, c, mw, seed=0, n=50, p=0.12):
    ei, rev = _graph(n, p, seed)
    g = torch.Generator().manual_seed(seed + 1)
    log_self = torch.randn(n, c, generator=g, dtype=dtype) * 2
    H = torch.randn(c, c, generator=g, dtype=dtype)
    labels, known = torch.randint(0, c, (n,), generator=g), torch.rand(n, generator=g) < 0.3
    weight = torch.rand(ei.size(1), generator=g, dtype=dtype) * 2 if mw else None
    return log_self, ei, rev, (H + H.T).exp(), labels, known, weight


def _close(actual, expected):
    tol = TOL[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * max(1.0, float(expected.abs().max())))


def check_case(dtype, damping, mw, c, product, device, blocks=None, size=(50, 0.12)):
    """The kernels equal the eager path: beliefs, residuals, messages; evidence stays clamped."""
    from gbpn.bp.backends.triton_kernels import triton_bp
    from gbpn.graph.layouts import device_csr

    log_self, ei, rev, H, labels, known, weight = _inputs(dtype, c, mw, n=size[0], p=size[1])
    layer = BeliefPropagation(c, num_steps=6, damping=damping, coupling_init=H, learn_coupling=False).to(dtype)
    with torch.no_grad():
        expected = layer(log_self, ei, rev_index=rev, known_labels=labels, known_mask=known, message_weight=weight,
                         return_residuals=True, return_messages=True, kernel="eager")
    log_self, ei, rev, labels, known = (t.to(device) for t in (log_self, ei, rev, labels, known))
    layout = device_csr(ei, rev, log_self.size(0))
    clamp = clamp_log_potential(labels, c, dtype)
    phi = torch.where(known.view(-1, 1), clamp, log_normalize(log_self))
    csr_w = None if weight is None else weight.to(device)[layout.perm]
    b, res, msg = triton_bp(phi, layer.log_H.to(dtype).to(device), layout, 6, damping, None, known, clamp, csr_w,
                            True, True, blocks=blocks, product=product)
    got = (b, torch.stack(res), msg.new_empty(msg.shape).index_copy(0, layout.perm, msg))
    for a, e in zip(got, expected):
        _close(a.cpu(), e)
    assert torch.equal(b[known].argmax(1).cpu(), labels[known].cpu())


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the interpreter test covers the kernels without one)")
@pytest.mark.parametrize("product", [None, *PRODUCTS])
@pytest.mark.parametrize("dtype,damping,mw,c", CASES)
def test_triton_equals_eager_on_cuda(dtype, damping, mw, c, product):
    if product == "dot" and dtype == torch.float64:
        pytest.skip("tl.dot runs float32 only")
    check_case(dtype, damping, mw, c, product, "cuda")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_layer_runs_the_triton_kernels_on_cuda(dtype):
    log_self, ei, rev, H, labels, known, _ = _inputs(dtype, 7, False)
    layer = BeliefPropagation(7, num_steps=4, damping=0.2, coupling_init=H, learn_coupling=False).to(dtype)
    kw = dict(known_labels=labels, known_mask=known, return_messages=True)
    with torch.no_grad():
        expected = layer(log_self, ei, kernel="eager", **kw)
        layer = layer.cuda()
        got = layer(log_self.cuda(), ei.cuda(), kernel="fused", **{k: v.cuda() if torch.is_tensor(v) else v
                                                                    for k, v in kw.items()})
    assert layer.last_backend != "eager"
    for a, e in zip(got, expected):
        _close(a.cpu(), e)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_auto_runs_triton_on_cuda_only_where_it_measured_faster():
    from gbpn.bp.dispatch import _TRITON_MAX_CLASSES

    for c in (_TRITON_MAX_CLASSES, _TRITON_MAX_CLASSES + 5):
        log_self, ei, rev, H, *_ = _inputs(torch.float32, c, False)
        layer = BeliefPropagation(c, coupling_init=H, learn_coupling=False).cuda()
        with torch.no_grad():
            layer(log_self.cuda(), ei.cuda(), rev_index=rev.cuda())
        assert layer.last_backend == ("cuda_triton" if c <= _TRITON_MAX_CLASSES else "eager")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_training_and_edge_weights_fall_back_with_a_reason():
    log_self, ei, rev, H, labels, known, _ = _inputs(torch.float32, 4, False)
    layer = BeliefPropagation(4, coupling_init=H).cuda()
    x = log_self.cuda().requires_grad_()
    with pytest.raises(ValueError, match="inference-only"):
        layer(x, ei.cuda(), rev_index=rev.cuda(), kernel="fused")
    layer(x, ei.cuda(), rev_index=rev.cuda()).sum().backward()  # auto: eager, and it trains
    assert layer.last_backend == "eager" and x.grad is not None
    with torch.no_grad(), pytest.raises(ValueError, match="edge weights"):
        layer(x, ei.cuda(), torch.ones(ei.size(1), device="cuda"), rev_index=rev.cuda(), kernel="fused")


def _interpreted():
    """Why the kernels cannot run in the interpreter here, or None."""
    if not TRITON:
        return NO_TRITON
    if CUDA:
        return "a GPU is here: test_triton_equals_eager_on_cuda runs the compiled kernels instead"
    from triton.runtime.interpreter import InterpretedFunction

    from gbpn.bp.backends import triton_kernels

    if not isinstance(triton_kernels._edge_kernel, InterpretedFunction):
        return ("triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it), so the "
                "kernels are compiled ones, which need a GPU")
    return None


INTERPRETER_SKIP = _interpreted()
interpreter = pytest.mark.skipif(INTERPRETER_SKIP is not None, reason=str(INTERPRETER_SKIP))


@pytest.mark.parametrize("dtype,damping,mw,c,product", INTERPRETED,
                         ids=lambda v: str(v).replace("torch.", "") if not isinstance(v, str) else v)
@interpreter
def test_triton_kernels_equal_eager_in_the_interpreter(dtype, damping, mw, c, product):
    with np.errstate(all="ignore"):  # masked lanes compute log(0) and 0/0 in NumPy
        # 24 nodes: a step spans several edge programs (16 edges) and node programs (8 nodes)
        check_case(dtype, damping, mw, c, product, "cpu", blocks=(16, 8), size=(24, 0.25))


@interpreter
def test_triton_self_test_passes_in_the_interpreter():
    """The self-test that guards the backend on a GPU (both products, every option) runs in the interpreter;
    dispatch on the CPU still declines the backend."""
    from gbpn.bp.backends.triton_kernels import _self_test

    with np.errstate(all="ignore"):
        for dtype in (torch.float32, torch.float64):
            _self_test(dtype, torch.device("cpu"))
    from gbpn.bp.backends.cuda_triton import CUDATriton

    log_self, ei, rev, H, *_ = _inputs(torch.float32, 2, False, n=8, p=0.5)
    layer = BeliefPropagation(2, coupling_init=H, learn_coupling=False)
    with torch.no_grad():
        assert CUDATriton().why_not(layer.problem(log_self, ei, rev_index=rev, kernel="fused")) == "runs on CUDA"


@pytest.mark.skipif(not TRITON, reason=NO_TRITON)
def test_the_automatic_product():
    assert [_product(c, torch.float32) for c in (2, 15, 16, 47)] == ["loop", "loop", "dot", "dot"]
    assert [_product(c, torch.float64) for c in (2, 47)] == ["loop", "loop"]
    assert set(PRODUCTS) == {"dot", "broadcast", "loop"}


def test_the_bp_layer_loads_without_triton():
    """Triton (a second or more to import) loads only where its kernels run, not with every BP layer."""
    import subprocess
    import sys

    code = "import sys, gbpn, gbpn.bp; gbpn.BeliefPropagation; assert 'triton' not in sys.modules, 'triton loaded'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
