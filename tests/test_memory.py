import io
import mmap
import sys
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


def _rss_file_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)")
def test_released_file_pages_leave_the_resident_set_and_the_values_intact(tmp_path):
    src = torch.arange(1 << 22, dtype=torch.float32)  # 16 MB
    torch.save(src, tmp_path / "t.pt")
    t = torch.load(tmp_path / "t.pt", mmap=True)
    assert torch.equal(t, src)  # every page read
    before = _rss_file_kb()
    released = memory.release_file_pages(t)
    assert released >= src.numel() * 4
    assert before - _rss_file_kb() > 15_000  # kB
    assert torch.equal(t, src)  # mapped back from the page cache


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)")
def test_memory_that_is_not_a_clean_file_mapping_is_left_alone(tmp_path):
    anon = torch.arange(1 << 22, dtype=torch.float32)
    assert memory.release_file_pages(anon) == 0 and torch.equal(anon, torch.arange(1 << 22, dtype=torch.float32))
    torch.save(anon, tmp_path / "t.pt")
    t = torch.load(tmp_path / "t.pt", mmap=True)
    t[5] = -1.0  # a private copy of that page: releasing it would lose the write
    assert memory.release_file_pages(t) == 0
    assert float(t[5]) == -1.0 and torch.equal(t[6:], anon[6:])
    assert memory.release_file_pages(torch.empty(0)) == 0


def test_a_sparse_tensor_is_left_alone():
    x = torch.eye(4).to_sparse()
    assert memory.release_file_pages(x) == 0 and torch.equal(x.to_dense(), torch.eye(4))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self (Linux)")
def test_a_private_mapping_with_swapped_out_writes_is_left_alone(monkeypatch, tmp_path):
    # smaps as the kernel writes it for a private file mapping whose written pages are in swap:
    # no Anonymous pages in memory, but Swap > 0
    torch.save(torch.arange(1 << 20, dtype=torch.float32), tmp_path / "t.pt")
    t = torch.load(tmp_path / "t.pt", mmap=True)
    text = open("/proc/self/smaps").read()
    patched = []
    for line in text.splitlines(keepends=True):
        if line.startswith("Anonymous:"):
            line = "Anonymous:             0 kB\n"
        elif line.startswith("Swap:"):
            line = "Swap:                  8 kB\n"
        patched.append(line)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: io.StringIO("".join(patched))
                        if f == "/proc/self/smaps" else real_open(f, *a, **k))
    assert memory.release_file_pages(t) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_buffers_are_zero_and_writable_below_and_above_the_huge_page_size(dtype):
    small = memory.huge_zeros(3, 4, dtype=dtype)
    n = memory.HUGE_MIN // small.element_size() // 7 + 1
    big = memory.huge_zeros(7, n, dtype=dtype)
    for t, shape in ((small, (3, 4)), (big, (7, n))):
        assert t.shape == shape and t.dtype == dtype and not t.any()
        t[-1, -1] = 2.5
        t.numpy()[0, 0] = 1.5  # the kernels write through numpy views
        assert float(t.sum()) == 4.0


def test_step_buffers_work_where_the_kernel_refuses_huge_pages(monkeypatch):
    class Refusing(mmap.mmap):
        def madvise(self, *args):
            raise OSError(22, "Invalid argument")  # EINVAL: a kernel built without THP

    monkeypatch.setattr(memory, "mmap", types.SimpleNamespace(
        mmap=Refusing, MAP_PRIVATE=mmap.MAP_PRIVATE, MAP_ANONYMOUS=mmap.MAP_ANONYMOUS, MADV_HUGEPAGE=mmap.MADV_HUGEPAGE))
    t = memory.MappingPool(0).zeros((2, memory.HUGE_MIN // 4), torch.float32)
    assert not t.any() and t.shape == (2, memory.HUGE_MIN // 4)


def test_a_freed_mapping_is_handed_out_again_zeroed_and_a_live_one_never():
    pool = memory.MappingPool(1 << 30)
    n = memory.HUGE_MIN // 4
    a = pool.zeros((2, n), torch.float32)
    ptr = a.data_ptr()
    a.fill_(3.0)
    view = a[1].numpy()  # a numpy view keeps the storage, hence the mapping, alive
    del a
    b = pool.zeros((2, n), torch.float32)
    assert b.data_ptr() != ptr and not b.any()  # still viewed: a new mapping
    assert float(view[0]) == 3.0
    del view
    c = pool.zeros((2, n - 5), torch.float32)  # the same size class
    assert c.data_ptr() == ptr and c.shape == (2, n - 5) and not c.any()
    assert pool.held() == (2 * len(pool._maps[0]), 0)


def test_a_buffer_asked_for_without_zeroing_keeps_the_old_contents():
    """``zero=False`` (``huge_empty``: the fused kernels' buffers they overwrite whole) saves a pass
    over memory; a fresh mapping is zero either way."""
    pool = memory.MappingPool(1 << 30)
    n = memory.HUGE_MIN // 4
    a = pool.zeros((2, n), torch.float32, zero=False)
    ptr = a.data_ptr()
    assert not a.any()
    a.fill_(3.0)
    del a
    b = pool.zeros((2, n), torch.float32, zero=False)
    assert b.data_ptr() == ptr and bool((b == 3.0).all())


def test_free_mappings_beyond_the_limit_are_unmapped_oldest_first():
    n = memory.HUGE_MIN // 4
    size = memory._size_class(2 * n * 4)
    pool = memory.MappingPool(size)  # room for one free mapping
    a, b = pool.zeros((2, n), torch.float32), pool.zeros((2, n), torch.float32)
    del a, b
    assert pool.held() == (0, 2 * size)  # freed, not yet trimmed
    c = pool.zeros((4, n), torch.float32)  # another size class: trims the free ones to the limit
    assert pool.held() == (len(pool._maps[-1]), size)
    del c
    assert pool.empty_cache() == size + memory._size_class(4 * n * 4) and pool.held() == (0, 0)
    assert memory.MappingPool(0).zeros((2, n), torch.float32).shape == (2, n)  # keeps nothing, still works


def test_size_classes_waste_at_most_a_sixteenth():
    for nbytes in (memory.HUGE_MIN, memory.HUGE_MIN + 1, 3 * memory.HUGE_MIN - 7, 10**9 + 12345):
        size = memory._size_class(nbytes)
        assert nbytes <= size <= nbytes * 17 / 16 + (1 << 21) and size % (1 << 21) == 0


def test_pool_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("GBPN_POOL_BYTES", "1e9")
    assert memory._pool_limit() == 10**9
    monkeypatch.setenv("GBPN_POOL_BYTES", "lots")
    with pytest.warns(RuntimeWarning, match="GBPN_POOL_BYTES must be a number of bytes"):
        assert memory._pool_limit(123) == 123


def test_without_reference_counts_to_go_by_the_pool_keeps_nothing(monkeypatch):
    assert memory._tracks_views()  # CPython: a frombuffer tensor holds its buffer
    monkeypatch.setattr(memory, "_tracks_views", lambda: False)
    pool = memory.MappingPool(1 << 30)
    a = pool.zeros((2, memory.HUGE_MIN // 4), torch.float32)
    a.fill_(1.0)
    del a
    b = pool.zeros((2, memory.HUGE_MIN // 4), torch.float32)
    assert not b.any() and pool.held() == (0, 0)
