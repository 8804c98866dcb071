"""The Triton BP inference kernels (gbpn.bp.backends.cuda_triton) against the eager path.

On a GPU they run through ``BeliefPropagation`` on CUDA; without one, where triton is installed,
through Triton's interpreter on CPU tensors (in a subprocess: ``TRITON_INTERPRET`` is read when
the kernels are defined); elsewhere the tests skip with the reason.
"""
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.functional import clamp_log_potential, log_normalize
from gbpn.graph.reverse import reverse_edge_index
from gbpn.bp.backends.cuda_triton import PRODUCTS

CUDA = torch.cuda.is_available()
TRITON = importlib.util.find_spec("triton") is not None
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CASES = [(dtype, damping, mw, c) for dtype in (torch.float64, torch.float32) for damping in (0.0, 0.4)
         for mw in (False, True) for c in (2, 7, 40)]


def _graph(n, p, seed):
    """An Erdos-Renyi graph, directed edges in random order (not CSR), and its reverse index."""
    g = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, 1).nonzero().T
    ei = torch.cat([upper, upper.flip(0)], 1)
    ei = ei[:, torch.randperm(ei.size(1), generator=g)]
    return ei, reverse_edge_index(ei, n)


def _inputs(dtype, c, mw, seed=0):
    n = 50
    ei, rev = _graph(n, 0.12, seed)
    g = torch.Generator().manual_seed(seed + 1)
    log_self = torch.randn(n, c, generator=g, dtype=dtype) * 2
    H = torch.randn(c, c, generator=g, dtype=dtype)
    labels, known = torch.randint(0, c, (n,), generator=g), torch.rand(n, generator=g) < 0.3
    weight = torch.rand(ei.size(1), generator=g, dtype=dtype) * 2 if mw else None
    return log_self, ei, rev, (H + H.T).exp(), labels, known, weight


def _close(actual, expected):
    tol = TOL[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * max(1.0, float(expected.abs().max())))


def check_case(dtype, damping, mw, c, product, device):
    """The kernels equal the eager path: beliefs, residuals, messages; evidence stays clamped."""
    from gbpn.bp.backends.cuda_triton import triton_bp
    from gbpn.graph.layouts import device_csr

    log_self, ei, rev, H, labels, known, weight = _inputs(dtype, c, mw)
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
                            True, True, product=product)
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
    assert layer.last_kernel == "fused"
    for a, e in zip(got, expected):
        _close(a.cpu(), e)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_auto_runs_triton_on_cuda_only_where_it_measured_faster():
    from gbpn.bp.backends.cuda_triton import _TRITON_MAX_CLASSES

    for c in (_TRITON_MAX_CLASSES, _TRITON_MAX_CLASSES + 5):
        log_self, ei, rev, H, *_ = _inputs(torch.float32, c, False)
        layer = BeliefPropagation(c, coupling_init=H, learn_coupling=False).cuda()
        with torch.no_grad():
            layer(log_self.cuda(), ei.cuda(), rev_index=rev.cuda())
        assert layer.last_kernel == ("fused" if c <= _TRITON_MAX_CLASSES else "eager")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_training_and_edge_weights_fall_back_with_a_reason():
    log_self, ei, rev, H, labels, known, _ = _inputs(torch.float32, 4, False)
    layer = BeliefPropagation(4, coupling_init=H).cuda()
    x = log_self.cuda().requires_grad_()
    with pytest.raises(ValueError, match="inference-only"):
        layer(x, ei.cuda(), rev_index=rev.cuda(), kernel="fused")
    layer(x, ei.cuda(), rev_index=rev.cuda()).sum().backward()  # auto: eager, and it trains
    assert layer.last_kernel == "eager" and x.grad is not None
    with torch.no_grad(), pytest.raises(ValueError, match="edge weights"):
        layer(x, ei.cuda(), torch.ones(ei.size(1), device="cuda"), rev_index=rev.cuda(), kernel="fused")


@pytest.mark.skipif(CUDA or not TRITON, reason="runs where triton is installed and no GPU is (else the CUDA test)")
def test_triton_kernels_equal_eager_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("ok") == len(CASES) * 2


if __name__ == "__main__":  # the interpreter run of test_triton_kernels_equal_eager_in_the_interpreter
    import numpy as np

    np.seterr(all="ignore")  # masked lanes of the interpreted kernels compute log(0) and 0/0
    for product in (None, "broadcast"):  # the automatic choice (loop, or dot from 16 classes), and broadcast
        for case in CASES:
            check_case(*case, product, device="cpu")
            print("ok", product, *case, flush=True)
