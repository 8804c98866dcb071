"""Large CPU buffers whose pages are mapped before they are used.

torch takes every CPU tensor of more than a few megabytes from a fresh ``mmap`` and returns it to
the system when freed, so each such allocation pays one page fault per 4 KiB page on first touch
(measured here: about 0.7 GB/s). A mapping made with ``MAP_POPULATE`` has its zero pages mapped
by the kernel in one call, 2-3 times faster. The in-place BP path allocates its message arrays
(gigabytes) and its per-node buffers this way, once per call, and reuses them every step.

The fused BP kernels' step buffers (:func:`huge_zeros`) come from anonymous mappings advised for
transparent huge pages, which a :class:`MappingPool` keeps after their tensors die and hands out
again: a training loop's next step finds its buffers' pages mapped (and huge) instead of faulting
them in again, which costs more than the step's arithmetic (the kernel compacts memory to find a
huge page when ``defrag`` is ``madvise``).

A memory-mapped input (``torch.load(..., mmap=True)``) stays in a process's resident set for
every page it has read, as long as the mapping lives: :func:`release_file_pages` gives those
pages back once a tensor's contents have been used (the file's pages stay in the page cache).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import mmap
import os
import sys
import threading
import warnings
from typing import List, Tuple

import torch
from torch import Tensor

POPULATE_MIN = 1 << 23  # bytes; smaller tensors come from torch's allocator


def _anonymous(nbytes: int, flags: int = 0) -> mmap.mmap:
    """A private anonymous mapping (zero pages; ``flags`` added, such as ``MAP_POPULATE``)."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flags)


def populated_zeros(shape: Tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """A zero CPU tensor; from :data:`POPULATE_MIN` bytes on, in an anonymous mapping populated up
    front (zero-filled by the kernel, released when the tensor is). Where ``MAP_POPULATE`` does not
    exist (not Linux), ``torch.zeros``."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POPULATE_MIN or not hasattr(mmap, "MAP_POPULATE"):
        return torch.zeros(shape, dtype=dtype)
    buf = _anonymous(nbytes, mmap.MAP_POPULATE)
    return torch.frombuffer(buf, dtype=dtype).view(shape)


HUGE_MIN = 1 << 23  # bytes; smaller step buffers come from torch's allocator (huge pages: 1.4x faster training at c = 40)
_HUGE_PAGE = 1 << 21


def _size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to a sixteenth of its power of two (at least one huge page), so that
    buffers of about the same size (mini-batch trees) share mappings, at most 1/16 wasted."""
    granule = max(_HUGE_PAGE, (1 << (nbytes - 1).bit_length()) // 16)
    return -(-nbytes // granule) * granule


def _refs(items: list, i: int) -> int:
    """References to ``items[i]``, counted the same way for the pool's mappings and the baseline."""
    return sys.getrefcount(items[i])


_BASE_REFS = _refs([object()], 0)  # an object held by one list only (the count differs by interpreter)


@functools.lru_cache(maxsize=None)
def _tracks_views() -> bool:
    """Whether a tensor made by ``torch.frombuffer`` (and a view of it) shows in its buffer's reference
    count, and stops showing once freed: the pool's test of a free mapping. Where it does not (another
    interpreter), the pool keeps nothing and every buffer is a fresh mapping."""
    items = [bytearray(16)]
    t = torch.frombuffer(items[0], dtype=torch.uint8)[4:]
    held = _refs(items, 0) > _BASE_REFS
    del t
    return held and _refs(items, 0) <= _BASE_REFS


class MappingPool:
    """Anonymous private mappings advised for transparent huge pages, kept after the tensors that
    view them are freed and handed out again (zeroed) for a buffer of the same size class; like
    CUDA's caching allocator, for the few large buffers of a BP step.

    A mapping is free when nothing but the pool refers to it: a tensor from :func:`torch.frombuffer`
    holds a reference to its buffer until its storage (every view, every numpy array of it) dies.
    Free mappings beyond ``limit`` bytes are unmapped, least recently used first; :meth:`empty_cache`
    unmaps them all. ``limit=0`` keeps none (every buffer a fresh mapping)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._maps: List[mmap.mmap] = []  # least recently handed out first
        self._lock = threading.Lock()

    def _free(self) -> List[int]:
        return [i for i in range(len(self._maps)) if _refs(self._maps, i) <= _BASE_REFS]

    def zeros(self, shape: Tuple[int, ...], dtype: torch.dtype, zero: bool = True) -> Tensor:
        """A tensor in a free mapping of its size class, or a new mapping; ``zero=False``: a reused
        mapping keeps what it held (for buffers the caller overwrites whole: no pass over it)."""
        nbytes = math.prod(shape) * dtype.itemsize
        size = _size_class(nbytes)
        with self._lock:
            reuse = next((i for i in self._free() if len(self._maps[i]) == size), None)
            if reuse is not None:
                buf = self._maps.pop(reuse)
            else:
                buf = _anonymous(size)  # private: shared memory gets no THP
                with contextlib.suppress(OSError, AttributeError):  # no THP (or not Linux): plain pages then
                    buf.madvise(mmap.MADV_HUGEPAGE)
            if _tracks_views():
                self._maps.append(buf)
            t = torch.frombuffer(buf, dtype=dtype, count=math.prod(shape)).view(shape)
            del buf
            self._trim(self.limit)
        if reuse is not None and zero:
            t.zero_()
        return t

    def _trim(self, keep: int) -> int:
        free = self._free()
        total = sum(len(self._maps[i]) for i in free)
        dropped = 0
        for i in free:  # oldest first
            if total - dropped <= keep:
                break
            dropped += len(self._maps[i])
            self._maps[i] = None  # type: ignore[call-overload]  # unmapped once the list lets go
        self._maps = [m for m in self._maps if m is not None]
        return dropped

    def empty_cache(self) -> int:
        """Unmap every free mapping; returns the bytes given back."""
        with self._lock:
            return self._trim(0)

    def held(self) -> Tuple[int, int]:
        """Bytes mapped by the pool: ``(in use, free)``."""
        with self._lock:
            free = set(self._free())
            sizes = [(len(m), i in free) for i, m in enumerate(self._maps)]
        return sum(n for n, f in sizes if not f), sum(n for n, f in sizes if f)


def _pool_limit(default: int = 4 << 30) -> int:
    raw = os.environ.get("GBPN_POOL_BYTES")
    try:
        return default if raw is None else max(0, int(float(raw)))
    except ValueError:  # at import time: say so, do not fail every command
        warnings.warn(f"GBPN_POOL_BYTES must be a number of bytes, got {raw!r}; using {default}", RuntimeWarning)
        return default


POOL = MappingPool(_pool_limit())


def _huge(shape: Tuple[int, ...], dtype: torch.dtype, zero: bool) -> Tensor:
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < HUGE_MIN or not hasattr(mmap, "MADV_HUGEPAGE"):
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype)
    return POOL.zeros(shape, dtype, zero=zero)


def huge_zeros(*shape: int, dtype: torch.dtype) -> Tensor:
    """A zero CPU tensor; from :data:`HUGE_MIN` bytes on, in a mapping of :data:`POOL` (advised
    for huge pages, kept for the next buffer of its size once this one is freed; up to
    ``GBPN_POOL_BYTES`` bytes of free mappings, 4 GiB by default). Where ``MADV_HUGEPAGE`` does
    not exist (not Linux), ``torch.zeros``."""
    return _huge(shape, dtype, zero=True)


def huge_empty(*shape: int, dtype: torch.dtype) -> Tensor:
    """As :func:`huge_zeros`, for a buffer the caller overwrites whole before reading it: a mapping
    back from the pool keeps its old contents (zeroing it would be one more pass over memory)."""
    return _huge(shape, dtype, zero=False)


def _cgroup_headroom() -> float:
    """Bytes left under this process's cgroup memory limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``; its own group where mounted, else the root of the mount); inf
    without a limit."""
    groups = {}
    with contextlib.suppress(OSError):
        with open("/proc/self/cgroup") as fh:  # "0::/path" (v2), "4:memory:/path" (v1)
            for line in fh:
                _, kind, path = line.rstrip("\n").split(":", 2)
                groups[kind] = path.rstrip("/")
    for kind, root, limit_file, usage_file in (("", "/sys/fs/cgroup", "memory.max", "memory.current"),
                                               ("memory", "/sys/fs/cgroup/memory", "memory.limit_in_bytes",
                                                "memory.usage_in_bytes")):
        if kind not in groups:
            continue
        for base in (root + groups[kind], root):
            with contextlib.suppress(OSError, ValueError):
                with open(f"{base}/{limit_file}") as fh:
                    limit = fh.read().strip()
                if limit == "max" or int(limit) >= 1 << 60:  # no limit
                    return math.inf
                with open(f"{base}/{usage_file}") as fh:
                    return int(limit) - int(fh.read())
    return math.inf


def _meminfo_available() -> float:
    """``MemAvailable`` of ``/proc/meminfo`` (inf where it is missing), capped by the cgroup's headroom."""
    avail = math.inf
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        with open("/proc/meminfo") as fh:
            avail = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    return min(avail, _cgroup_headroom())


def available_memory() -> float:
    """Bytes this process may still take without swapping: the system's available memory (or the
    cgroup's headroom, if less) plus the free mappings :data:`POOL` would hand out again; inf where
    the system does not say (not Linux)."""
    return _meminfo_available() + POOL.held()[1]


def empty_cache() -> int:
    """Unmap the free mappings of :data:`POOL` (the fused BP step buffers kept for reuse); returns
    the bytes given back."""
    return POOL.empty_cache()


_MADV_DONTNEED = 4  # Linux


def release_file_pages(t: Tensor) -> int:
    """Unmap from this process the pages of a CPU tensor that lives in a file mapping (such as
    ``torch.load(..., mmap=True)``), so that they no longer count in its resident set; reading the
    tensor again maps them back from the page cache. Returns the bytes released: 0 (nothing done)
    unless the tensor is strided and its whole storage lies in one file-backed mapping none of
    whose pages were written privately (a written page of a private mapping, in memory or in swap,
    exists only in this process and would be lost), or when not on Linux. The whole mapping must
    not be written meanwhile, by any thread: a page written between the check and the release
    would be lost."""
    if t.device.type != "cpu" or t.layout != torch.strided or not sys.platform.startswith("linux"):
        return 0
    storage = t.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    if size == 0 or not _clean_file_mapping(start, start + size):
        return 0
    page = mmap.PAGESIZE
    # the mapping starts and ends on page boundaries, so the rounded range stays inside it
    lo, hi = start // page * page, -(-(start + size) // page) * page
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_DONTNEED) != 0:
        return 0
    return hi - lo


def _clean_file_mapping(lo: int, hi: int) -> bool:
    """Whether the mapping of ``/proc/self/smaps`` that holds ``[lo, hi)`` is file-backed and, if
    private, has no written pages (``Anonymous`` in memory, ``Swap`` swapped out)."""
    try:
        text = open("/proc/self/smaps").read()
    except OSError:
        return False
    fields = None  # of the mapping that holds the range, once found
    for line in text.splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:  # a mapping's first line
            if fields is not None:
                break
            a, b = (int(x, 16) for x in head[0].split("-"))
            if a <= lo and hi <= b:
                if not (len(head) > 5 and head[5].startswith("/")):  # anonymous, heap, stack
                    return False
                fields = {"shared": head[1][3] == "s"}
        elif fields is not None and len(head) >= 2 and head[0] in ("Anonymous:", "Swap:"):
            fields[head[0]] = int(head[1])
    if fields is None:
        return False
    return fields["shared"] or (fields.get("Anonymous:") == 0 and fields.get("Swap:") == 0)
