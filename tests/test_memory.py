import mmap
import types

import pytest
import torch

from gbpn import memory


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_buffers_are_zero_and_writable_below_and_above_the_populate_size(dtype):
    small = memory.populated_zeros((3, 4), dtype)
    n = memory.POPULATE_MIN // small.element_size() // 7 + 1
    big = memory.populated_zeros((7, n), dtype)
    for t, shape in ((small, (3, 4)), (big, (7, n))):
        assert t.shape == shape and t.dtype == dtype and not t.any()
        t[-1, -1] = 2.5
        t[0, 0] = 1.5
        assert float(t.float().sum()) == 4.0


def test_buffers_without_map_populate(monkeypatch):
    monkeypatch.setattr(memory, "mmap", types.SimpleNamespace(mmap=mmap.mmap, MAP_PRIVATE=mmap.MAP_PRIVATE,
                                                               MAP_ANONYMOUS=mmap.MAP_ANONYMOUS))
    t = memory.populated_zeros((2, memory.POPULATE_MIN // 4), torch.float32)
    assert not t.any() and t.shape == (2, memory.POPULATE_MIN // 4)
