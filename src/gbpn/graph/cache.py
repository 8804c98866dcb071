"""Per-graph results cached by the identity of the graph's tensors.

A training loop calls the BP layer on the same ``edge_index`` (and ``rev_index``) every step. What
depends only on the graph (the kernels' edge layouts, the input checks of the edges) is computed
once and looked up by the tensors' identity and in-place version: weak references, so a new or
modified tensor counts as a new graph and a freed one drops out. A write that PyTorch does not
count as a change (through ``.data``, or through a NumPy array sharing the tensor's memory) is not
seen: call :func:`clear_graph_caches` after one, or pass a new tensor.
"""
from __future__ import annotations

import weakref
from typing import Callable, Hashable, List, Optional, Sequence, Tuple, TypeVar

from torch import Tensor

T = TypeVar("T")


_caches: "weakref.WeakSet[GraphCache]" = weakref.WeakSet()


def clear_graph_caches() -> None:
    """Forget every graph's cached layouts and checks (see the module's note on untracked writes)."""
    for cache in list(_caches):
        cache.clear()


class GraphCache:
    """The results of the last ``size`` graphs, keyed by ``(tensors, key)``."""

    def __init__(self, size: int = 6) -> None:
        self.size = size
        self._entries: List[Tuple[tuple, Hashable, object]] = []
        _caches.add(self)

    def clear(self) -> None:
        """Forget every cached graph."""
        self._entries.clear()

    @staticmethod
    def _stamp(tensors: Sequence[Optional[Tensor]]) -> tuple:
        return tuple((None, 0) if t is None else (weakref.ref(t), t._version) for t in tensors)

    def get(self, tensors: Sequence[Optional[Tensor]], key: Hashable, build: Callable[[], T]) -> T:
        """``build()``'s result for these tensors (``None`` allowed) and ``key``, built on a miss.
        An exception in ``build`` caches nothing, nor does a call with an inference tensor (made under
        ``torch.inference_mode``, which keeps no version to tell an in-place change by)."""
        if any(t is not None and t.is_inference() for t in tensors):
            return build()
        for stamp, k, value in self._entries:
            if k == key and len(stamp) == len(tensors) and all(
                    (t is None and ref is None) or (t is not None and ref is not None and ref() is t
                                                    and ver == t._version)
                    for (ref, ver), t in zip(stamp, tensors)):
                return value  # type: ignore[return-value]
        value = build()
        self._entries.insert(0, (self._stamp(tensors), key, value))
        del self._entries[self.size:]
        return value
