"""What the numba backends share at run time: their one-time self-tests, the threads a kernel call
gets, the thread pool over node blocks, and BLAS held to one thread inside them."""
from __future__ import annotations

import contextlib
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor


_state: Dict[str, object] = {}  # self-test verdicts per key, the BLAS controller


def self_tested(key: str, self_test: Callable[[], None], what: str) -> Optional[str]:
    """``None`` once ``self_test()`` has passed for ``key``, else why it failed (warned once per key)."""
    if key not in _state:
        try:
            with torch.inference_mode(False):  # it trains: a first call under inference_mode must not fail it
                self_test()
            _state[key] = None
        except Exception as exc:  # a missing package, or a compile / runtime failure: fall back, say so once
            reason = f"{what} unavailable ({type(exc).__name__}: {exc}); using the eager path"
            warnings.warn(reason, RuntimeWarning, stacklevel=4)
            _state[key] = reason
    return _state[key]


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


# The least work a kernel call hands to a thread, in edges x classes: a smaller call runs on fewer
# threads, as handing a block to another thread costs more than it saves there (K = 5 training step
# with torch at two threads: Cora, E c = 74k, 32.0 ms on one thread against 33.1 ms on two; a
# synthetic graph of E c = 256k, two threads 0.93x one).
MIN_WORK_PER_THREAD = 1 << 16


def _threads(work: int, per_thread: Optional[int] = None) -> int:
    """Threads for a kernel call over ``work`` units: as many as torch uses (``torch.set_num_threads``
    governs both), but each given at least ``per_thread`` of the work (``MIN_WORK_PER_THREAD``)."""
    least = MIN_WORK_PER_THREAD if per_thread is None else max(1, per_thread)
    return max(1, min(torch.get_num_threads(), work // least))


_pool: Dict[int, ThreadPoolExecutor] = {}


def _parallel(kernel, blocks: np.ndarray, args: tuple, per_block: Tuple[int, ...] = (), classes: int = 0) -> None:
    """``kernel(rowptr, blocks, *args)`` with one thread per node block (the kernels release the GIL);
    the arguments at positions ``per_block`` (of ``args``) have a leading block axis and are sliced.
    ``classes``: from ``_BLAS_CLASSES`` on, the kernel calls BLAS, held to one thread meanwhile
    (setting OpenBLAS's thread count costs 50-100 microseconds a call, so only then)."""
    from gbpn.bp.backends._numba.fused_kernels import _BLAS_CLASSES  # numba loads with the kernels, not before

    nb = blocks.shape[0] - 1

    def run(j: int) -> None:
        sliced = [a[j:j + 1] if i in per_block else a for i, a in enumerate(args)]
        kernel(sliced[0], blocks[j:j + 2], *sliced[1:])

    with _one_blas_thread() if classes >= _BLAS_CLASSES else contextlib.nullcontext():
        if nb == 1:
            kernel(args[0], blocks, *args[1:])
            return
        pool = _pool.get(nb) or _pool.setdefault(nb, ThreadPoolExecutor(nb, thread_name_prefix="gbpn-bp"))
        for future in [pool.submit(run, j) for j in range(nb)]:
            future.result()


def _one_blas_thread():
    """A context in which BLAS (the chunk products of the kernels: numba calls SciPy's) runs on the
    calling thread only: the node blocks are the parallelism, and OpenBLAS would otherwise start its
    own threads for the larger chunk products, on top of them."""
    ctl = _state.get("blas")
    if ctl is None:
        import scipy.linalg.cython_blas  # noqa: F401 (numba's BLAS: loaded, so that the controller sees it)
        from threadpoolctl import ThreadpoolController

        ctl = _state["blas"] = ThreadpoolController().select(user_api="blas")
    return ctl.limit(limits=1)
