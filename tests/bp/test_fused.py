"""The fused numba BP kernels (gbpn.bp.backends.cpu_fused) against the eager path, value and gradient."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from conftest import FUSED_SKIP, num_threads, random_graph, undirected

import gbpn.bp.backends._numba.runtime as runtime
import gbpn.bp.backends.cpu_fused as fused
import gbpn.graph.layouts as layouts
from gbpn import memory
from gbpn.memory import HUGE_MIN
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.reverse import reverse_edge_index

pytestmark = pytest.mark.skipif(FUSED_SKIP is not None, reason=str(FUSED_SKIP))

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _close(actual, expected, dtype=None):
    """Equal to ``TOL`` of ``dtype`` (default: the expected one's), relative to the larger of 1 and the largest entry (two float32
    implementations round differently, and gradients summed over many steps and edges grow)."""
    tol = TOL[dtype or expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * max(1.0, float(expected.detach().abs().max())))


def _both(layer, inputs, kw, params, seed=0):
    """Beliefs, residuals, messages and the gradients of a random linear loss on both kernels."""
    out = {}
    for kernel in ("eager", "fused"):
        log_b, res, msg = layer(*inputs, kernel=kernel, return_residuals=True, return_messages=True, **kw)
        assert (layer.last_backend == "eager") == (kernel == "eager")
        g = torch.Generator().manual_seed(seed)
        loss = (log_b * torch.randn(log_b.shape, generator=g, dtype=log_b.dtype)).sum() + \
               (msg * torch.randn(msg.shape, generator=g, dtype=msg.dtype)).sum()
        out[kernel] = (log_b, res, msg, torch.autograd.grad(loss, params))
    return out["eager"], out["fused"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("weights", [False, True])
def test_kept_messages_give_the_eager_gradients(dtype, weights, monkeypatch):
    """Opted in (``KEEP_MESSAGES_FRACTION`` > 0), from ``_BLAS_CLASSES`` classes on an undamped training
    forward keeps every step's messages and normalisers and the backward reads them instead of
    recomputing the product: the same values and gradients as the eager path (and the recompute)."""
    n, c = 50, 12
    ei = random_graph(n, 0.2, seed=4)
    g = torch.Generator().manual_seed(2)
    layer = BeliefPropagation(c, num_steps=4).to(dtype)
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
    phi = torch.randn(n, c, generator=g, dtype=dtype).requires_grad_()
    labels, known = torch.randint(0, c, (n,), generator=g), torch.rand(n, generator=g) < 0.3
    mw = torch.rand(ei.size(1), generator=g, dtype=dtype) * 2 if weights else None
    kw = dict(known_labels=labels, known_mask=known, message_weight=mw)
    kept = []
    keeps = fused.keeps_messages
    # the calls of this graph only (c = 12): a first float32 call also runs the kernels' self-test
    monkeypatch.setattr(fused, "keeps_messages",
                        lambda *a: kept.append(keeps(*a)) or kept[-1] if a[2] == c else keeps(*a))
    for fraction in (0.25, 0.0):  # kept, then recomputed (the default)
        monkeypatch.setattr(fused, "KEEP_MESSAGES_FRACTION", fraction)
        with num_threads(3):
            eager, fast = _both(layer, (phi, ei), kw, [phi, layer.coupling.weight])
        for a, b in zip(eager[:3] + eager[3], fast[:3] + fast[3]):
            _close(b, a)
    assert kept == [True, False]


@pytest.mark.parametrize("c, pairs", [(12, 30000), (5, 60000)])
def test_fused_equals_eager_on_a_graph_beyond_the_cache(c, pairs):
    """Messages past ``_PREFETCH_MIN`` numbers: the kernels prefetch the reverse messages and stream
    the saved cavities and the cavity gradients past the cache; the K saved cavity arrays pass
    ``HUGE_MIN`` bytes: they live in a huge-page mapping. c = 12: edge-major chunks (cavities saved
    as rows); c = 5: class-major chunks (saved as one class-major block per chunk)."""
    from gbpn.bp.backends._numba.fused_kernels import _PREFETCH_MIN

    n = 3000
    g = torch.Generator().manual_seed(5)
    u, v = torch.randint(0, n, (2, pairs), generator=g)
    keep = u != v
    ei = torch.unique(torch.stack([torch.minimum(u, v)[keep], torch.maximum(u, v)[keep]]), dim=1)
    ei = torch.cat([ei, ei.flip(0)], 1)
    assert ei.size(1) * c >= _PREFETCH_MIN and 3 * ei.size(1) * c * 8 >= HUGE_MIN
    layer = BeliefPropagation(c, num_steps=3).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
    phi = torch.randn(n, c, generator=g, dtype=torch.float64).requires_grad_()
    labels, known = torch.randint(0, c, (n,), generator=g), torch.rand(n, generator=g) < 0.3
    kw = dict(rev_index=reverse_edge_index(ei, n), known_labels=labels, known_mask=known)
    eager, fast = _both(layer, (phi, ei), kw, [phi, layer.coupling.weight])
    for a, b in zip(eager[:3] + eager[3], fast[:3] + fast[3]):
        _close(b, a)
    first = [t.clone() for t in fast[:3] + fast[3]]
    del fast
    # that call's step buffers are free now: the next call gets them back from the pool, holding
    # the last call's numbers (they are written whole before they are read), and gives the same
    # result bit for bit
    mapped = len(memory.POOL._maps)
    again = _both(layer, (phi, ei), kw, [phi, layer.coupling.weight])[1]
    assert len(memory.POOL._maps) == mapped
    for a, b in zip(first, again[:3] + again[3]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("carry", [False, True])
def test_edge_rows_do_not_depend_on_where_an_unused_array_lies(dtype, carry):
    """The edge-major backward chunk (``_back_rows``) is passed empty placeholders for what it does
    not use (here the kept messages ``M_t``; ``D`` without ``carry``). Placed so that the rows it
    would read cover its tau scratch (where the heap might put them), the results are the same bit
    for bit: the loop that writes tau and sums does not test the placeholder's rows for overlap and
    fall back to the scalar loop (another order of the sum; CI saw two calls differ so)."""
    from gbpn.bp.backends._numba.fused_kernels import _CHUNK, _back_rows

    c, E, n_nodes = 12, 600, 50
    r = np.random.default_rng(1)
    C = (r.random((E, c)) + 0.1).astype(dtype)
    dst, rev = r.integers(0, n_nodes, E), r.permutation(E)
    gz, Gv_next = r.standard_normal((n_nodes, c)).astype(dtype), r.standard_normal((E, c)).astype(dtype)
    H = (r.random((c, c)) + 0.5).astype(dtype)
    D0 = r.standard_normal((E, c)).astype(dtype)

    def run(overlap):
        big = np.zeros(E * c + 2 * _CHUNK * c, dtype)
        M_t = big[:0].reshape(0, c)  # its row k would start at big + k c
        tau_at = 100 * c if overlap else E * c  # rows 100.. of M_t would cover tau
        if not overlap:
            M_t = np.empty((0, c), dtype)
        tauW = big[tau_at:tau_at + _CHUNK * c].reshape(_CHUNK, c)
        D = D0.copy() if carry else M_t
        cavW, PW, qW = (np.zeros((_CHUNK, c), dtype) for _ in range(3))
        ct, gl, Gv_cur = np.zeros((c, c), dtype), np.zeros((c, c)), np.zeros((E, c), dtype)
        for k0 in range(64, 300, 37):
            _back_rows(k0, 37, C, M_t, np.empty(0, dtype), cavW, PW, tauW, qW, ct, gl, dst, rev, np.empty(0, dtype),
                       gz, Gv_next, Gv_cur, D, H, H.T.copy(), False, carry, False, dtype(1))
        return Gv_cur, gl

    for a, b in zip(run(False), run(True)):
        assert np.array_equal(a, b)


def test_tau_scratch_starts_a_block_into_its_allocation():
    """LLVM's other run-time test compares the row a loop writes with the rows it reads a few vectors
    before it: tau's scratch starts one zeroed block into its own allocation, so that no other
    array's row can lie there (and the vectorised sum always runs, whatever the heap's layout)."""
    from gbpn.bp.backends._numba.fused_kernels import _CHUNK, _back_scratch

    for dtype in (np.float32, np.float64):
        tau = _back_scratch(1, 3, _CHUNK, np.zeros((1, 1), dtype))[2]
        assert tau.flags.c_contiguous and not tau.any()
        assert tau.ctypes.data - tau.base.data >= 3 * _CHUNK * tau.itemsize >= 1024


def test_kernels_call_no_separately_compiled_function():
    """Every numba function the cached kernels call is inlined: a separately compiled callee exists
    twice in a process that compiled the kernels (its own copy, which the JIT links the call to,
    and the one inside the kernel, re-optimised), and a process that loads the kernels from numba's
    cache runs the other copy, so the first run on a machine differed from later ones in the last
    bit (float64 gradients at c = 47)."""
    from numba.core.caching import NullCache

    import gbpn.bp.backends._numba.binary_kernels as binary_kernels
    import gbpn.bp.backends._numba.fused_kernels as fused_kernels

    for module in (fused_kernels, binary_kernels):
        for name, f in vars(module).items():
            if hasattr(f, "targetoptions") and f.__module__ == module.__name__:
                entry = not isinstance(f._cache, NullCache)  # the kernels Python calls (GIL released)
                assert entry == bool(f.targetoptions.get("nogil")), name
                assert entry or f.targetoptions.get("inline") == "always", name


_GRADIENT_SCRIPT = """
import hashlib, torch
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.reverse import reverse_edge_index
n, c = 300, 47
g = torch.Generator().manual_seed(0)
u, v = torch.randint(0, n, (2, 1500), generator=g)
ei = torch.unique(torch.stack([torch.minimum(u, v), torch.maximum(u, v)])[:, u != v], dim=1)
ei = torch.cat([ei, ei.flip(0)], 1)
layer = BeliefPropagation(c, num_steps=4).double()
with torch.no_grad():
    layer.coupling.weight.copy_(torch.randn(c, c, generator=g))
phi = torch.randn(n, c, generator=g, dtype=torch.float64).requires_grad_()
log_b = layer(phi, ei, rev_index=reverse_edge_index(ei, n), kernel="fused")
(grad,) = torch.autograd.grad((log_b * torch.randn(n, c, generator=g, dtype=torch.float64)).sum(), [phi])
print(hashlib.sha1(grad.numpy().tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_a_process_that_loads_the_kernels_from_the_cache_computes_what_the_compiling_one_did(tmp_path):
    """The first process compiles the kernels into an empty numba cache, the second loads them from
    it: the same gradients bit for bit (c = 47, float64; the edge-major backward chunk)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = [subprocess.run([sys.executable, "-c", _GRADIENT_SCRIPT], env=env, capture_output=True, text=True,
                          check=True).stdout for _ in range(2)]
    assert any(tmp_path.rglob("*.nbi")) and len(out[0].strip()) == 40
    assert out[0] == out[1]


def test_fused_inference_equals_eager_and_stops_at_the_same_step():
    n, c = 60, 4
    ei = random_graph(n, 0.08, seed=3)
    layer = BeliefPropagation(c, num_steps=100, damping=0.2, tol=1e-6).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(0.5 * torch.randn(c, c, generator=torch.Generator().manual_seed(0)))
        # seeded: with a residual a rounding error away from tol, the two paths may stop a step apart
        phi = torch.randn(n, c, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        eager = layer(phi, ei, kernel="eager", return_residuals=True, return_messages=True)
        fast = layer(phi, ei, kernel="fused", return_residuals=True, return_messages=True)
    assert layer.last_backend != "eager"
    assert 1 < fast[1].numel() < 100 and fast[1].numel() == eager[1].numel()
    for a, b in zip(eager, fast):
        torch.testing.assert_close(b, a, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_hub_with_many_peaked_messages(dtype):
    """A star of 400 leaves with a strong coupling: the hub's belief multiplies 400 messages (products
    of many at a time must not underflow) and leaf beliefs are far below float32's normal range.
    Compared with the eager path in float64: in float32 the fused kernel is the more accurate one
    (the eager log-domain float32 beliefs are off by 2e-3 here, the fused ones by 1e-4)."""
    leaves = 400
    ei = undirected([(0, i) for i in range(1, leaves + 1)] + [(i, i + 1) for i in range(1, leaves, 2)])
    c = 3
    log_H = torch.tensor([[8.0, -8.0, 0.0], [-8.0, 8.0, 0.0], [0.0, 0.0, 1.0]])
    phi = torch.randn(leaves + 1, c, generator=torch.Generator().manual_seed(0), dtype=torch.float64).mul(3)
    results = []
    for kernel, dt in (("eager", torch.float64), ("fused", dtype)):
        layer = BeliefPropagation(c, num_steps=4, learn_coupling=False, coupling_init=log_H.exp()).to(dt)
        x = phi.to(dt).requires_grad_()
        log_b, msg = layer(x, ei, kernel=kernel, return_messages=True)
        assert (layer.last_backend == "eager") == (kernel == "eager")
        (grad,) = torch.autograd.grad((log_b * torch.linspace(-1, 1, c, dtype=dt)).sum(), x)
        results.append((log_b, msg, grad))
    assert float(results[1][0].detach().min()) < -200  # beliefs whose exp() is far below any float's normal range
    for a, b in zip(*results):
        _close(b.double(), a, dtype)


def test_double_backward_through_the_fused_kernel():
    """create_graph differentiates the same steps again on the eager functions: exact Hessian-vector products."""
    ei = undirected([(0, 1), (1, 2), (2, 0), (2, 3)])
    log_phi = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    layer = BeliefPropagation(3, num_steps=3, damping=0.3, kernel="fused").double()
    with torch.no_grad():
        layer.coupling.weight.normal_()
    ew = torch.tensor([1.0, 0.5, 2.0, 1.5] * 2, dtype=torch.float64)  # undirected() lists the reverses second
    assert torch.autograd.gradgradcheck(lambda p: layer(p, ei, edge_weight=ew), (log_phi,))
    assert layer.last_backend != "eager"


def test_auto_falls_back_where_the_fused_kernel_does_not_apply():
    ei = undirected([(0, 1), (1, 2)])
    layer = BeliefPropagation(2, num_steps=2)
    phi = torch.randn(3, 2)
    layer(phi, ei)
    assert layer.last_backend != "eager"
    with torch.no_grad():
        layer(phi, ei, edge_chunk=2)
    assert layer.last_backend == "eager"
    with pytest.raises(ValueError, match="edge_chunk"):
        with torch.no_grad():
            layer(phi, ei, edge_chunk=2, kernel="fused")
    torch.func.grad(lambda p: layer(p, ei).sum())(phi)  # torch.func: eager operations
    assert layer.last_backend == "eager"
    wide = BeliefPropagation(2, num_steps=2, learn_coupling=False, coupling_init=torch.tensor([[1.0, 1e-30], [1e-30, 1.0]]))
    wide(phi, ei)  # log H spreads 69: the linear-domain kernel could overflow float32
    assert wide.last_backend == "eager"
    with pytest.raises(ValueError, match="kernel must be"):
        BeliefPropagation(2, kernel="numba")
    assert "kernel='auto'" in repr(layer)


def test_without_numba_the_layer_warns_once_and_runs_eagerly(monkeypatch):
    def missing():
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(fused, "_kernels", missing)
    monkeypatch.setattr(runtime, "_state", {})
    layer = BeliefPropagation(2, num_steps=2)
    ei, phi = undirected([(0, 1), (1, 2)]), torch.randn(3, 2)
    with pytest.warns(RuntimeWarning, match="numba"):
        out = layer(phi, ei)
    assert layer.last_backend == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only the first call warns
        torch.testing.assert_close(layer(phi, ei), out)
    with pytest.raises(ValueError, match="numba"):
        layer(phi, ei, kernel="fused")


def test_csr_layout_is_cached_per_graph_and_redone_after_an_in_place_change():
    ei = random_graph(20, 0.3, seed=5)
    rev = reverse_edge_index(ei, 20)
    first = layouts.csr_layout(ei, rev, 20)
    assert layouts.csr_layout(ei, rev, 20) is first
    dst = ei[1, first.perm] if first.perm is not None else ei[1]
    assert bool((dst[1:] >= dst[:-1]).all()) and torch.equal(torch.from_numpy(first.dst), dst)
    # the reverse of every CSR edge, read through the layout, is the reverse edge
    src = torch.from_numpy(first.src)
    assert torch.equal(src[torch.from_numpy(first.rev)], dst)
    ei.add_(0)  # bumps the version counter
    second = layouts.csr_layout(ei, rev, 20)
    assert second is not first
    # a write through .data bumps nothing: clear_graph_caches is the documented way to say so
    ei.data.add_(0)
    assert layouts.csr_layout(ei, rev, 20) is second
    from gbpn import clear_graph_caches

    clear_graph_caches()
    assert layouts.csr_layout(ei, rev, 20) is not second


def test_large_graph_layouts_renumber_the_nodes_for_locality(monkeypatch):
    """From ``REORDER_MIN_NODES`` nodes on, the layout's nodes are a permutation of the graph's,
    every CSR edge is a graph edge under it, a node's incoming edges are sorted by source, and the
    reverses still pair up; below it the graph's own numbering is kept."""
    side = 8  # an 8 x 8 grid, its nodes numbered at random: RCM finds the grid's locality again
    n = side * side
    i = torch.arange(n).view(side, side)
    pairs = torch.cat([torch.stack([i[:, :-1].flatten(), i[:, 1:].flatten()]),
                       torch.stack([i[:-1].flatten(), i[1:].flatten()])], 1)
    ei = torch.randperm(n, generator=torch.Generator().manual_seed(7))[torch.cat([pairs, pairs.flip(0)], 1)]
    rev = reverse_edge_index(ei, n)
    assert layouts.csr_layout(ei, rev, n).order is None  # far below the default threshold
    monkeypatch.setattr(layouts, "REORDER_MIN_NODES", n)
    lay = layouts.csr_layout(ei, rev, n)
    assert torch.equal(torch.sort(lay.order).values, torch.arange(n)) and torch.equal(lay.order[lay.rank], torch.arange(n))
    src, dst = torch.from_numpy(lay.src), torch.from_numpy(lay.dst)
    assert torch.equal(lay.order[src], ei[0, lay.perm]) and torch.equal(lay.order[dst], ei[1, lay.perm])
    assert bool(((dst[1:] > dst[:-1]) | ((dst[1:] == dst[:-1]) & (src[1:] > src[:-1]))).all())
    assert torch.equal(src[torch.from_numpy(lay.rev)], dst)
    # neighbours end up close: |i - j| at most about the grid's side, against ~n/3 at random
    assert int((src - dst).abs().max()) <= 2 * side < float((ei[0] - ei[1]).abs().float().mean())
    x = torch.randn(n, 3)
    assert torch.equal(lay.from_layout(lay.to_layout(x)), x)


def test_small_kernel_calls_run_on_fewer_threads():
    """Handing a small call's blocks to other threads costs more than it saves: each thread gets at
    least the least work per thread, however many threads torch has."""
    import gbpn.bp.backends.cpu_binary as binary

    old = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        per = runtime.MIN_WORK_PER_THREAD
        assert [runtime._threads(w) for w in (0, per - 1, per, 2 * per, 100 * per)] == [1, 1, 1, 2, 3]
        pairs = binary.MIN_PAIRS_PER_THREAD
        assert [runtime._threads(w, pairs) for w in (per, pairs - 1, 2 * pairs)] == [1, 1, 2]
    finally:
        torch.set_num_threads(old)


_WARM_UP_SCRIPT = """
import json
import torch
import gbpn.bp.backends._numba.binary_kernels as b
import gbpn.bp.backends._numba.fused_kernels as k
from gbpn.bp.layer import warm_up
torch.manual_seed(5)
state = torch.get_rng_state()
kernels = (k.forward_step, k.backward_step, b.messages, b.backward_pairs)
before = [len(f.signatures) for f in kernels]
warm_up(3)
warm_up(2)
print(json.dumps([before, [len(f.signatures) for f in kernels], torch.equal(state, torch.get_rng_state())]))
"""


@pytest.mark.slow
def test_warm_up_loads_the_training_and_inference_kernels_and_keeps_the_random_state():
    """In a fresh process :func:`gbpn.bp.layer.warm_up` runs the fused and the two-class kernels, forward
    and backward, so that a timed run does not load them; torch's global generator is not drawn from."""
    out = subprocess.run([sys.executable, "-c", _WARM_UP_SCRIPT], capture_output=True, text=True, check=True)
    before, after, same_state = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == [0, 0, 0, 0] and all(n >= 1 for n in after)
    assert same_state
