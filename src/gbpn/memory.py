"""Large CPU buffers whose pages are mapped before they are used.

torch takes every CPU tensor of more than a few megabytes from a fresh ``mmap`` and returns it to
the system when freed, so each such allocation pays one page fault per 4 KiB page on first touch
(measured here: about 0.7 GB/s). A mapping made with ``MAP_POPULATE`` has its zero pages mapped
by the kernel in one call, 2-3 times faster. The in-place BP path allocates its message arrays
(gigabytes) and its per-node buffers this way, once per call, and reuses them every step.

A memory-mapped input (``torch.load(..., mmap=True)``) stays in a process's resident set for
every page it has read, as long as the mapping lives: :func:`release_file_pages` gives those
pages back once a tensor's contents have been used (the file's pages stay in the page cache).
"""
from __future__ import annotations

import ctypes
import math
import mmap
import sys
from typing import Tuple

import torch
from torch import Tensor

POPULATE_MIN = 1 << 23  # bytes; smaller tensors come from torch's allocator


def populated_zeros(shape: Tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """A zero CPU tensor; from :data:`POPULATE_MIN` bytes on, in an anonymous mapping populated up
    front (zero-filled by the kernel, released when the tensor is). Where ``MAP_POPULATE`` does not
    exist (not Linux), ``torch.zeros``."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POPULATE_MIN or not hasattr(mmap, "MAP_POPULATE"):
        return torch.zeros(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
    return torch.frombuffer(buf, dtype=dtype).view(shape)


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
