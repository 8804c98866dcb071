r"""Exponential and logarithm that vectorise inside numba kernels (imported lazily; needs numba).

LLVM vectorises a loop only if every call in it has a vector form, and numba's llvmlite is built
without a vector maths library (``llvmlite.binding.has_svml`` is False here), so a loop calling
``math.exp`` or ``math.log`` runs one element at a time through libm. For float32 the two are
written out here in arithmetic and bit casts only, so the loops that call them vectorise:

- :func:`exp_neg` — :math:`e^x` for :math:`x \le 0`: :math:`x = n \ln 2 + r` with :math:`|r| \le
  \ln 2 / 2` (``r`` in float64: the kernels' fast-math reassociation would undo the usual exact
  split of ln 2 in two floats), :math:`e^r = 1 + r + r^2 q(r)`
  with a degree-5 :math:`q`, and :math:`2^n` built in the exponent bits; below :math:`-87` it
  returns 0, as libm's denormal result is under the kernels' flush-to-zero (so that a clamped
  cavity, log-odds ~1e4, contributes nothing beside even the smallest coupling entry).
- :func:`log_pos` — :math:`\log x` for :math:`x > 0`: :math:`x = 2^e (1 + m)` with :math:`1 + m \in
  [\sqrt{1/2}, \sqrt 2)`, :math:`\log(1 + m) = m - m^2/2 + m^3 p(m)` with a degree-7 :math:`p`;
  0 gives :math:`-\infty`, ``inf`` and NaN pass through, a negative number gives NaN.

The polynomials are least-squares fits on Chebyshev nodes weighted for relative error (about
1e-8 before rounding to float32); ``tests/bp/test_fastmath.py`` bounds both functions at 2 ulp
over their ranges. For float64 both are libm's: the kernels' float64 results must equal the eager
path to 1e-10, which these polynomials are not built for.

numba's on-disk cache (``cache=True``) checks only the kernel's own file: after editing this
module, delete the kernels' ``__pycache__/*.nbi`` and ``*.nbc`` files, or the cached kernels keep
the old code.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

_FM = {"contract", "reassoc", "nsz"}
_f, _i = np.float32, np.int32
_LN2 = np.float64(math.log(2.0))
_LOG2E = _f(1.44269504)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5 = (_f(c) for c in (0.5, 0.16666666, 0.041666269, 0.0083334297, 0.0013946025,
                                                 0.00019826503))
_P0, _P1, _P2, _P3, _P4, _P5, _P6, _P7 = (_f(c) for c in (0.33333355, -0.25000852, 0.19999827, -0.16621365,
                                                         0.14227097, -0.13202143, 0.12620491, -0.07362981))


@intrinsic
def _bits(typingctx, x):
    """The bits of a float32 as an int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(x), codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float32 whose bits are the int32 ``i``."""
    if i != types.int32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(i), codegen


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _expf_neg(x):
    y = max(x, _f(-87.0))
    n = _i(y * _LOG2E - _f(0.5))  # truncation toward zero of a value <= 0.5: round to nearest
    r = _f(np.float64(y) - np.float64(n) * _LN2)  # in float64: reassociation cannot undo an exact split
    q = ((((_Q5 * r + _Q4) * r + _Q3) * r + _Q2) * r + _Q1) * r + _Q0
    e = (q * r * r + r + _f(1.0)) * _from_bits(_i(_i(n + _i(127)) << _i(23)))
    e = e if x >= _f(-87.0) else _f(0.0)  # what libm's denormal becomes under flush-to-zero
    return e if x == x else x  # NaN stays NaN


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _logf_pos(x):
    bits = _bits(x)
    e = _i(_i(bits >> _i(23)) & _i(255)) - _i(127)
    s = _from_bits(_i(_i(bits & _i(0x007FFFFF)) | _i(0x3F800000)))  # the significand, in [1, 2)
    big = s > _f(1.41421356)
    m = (s * _f(0.5) if big else s) - _f(1.0)
    fe = np.float64(e + _i(1) if big else e)
    p = ((((((_P7 * m + _P6) * m + _P5) * m + _P4) * m + _P3) * m + _P2) * m + _P1) * m + _P0
    z = m * m
    y = _f(np.float64(m * z * p - _f(0.5) * z + m) + fe * _LN2)
    y = y if x > _f(0.0) else (_f(-np.inf) if x == _f(0.0) else _f(np.nan))
    return y if x < _f(np.inf) else x  # inf and NaN pass through


def exp_neg(x):
    """:math:`e^x` for ``x <= 0`` (float32 vectorisable, float64 libm)."""
    return math.exp(x)


def log_pos(x):
    """:math:`\\log x` for ``x >= 0`` (float32 vectorisable, float64 libm)."""
    return math.log(x)


@overload(exp_neg)
def _exp_neg(x):
    if x == types.float32:
        return lambda x: _expf_neg(x)
    return lambda x: math.exp(x)


@overload(log_pos)
def _log_pos(x):
    if x == types.float32:
        return lambda x: _logf_pos(x)
    return lambda x: math.log(x)
