"""Which backend runs a BP call: capability apart from policy, as xformers' attention dispatch.

Each backend has a ``name``, a ``device_type`` and three methods: ``reasons(problem)`` lists every
reason it *cannot* run the call (empty: it can; pure, no side effects: no layout is built),
``why_not(problem)`` joins them (``None``: it can) and ``run(problem) -> BPResult``. Which one
*should* run, and in what mode, is :func:`select`'s alone: the order of :data:`BACKENDS` (fastest
first, the eager reference last), what the caller asked for (``kernel=``), the speed rules measured
on real graphs, implicit or unrolled, and the linear or log domain of the eager and pair steps.
Undirected ``pairs`` (in-place pair inference, whole or partitioned) and ``triangles`` (the motif
step) are modes of the same table, each with its own entry. A new backend is a file under
:mod:`gbpn.bp.backends` and one entry here.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import List, Optional, Protocol, Tuple

import torch

from gbpn.bp.backends.cpu_binary import CPUBinary
from gbpn.bp.backends.cpu_fused import CPUFused
from gbpn.bp.backends.cuda_triton import CUDATriton
from gbpn.bp.backends.eager import Eager
from gbpn.bp.backends.motif import MotifEager
from gbpn.bp.backends.pairs import Pairs
from gbpn.bp.numerics import LINEAR_EAGER
from gbpn.bp.problem import BPProblem, BPResult

logger = logging.getLogger("gbpn.bp")


class Backend(Protocol):
    name: str
    device_type: Optional[str]

    def reasons(self, problem: BPProblem) -> List[str]: ...

    def why_not(self, problem: BPProblem) -> Optional[str]: ...

    def run(self, problem: BPProblem) -> BPResult: ...


# the general table, fastest first; pairs and triangles each have an entry of their own
_BINARY = CPUBinary()
BACKENDS: List[Backend] = [_BINARY, CPUFused(), CUDATriton(), Eager()]
PAIRS: Backend = Pairs()
MOTIF: Backend = MotifEager()
# what ``kernel=`` takes: "auto", "fused" (any compiled kernel) or one backend's name
KERNELS = ("auto", "fused", *(b.name for b in BACKENDS))

# kernel="auto" keeps the eager path on CPU for two classes on graphs this large where the binary
# log-odds kernel (cpu_binary) cannot run (edge weights; messages returned in training): its
# linear-domain step measured 1.25x faster at inference and 1.13x in training than the general kernel
# on the arXiv-sized graph at c = 2
_EAGER_MAX_CLASSES, _EAGER_MIN_EDGES = 2, 1_000_000
# On CUDA kernel="auto" runs the Triton step only up to this many classes: on an H200, arXiv-sized
# graph (benchmarks/triton_blocks.py) it took 0.61x the eager step at c = 2 but 1.6x at c = 7 and
# 2.2-2.7x at c = 40 and 47
_TRITON_MAX_CLASSES = 2

Declined = List[Tuple[str, str]]


def check_kernel(kernel: str) -> str:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, KERNELS))}, got {kernel!r}")
    return kernel


def _policy(backend: Backend, p: BPProblem) -> Optional[str]:
    """Why ``backend`` should not run ``p`` though it may be able to: what the caller asked for, and
    the speed rules of ``kernel="auto"``."""
    compiled = backend.device_type is not None
    if p.kernel == "eager" and compiled:
        return "kernel='eager' asks for the reference path"
    if p.kernel == "fused" and not compiled:
        return "kernel='fused' asks for a compiled kernel"
    if p.kernel not in ("auto", "fused", "eager") and p.kernel != backend.name:
        return f"kernel={p.kernel!r} asks for that backend"
    if p.kernel != "auto":
        return None
    if (backend.name == "cpu_fused" and p.device.type == "cpu" and _BINARY.shape_reasons(p)
            and p.num_classes <= _EAGER_MAX_CLASSES and p.num_edges > _EAGER_MIN_EDGES):
        return (f"kernel='auto': the eager step is faster at {p.num_classes} classes from "
                f"{_EAGER_MIN_EDGES:,} edges on (measured)")
    if backend.name == "cuda_triton" and p.device.type == "cuda" and p.num_classes > _TRITON_MAX_CLASSES:
        return (f"kernel='auto': the eager step is faster above {_TRITON_MAX_CLASSES} classes on a GPU "
                "(measured on an H200)")
    return None


def _implicit(p: BPProblem) -> bool:
    """Whether the call differentiates the fixed point implicitly: ``backward="implicit"`` while autograd
    records, with steps to run and no edge chunks; triangle factors unroll (no implicit motif step)."""
    return (p.backward == "implicit" and torch.is_grad_enabled() and p.num_steps > 0 and p.edge_chunk is None
            and p.triangles is None)


def _linear(p: BPProblem) -> bool:
    """Whether the eager or pair step keeps messages in the linear domain (one exponential per node
    instead of per edge): at inference without weights in the eager step, for any storage type with
    float32's exponent range in the pair step, and while ``log H`` spreads less than
    :data:`~gbpn.bp.numerics.LINEAR_EAGER`."""
    if p.pairs is not None:
        narrow = p.message_dtype != torch.float16  # float16 underflows small messages
    else:
        narrow = (not p.compiling and not torch.is_grad_enabled() and p.edge_weight is None
                  and p.message_weight is None)
    return narrow and float(p.log_H.max() - p.log_H.min()) < LINEAR_EAGER


def _candidates(p: BPProblem) -> List[Backend]:
    if p.pairs is not None:
        return [PAIRS]
    if p.triangles is not None:
        return [MOTIF]
    return BACKENDS


def select(problem: BPProblem) -> Tuple[Backend, Declined]:
    """The backend that runs ``problem`` and, before it, each one that declined with its reasons; sets
    the call's mode (``problem.implicit``). Raises ``ValueError`` when none runs it (``kernel="fused"``
    where no compiled kernel applies, or an option the pair or motif step does not have)."""
    problem.implicit = _implicit(problem)
    declined: Declined = []
    candidates = _candidates(problem)
    for backend in candidates:
        why = _policy(backend, problem) or backend.why_not(problem)
        if why is None:
            if not problem.compiling and logger.isEnabledFor(logging.DEBUG):
                logger.debug("BP runs %s", _explain(backend, declined))
            return backend, declined
        declined.append((backend.name, why))
    named = [why for name, why in declined if name == problem.kernel]
    if named:  # the backend asked for by name: its own reasons
        raise ValueError(f"kernel={problem.kernel!r} does not apply to this call: {named[0]}")
    if candidates is BACKENDS:  # kernel="fused": say why the kernels of this device declined
        mine = [why for b, (_, why) in zip(BACKENDS, declined) if b.device_type == problem.device.type]
        compiled = [why for b, (_, why) in zip(BACKENDS, declined) if b.device_type is not None]
        raise ValueError(f"kernel={problem.kernel!r} does not apply to this call: {(mine or compiled)[-1]}")
    raise ValueError(f"{declined[0][0]} does not run this call: {declined[0][1]}")


def run(problem: BPProblem) -> BPResult:
    """Run ``problem`` on the backend :func:`select` picks. The eager implicit mode first finds the
    fixed point without a graph (the same call at inference, on whichever backend runs that)."""
    backend, _ = select(problem)
    if backend.name in ("eager", "pairs"):
        problem.linear = _linear(problem)
    if backend.name == "eager" and problem.implicit:
        with torch.no_grad():
            problem.fixed_point = run(replace(problem, return_residuals=True, return_messages=True,
                                              implicit_stats=None, fixed_point=None))
    return backend.run(problem)._replace(backend=backend.name)


def _explain(backend: Backend, declined: Declined) -> str:
    return backend.name + "".join(f"; {name} declined: {why}" for name, why in declined)


def explain_dispatch(problem: BPProblem) -> str:
    """``"<backend>; <earlier backend> declined: <why>; ..."``: which backend runs ``problem`` and
    why each one before it did not (build the problem with
    :meth:`~gbpn.bp.layer.BeliefPropagation.problem`). Builds nothing: no layout, no kernel run."""
    return _explain(*select(problem))
