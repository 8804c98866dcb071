"""The kernels' own float32 exponential and logarithm (gbpn.bp.backends._numba.fastmath): within 2 ulp of the
correctly rounded value over their whole ranges, IEEE special values handled, and libm's in float64."""

import numpy as np
import pytest

pytest.importorskip("numba")
from numba import njit  # noqa: E402

from gbpn.bp.backends._numba.fastmath import exp_neg, log_pos  # noqa: E402


@njit
def _exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = exp_neg(x[i])


@njit
def _log_all(x, out):
    for i in range(x.shape[0]):
        out[i] = log_pos(x[i])


def _apply(fn, x):
    out = np.empty_like(x)
    fn(x, out)
    return out


def _ulps(got, exact):
    """Distance of float32 ``got`` from the float64 ``exact``, in float32 spacings at ``exact``."""
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def test_exp_neg_within_2_ulp_on_every_53rd_float_of_its_range():
    bits = np.arange(0, np.float32(87.0).view(np.int32), 53, dtype=np.int32)
    x = -bits.view(np.float32)
    assert _ulps(_apply(_exp_all, x), np.exp(x.astype(np.float64))).max() <= 2.0


def test_log_pos_within_2_ulp_on_every_61st_normal_float():
    bits = np.arange(np.float32(np.finfo(np.float32).tiny).view(np.int32), np.float32(np.inf).view(np.int32), 61,
                     dtype=np.int32)
    x = bits.view(np.float32)
    assert _ulps(_apply(_log_all, x), np.log(x.astype(np.float64))).max() <= 2.0


def test_special_values():
    logs = _apply(_log_all, np.array([0.0, np.inf, np.nan, -1.0, 1.0], np.float32))
    assert logs[0] == -np.inf and logs[1] == np.inf and np.isnan(logs[2]) and np.isnan(logs[3]) and logs[4] == 0.0
    exps = _apply(_exp_all, np.array([0.0, -np.inf, np.nan, -1e4], np.float32))
    # below -87: 0, what libm's denormal is under the kernels' flush-to-zero
    assert exps[0] == 1.0 and np.isnan(exps[2]) and exps[1] == exps[3] == 0.0


def test_float64_is_libm():
    x = np.linspace(-50.0, 0.0, 1001)
    np.testing.assert_allclose(_apply(_exp_all, x), np.exp(x), rtol=1e-15)
    y = np.linspace(1e-300, 1e300, 1001)
    np.testing.assert_allclose(_apply(_log_all, y), np.log(y), rtol=1e-15)
