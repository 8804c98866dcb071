"""One equivalence test: every backend of the dispatch table, in every mode, computes the reference
step of :mod:`gbpn.bp.functional` (``log_messages`` then ``aggregate``, evidence pinned).

Backends: ``cpu_binary``, ``cpu_fused``, ``cuda_triton`` (on a GPU through the table; without one, where
triton is installed, its ``run`` in Triton's interpreter on CPU tensors: tests/conftest.py sets
``TRITON_INTERPRET=1``), ``eager``, ``pairs`` (in-place pair inference) and ``motif_eager`` (triangle
factors with :math:`T = 1`, which leave the pairwise beliefs as they are). Modes: training (gradients
compared too) and inference (no gradient: where the inference-only kernels run), damping and evidence,
edge weights, message weights, returned messages, edge chunks, renumbered nodes (the CPU layout of
large graphs), and the implicit backward (its fixed point and gradients against many unrolled
reference steps). A backend that declines a case says why (the test skips with its reasons).
"""
import importlib.util
import math

import pytest
import torch
from conftest import random_graph

from gbpn import BeliefPropagation
from gbpn.bp import explain_dispatch, run
from gbpn.bp.functional import aggregate, clamp_log_potential, log_messages, log_normalize
from gbpn.graph import layouts
from gbpn.graph.reverse import reverse_edge_index

BACKENDS = ["cpu_binary", "cpu_fused", "cuda_triton", "eager", "pairs", "motif_eager"]
CASES = {  # name: options of the case
    "plain": {},
    "damped-evidence": dict(damping=0.3, evidence=True),
    "edge-weight": dict(edge_weight=True, evidence=True),
    "message-weight": dict(message_weight=True, damping=0.2),
    "messages": dict(return_messages=True, evidence=True),
    "edge-chunk": dict(edge_chunk=7, evidence=True),
    "renumbered": dict(renumber=True, evidence=True),
    "float32": dict(dtype=torch.float32, evidence=True),
    "blas-classes": dict(classes=12, damping=0.2, evidence=True, message_weight=True),  # cpu_fused's BLAS products
    "implicit": dict(implicit=True, evidence=True),
}
TOL = {torch.float64: 1e-9, torch.float32: 2e-5}
CUDA = torch.cuda.is_available()
TRITON = importlib.util.find_spec("triton") is not None


def reference(phi, ei, rev, log_H, steps, damping, ew, mw, known, labels):
    """``steps`` reference steps (:mod:`gbpn.bp.functional`): log-beliefs and log-messages."""
    c = phi.size(1)
    clamp = None if known is None else clamp_log_potential(torch.where(known, labels, 0), c, phi.dtype)

    def pin(b):
        return b if clamp is None else torch.where(known.view(-1, 1), clamp, b)

    base = pin(log_normalize(phi))
    b, m = base, phi.new_full((ei.size(1), c), -math.log(c))
    for _ in range(steps):
        m = log_messages(b, m, ei[0], rev, log_H, damping, ew, mw)
        b = pin(aggregate(base, m, ei[1], mw))
    return b, m


def _inputs(case, c, seed=0):
    dtype = case.get("dtype", torch.float64)
    n = 30
    ei = random_graph(n, 0.2, seed=seed)
    rev = reverse_edge_index(ei, n)
    g = torch.Generator().manual_seed(seed)
    # milder for the implicit case: BP contracts, so its fixed point exists and many steps reach it
    weight = (0.25 if case.get("implicit") else 0.6) * torch.randn(c, c, generator=g, dtype=dtype)
    phi = torch.randn(n, c, generator=g, dtype=dtype)
    known = labels = ew = mw = None
    if case.get("evidence"):
        labels, known = torch.randint(0, c, (n,), generator=g), torch.rand(n, generator=g) < 0.3
    if case.get("edge_weight"):
        half = torch.rand(ei.size(1), generator=g, dtype=dtype) + 0.5
        ew = torch.minimum(half, half[rev])
    if case.get("message_weight"):
        mw = torch.rand(ei.size(1), generator=g, dtype=dtype) * 2
    return dict(phi=phi, ei=ei, rev=rev, weight=weight, known=known, labels=labels, ew=ew, mw=mw)


def _layer(case, c, x):
    implicit = case.get("implicit")
    layer = BeliefPropagation(c, num_steps=5, damping=case.get("damping", 0.0), backward="implicit" if implicit
                              else "unroll", tol=1e-12 if implicit else None, max_steps=400 if implicit else None)
    layer = layer.to(x["phi"].dtype)
    with torch.no_grad():
        layer.coupling.weight.copy_(x["weight"])
    return layer


def _loss(log_b, msg, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = (log_b * torch.randn(log_b.shape, generator=g, dtype=log_b.dtype)).sum()
    if msg is not None:
        out = out + (msg * torch.randn(msg.shape, generator=g, dtype=msg.dtype)).sum()
    return out


def _run_backend(backend, case, layer, x, train):
    """(log-beliefs, messages or None) of ``backend`` on the case; skips with its reasons if it declines."""
    kw = dict(rev_index=x["rev"], known_labels=x["labels"], known_mask=x["known"], message_weight=x["mw"],
              return_messages=bool(case.get("return_messages")), edge_chunk=case.get("edge_chunk"))
    if backend == "pairs":
        if train or any(case.get(k) for k in ("edge_weight", "message_weight", "return_messages")):
            pytest.skip("pairs: inference only, without weights, messages stay in place")
        ei = x["ei"]
        return layer.infer_pairs(x["phi"], ei[:, ei[0] < ei[1]], x["labels"], x["known"], pair_chunk=11,
                                 message_dtype=x["phi"].dtype), None
    if backend == "motif_eager":
        if case.get("implicit"):
            pytest.skip("motif_eager declines: backward='implicit' is not implemented with triangle factors")
        from gbpn.bp.motifs import MotifBeliefPropagation
        from gbpn.graph.triangles import enumerate_triangles

        motif = MotifBeliefPropagation(layer.num_classes, layer.num_steps, layer.damping,
                                       triangle_init=torch.ones(layer.num_classes, layer.num_classes,
                                                                layer.num_classes), triangle_form="full",
                                       backward=layer.backward).to(x["phi"].dtype)
        motif.pairwise = layer  # the same coupling parameter
        problem = motif.problem(x["phi"], x["ei"], enumerate_triangles(x["ei"], x["phi"].size(0)),
                                edge_weight=x["ew"], **kw)
    else:
        problem = layer.problem(x["phi"], x["ei"], x["ew"], **kw, kernel=backend)
    if backend == "cuda_triton" and not CUDA:  # the interpreter: the backend's own run on CPU tensors
        if not TRITON:
            pytest.skip("triton is not installed")
        from gbpn.bp.backends.cuda_triton import CUDATriton

        why = [r for r in CUDATriton().reasons(problem) if r != "runs on CUDA"]
        if problem.edge_weight is not None:  # what it says on CUDA
            why.append("edge weights (a per-edge H^w) run on the eager path on CUDA")
        if train or why:
            pytest.skip(f"cuda_triton declines: {'; '.join(why) or 'inference only'}")
        problem.linear = False
        out = CUDATriton().run(problem)
        return out.log_belief, out.messages
    try:
        out = run(problem)
    except ValueError as err:
        pytest.skip(f"{backend} declines: {err}")
    if out.backend != backend:
        pytest.skip(f"{backend} declines: {explain_dispatch(problem)}")
    return out.log_belief, out.messages


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
@pytest.mark.parametrize("train", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_computes_the_reference_step(backend, train, case, monkeypatch):
    opts = CASES[case]
    if opts.get("implicit") and not train:
        pytest.skip("the implicit backward is a training mode")
    if opts.get("renumber"):
        monkeypatch.setattr(layouts, "REORDER_MIN_NODES", 0)
    c = 2 if backend == "cpu_binary" else opts.get("classes", 4)
    x = _inputs(opts, c)
    layer = _layer(opts, c, x)
    phi = x["phi"].requires_grad_(train)
    with torch.set_grad_enabled(train):
        log_b, msg = _run_backend(backend, opts, layer, x, train)
    steps = 400 if opts.get("implicit") else layer.num_steps
    log_H = layer.log_H
    want_b, want_m = reference(phi, x["ei"], x["rev"], log_H, steps, layer.damping, x["ew"], x["mw"], x["known"],
                               x["labels"])
    tol = TOL[phi.dtype] * (100 if opts.get("implicit") else 1)
    torch.testing.assert_close(log_b, want_b, rtol=tol, atol=tol)
    if opts.get("return_messages") and msg is not None:  # messages are normalised in every backend
        torch.testing.assert_close(log_normalize(msg), log_normalize(want_m), rtol=tol, atol=tol)
    if x["known"] is not None:
        assert torch.equal(log_b[x["known"]].argmax(1), x["labels"][x["known"]])  # evidence stays clamped
    if train:
        params = (phi, layer.coupling.weight)
        got = torch.autograd.grad(_loss(log_b, msg), params)
        want = torch.autograd.grad(_loss(want_b, want_m if msg is not None else None), params)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, float(b.abs().max())))


def test_the_table_says_why_each_earlier_backend_declined_and_builds_nothing(monkeypatch):
    import gbpn.bp.backends.cpu_binary as binary
    import gbpn.bp.backends.cpu_fused as fused
    import gbpn.bp.backends.cuda_triton as triton

    def no_layout(*args, **kwargs):
        raise AssertionError("a layout was built")

    for module, name in ((fused, "csr_layout"), (binary, "pair_layout"), (triton, "device_csr")):
        monkeypatch.setattr(module, name, no_layout)
    for c, first in ((4, "cpu_fused"), (2, "cpu_binary")):
        x = _inputs({"evidence": True}, c)
        layer = _layer({}, c, x)
        problem = layer.problem(x["phi"], x["ei"], rev_index=x["rev"], known_labels=x["labels"], known_mask=x["known"],
                                kernel="eager")
        text = explain_dispatch(problem)
        assert text.startswith("eager; cpu_binary declined: kernel='eager' asks for the reference path")
        problem.kernel = "auto"
        assert explain_dispatch(problem).split(";")[0] == first
    x = _inputs({"edge_weight": True}, 2)
    problem = _layer({}, 2, x).problem(x["phi"], x["ei"], x["ew"], rev_index=x["rev"], return_messages=True)
    with torch.enable_grad():
        problem.log_self.requires_grad_()
        binary_reasons = binary.CPUBinary().reasons(problem)
    assert binary_reasons == ["edge weights (a per-edge H^w) need the general kernels",
                              "messages are returned at inference only"]  # all its reasons, not the first
