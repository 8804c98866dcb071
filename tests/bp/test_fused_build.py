"""Where numba is installed, the fused CPU kernels compile and pass their self-test. The fused
tests skip, with the reason, where the kernels are unavailable, so a kernel that no longer compiles
would otherwise show up as skips only."""
import pytest
import torch

from gbpn.bp.backends.cpu_fused import fused_unavailable


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_kernels_compile_where_numba_is_installed(dtype):
    pytest.importorskip("numba")
    assert fused_unavailable(dtype) is None


def test_binary_kernels_compile_where_numba_is_installed():
    pytest.importorskip("numba")
    from gbpn.bp.backends.cpu_binary import binary_unavailable

    assert binary_unavailable() is None
