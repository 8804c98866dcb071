"""Which backend runs a BP call: one ordered table, asked in turn.

Each backend has a ``name``, a ``device_type`` and two methods: ``why_not(problem) -> str | None``
(``None``: it runs this call) and ``run(problem, layer) -> (log_belief, residuals, log_msg)``. The
first that does not decline runs; :data:`BACKENDS` lists them fastest first, the eager reference last
(it declines only ``kernel="fused"``). A new backend is a file under :mod:`gbpn.bp.backends` and one
entry here.
"""
from __future__ import annotations

import logging
from typing import List, Optional, Protocol, Tuple

from gbpn.bp.backends.cpu_binary import CPUBinary
from gbpn.bp.backends.cpu_fused import CPUFused
from gbpn.bp.backends.cuda_triton import CUDATriton
from gbpn.bp.backends.eager import Eager
from gbpn.bp.problem import BPProblem, BPResult

logger = logging.getLogger("gbpn.bp")


class Backend(Protocol):
    name: str
    device_type: Optional[str]

    def why_not(self, problem: BPProblem) -> Optional[str]: ...

    def run(self, problem: BPProblem, layer) -> BPResult: ...


BACKENDS: List[Backend] = [CPUBinary(), CPUFused(), CUDATriton(), Eager()]

Declined = List[Tuple[str, str]]


def select(problem: BPProblem) -> Tuple[Backend, Declined]:
    """The backend that runs ``problem`` and, before it, each one that declined with its reason.
    Raises ``ValueError`` for ``kernel="fused"`` when no compiled kernel applies."""
    declined: Declined = []
    for backend in BACKENDS:
        why = backend.why_not(problem)
        if why is None:
            if not problem.compiling and logger.isEnabledFor(logging.DEBUG):
                logger.debug("BP runs %s", _explain(backend, declined))
            return backend, declined
        declined.append((backend.name, why))
    # only kernel="fused" gets here: say why the general kernel of this device declined
    mine = [why for b, (_, why) in zip(BACKENDS, declined) if b.device_type == problem.device.type]
    compiled = [why for b, (_, why) in zip(BACKENDS, declined) if b.device_type is not None]
    raise ValueError(f"kernel='fused' does not apply to this call: {(mine or compiled)[-1]}")


def _explain(backend: Backend, declined: Declined) -> str:
    return backend.name + "".join(f"; {name} declined: {why}" for name, why in declined)


def explain_dispatch(problem: BPProblem) -> str:
    """``"<backend>; <earlier backend> declined: <why>; ..."``: which backend runs ``problem`` and
    why each one before it did not (build the problem with
    :meth:`~gbpn.bp.layer.BeliefPropagation.problem`)."""
    return _explain(*select(problem))
