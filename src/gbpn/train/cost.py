"""The cost of an epoch, counted, not timed: what a budgeted search (:mod:`gbpn.train.search`) charges a
configuration, so that its choices never depend on the machine's speed or load and ``--config`` reruns them.

:class:`CostCounter` counts the floating-point operations of matrix products (torch's ``FlopCounterMode``)
and the elements every other operation writes (scatter, gather, softmax and the BP steps are
memory-bound: their time follows the elements they write, not their FLOPs). One element counts as
:data:`ELEMENT_FLOPS` operations: fitted on 28 configurations of the search on Cora and Chameleon (one thread,
one CPU core), where an epoch took 0.015 s per GFLOP plus 1.17 s per billion elements; the count predicted
each epoch's seconds within a factor 0.6-1.7, where FLOPs alone were off by up to 6x (GAT's attention).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Tuple, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

ELEMENT_FLOPS = 80  # one element written costs as much as 80 FLOPs of a matrix product (see the module)

T = TypeVar("T")


class _Elements(TorchDispatchMode):
    """Counts the elements of every tensor an operation returns, outside :func:`uncounted` blocks."""

    paused = 0

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not _Elements.paused:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.count += t.numel()
        return out


@contextmanager
def uncounted() -> Iterator[None]:
    """Work that :func:`counted` leaves out: scoring, whose sizes follow the labels (a search's costs must not
    depend on test labels); it holds no matrix product."""
    _Elements.paused += 1
    try:
        yield
    finally:
        _Elements.paused -= 1


def counted(fn: Callable[[], T]) -> Tuple[T, float]:
    """Run ``fn()`` and return its result and its cost: FLOPs of matrix products plus :data:`ELEMENT_FLOPS` per
    element written (forward and backward passes alike)."""
    flops, elements = FlopCounterMode(display=False), _Elements()
    with flops, elements:
        out = fn()
    return out, float(flops.get_total_flops() + ELEMENT_FLOPS * elements.count)
