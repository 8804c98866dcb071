r"""numba kernels of binary BP in log-odds (imported lazily by :mod:`gbpn.bp.backends.cpu_binary`; needs numba).

With two classes a normalised message or belief is one number, its log-odds
:math:`x = \log p(0) - \log p(1)`. Edges are in the paired layout (:func:`~gbpn.graph.reverse.paired_order`):
edge ``k < h`` runs ``u[k] -> v[k]`` and edge ``h + k`` is its reverse, so one pass over the ``h``
pairs reads both messages of a pair side by side and writes both new ones in place. Beliefs
(``B``, float64) are gathered and the new messages scattered into one accumulator row per thread
(``acc[t]``, float64): each block of pairs runs on its own thread with its own row, no write
conflicts; :func:`beliefs` then sums the rows per node. The pairs go in chunks of ``_CHUNK``:
gather the chunk's cavities, compute its messages (or their vector-Jacobian products) in one
branch-free loop, then store and scatter. That middle loop calls only the float32 exponential and
logarithm of :mod:`gbpn.bp.backends._numba.fastmath`, so LLVM vectorises it; with libm's, one call per message,
they were most of the step. The kernels flush denormals to zero while they run, as the general
ones do: ``e^-|x|`` of a confident cavity is denormal in float32.
"""
from __future__ import annotations

import math

import numpy as np

from numba import njit

from gbpn.bp.backends._numba.fastmath import exp_neg, log_pos
from gbpn.bp.backends._numba.fused_kernels import _flush_denormals, _restore

_FM = {"contract", "reassoc", "nsz"}
_CHUNK = 256  # pairs per chunk of the message loops


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _odds(x, one):
    """``(p, q)`` with ``p / q = e^x``, from ``e^-|x|`` only (no overflow): ``(1, e^-x)`` for
    ``x > 0``, else ``(e^x, 1)``. Branch-free (selects), so that loops calling it vectorise."""
    t = exp_neg(-abs(x))
    return (one if x > 0.0 else t), (t if x > 0.0 else one)


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _message(x, a0, a1, b0, b1, one):
    """Log-odds of the message for a cavity of log-odds ``x``: ``log((a0 e^x + a1) / (b0 e^x + b1))``
    with ``a = (H00, H10)``, ``b = (H01, H11)``; clamped cavities (|x| ~ 1e4) saturate."""
    p, q = _odds(x, one)
    return log_pos((a0 * p + a1 * q) / (b0 * p + b1 * q))


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _ratio_sigmoid(x, c0, c1, one):
    """``sigmoid(x + log(c0 / c1))``."""
    p, q = _odds(x, one)
    return c0 * p / (c0 * p + c1 * q)


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _sigmoid(x, one):
    """``1 / (1 + e^-x)``."""
    return _ratio_sigmoid(x, one, one, one)


@njit(inline="always", fastmath=_FM, error_model="numpy")
def _damped(new, old, d, one):
    """Log-odds of ``(1 - d) sigmoid(new) + d sigmoid(old)`` (damping of normalised messages)."""
    p = (one - d) * _sigmoid(new, one) + d * _sigmoid(old, one)
    q = (one - d) * _sigmoid(-new, one) + d * _sigmoid(-old, one)
    return log_pos(p / q)


@njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy")
def messages(u, blocks, v, Bc, M, M_new, acc, mw, coef, damping):
    """New messages of pairs ``blocks[0]:blocks[1]`` from ``M`` into ``M_new`` ``[2h]`` (may be ``M``
    itself: each pair reads its own two messages before writing them), scattered into ``acc[0]``
    weighted by ``mw`` ``[2h]`` (empty: all ones). ``Bc`` (the beliefs), ``coef = (H00, H10, H01, H11)``
    and ``mw`` are in the messages' dtype, so that float32 messages are computed in float32.
    Pairs go in chunks of ``_CHUNK``: the cavities are gathered into a buffer, the messages computed
    over it in one loop that vectorises, then stored and scattered."""
    h = u.shape[0]
    a0, a1, b0, b1 = coef[0], coef[1], coef[2], coef[3]
    one = a0 / a0
    d = damping[0] * one
    weighted = mw.shape[0] > 0
    x = np.empty(2 * _CHUNK, M.dtype)  # cavities of the chunk's u -> v edges, then of v -> u
    old = _flush_denormals()
    for start in range(blocks[0], blocks[1], _CHUNK):
        n = min(_CHUNK, blocks[1] - start)
        for j in range(n):
            k = start + j
            x[j] = Bc[u[k]] - (mw[h + k] if weighted else one) * M[h + k]
            x[n + j] = Bc[v[k]] - (mw[k] if weighted else one) * M[k]
        for j in range(2 * n):
            x[j] = _message(x[j], a0, a1, b0, b1, one)
        if d > 0.0:
            for j in range(n):
                x[j] = _damped(x[j], M[start + j], d, one)
                x[n + j] = _damped(x[n + j], M[h + start + j], d, one)
        for j in range(n):
            k = start + j
            M_new[k] = x[j]
            M_new[h + k] = x[n + j]
            acc[0, v[k]] += (mw[k] if weighted else one) * x[j]
            acc[0, u[k]] += (mw[h + k] if weighted else one) * x[n + j]
    _restore(old)


@njit(nogil=True, cache=True, fastmath=_FM)
def beliefs(phi, blocks, acc, B, Bc, known, clamp, res):
    """Beliefs of nodes ``blocks[0]:blocks[1]``: ``phi`` plus every thread's accumulated messages
    (the rows are zeroed for the next step), ``clamp`` where ``known`` (empty: none), into ``B``
    (float64) and ``Bc`` (the messages' dtype); with a non-empty ``res`` each node's L1 change of its
    two probabilities."""
    for i in range(blocks[0], blocks[1]):
        s = phi[i]
        for t in range(acc.shape[0]):
            s += acc[t, i]
            acc[t, i] = 0.0
        if known.shape[0] > 0 and known[i]:
            s = clamp[i]
        if res.shape[0] > 0:
            res[i] = 2.0 * abs(1.0 / (1.0 + math.exp(-s)) - 1.0 / (1.0 + math.exp(-B[i])))
        B[i] = s
        Bc[i] = s


@njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy")
def backward_pairs(u, blocks, v, B, M, G, gm, acc, gH, mw, coef, damping):
    """The backward of one step for pairs ``blocks[0]:blocks[1]``: ``B`` and ``M`` are the step's
    input beliefs and messages, ``gm`` ``[N]`` the gradient of its output beliefs (0 at known nodes),
    ``G`` ``[2h]`` on entry the gradient of its output messages from later steps, on return the
    gradient of its input messages from this step (in place); the gradient of its input beliefs
    goes to ``acc[0]``, the coupling's (w.r.t. log H00, log H10, log H01, log H11) to ``gH[0]``.
    In chunks as :func:`messages`: gathered cavities (in the messages' dtype, as the forward computed
    them) and message gradients, one vectorised loop for the vector-Jacobian products, then the
    scatter. With ``n = damp(f(x), m_old)``: ``f'(x) = sa - sb``, ``sa = sigmoid(x + log H00/H10)``,
    ``sb = sigmoid(x + log H01/H11)``."""
    h = u.shape[0]
    a0, a1, b0, b1 = coef[0], coef[1], coef[2], coef[3]
    one = a0 / a0
    d = damping[0] * one
    weighted = mw.shape[0] > 0
    x = np.empty(2 * _CHUNK, M.dtype)
    g = np.empty(2 * _CHUNK)  # on entry the messages' gradients, then the cavities'
    carry = np.zeros(2 * _CHUNK)  # the gradients of the old messages through the damping
    s0 = s1 = s2 = s3 = 0.0
    old = _flush_denormals()
    for start in range(blocks[0], blocks[1], _CHUNK):
        n = min(_CHUNK, blocks[1] - start)
        for j in range(n):
            k = start + j
            w_ab = mw[k] if weighted else one
            w_ba = mw[h + k] if weighted else one
            x[j] = B[u[k]] - w_ba * M[h + k]
            x[n + j] = B[v[k]] - w_ab * M[k]
            g[j] = w_ab * gm[v[k]] + G[k]
            g[n + j] = w_ba * gm[u[k]] + G[h + k]
        if d > 0.0:
            for j in range(2 * n):
                m_old = M[start + j] if j < n else M[h + start + j - n]
                f = _message(x[j], a0, a1, b0, b1, one)
                sf, sfn = _sigmoid(f, one), _sigmoid(-f, one)  # not 1 - sf: that cancels
                so, son = _sigmoid(m_old, one), _sigmoid(-m_old, one)
                scale = g[j] / (((one - d) * sf + d * so) * ((one - d) * sfn + d * son))
                carry[j] = scale * d * so * son
                g[j] = scale * (one - d) * sf * sfn
        for j in range(2 * n):
            sa = _ratio_sigmoid(x[j], a0, a1, one)
            sb = _ratio_sigmoid(x[j], b0, b1, one)
            gj = g[j]
            s0 += gj * sa
            s1 += gj * (one - sa)
            s2 -= gj * sb
            s3 -= gj * (one - sb)
            g[j] = gj * (sa - sb)
        for j in range(n):
            k = start + j
            acc[0, u[k]] += g[j]
            acc[0, v[k]] += g[n + j]
            G[k] = carry[j] - (mw[k] if weighted else one) * g[n + j]
            G[h + k] = carry[n + j] - (mw[h + k] if weighted else one) * g[j]
    gH[0, 0] += s0
    gH[0, 1] += s1
    gH[0, 2] += s2
    gH[0, 3] += s3
    _restore(old)


@njit(nogil=True, cache=True, fastmath=_FM)
def backward_nodes(gphi, blocks, acc, gm, known):
    """Nodes ``blocks[0]:blocks[1]``: the gradient of a step's input beliefs, summed over the threads'
    rows (zeroed), 0 at known nodes (their beliefs are the clamp), into ``gm`` and added to ``gphi``."""
    for i in range(blocks[0], blocks[1]):
        s = 0.0
        for t in range(acc.shape[0]):
            s += acc[t, i]
            acc[t, i] = 0.0
        if known.shape[0] > 0 and known[i]:
            s = 0.0
        gm[i] = s
        gphi[i] += s
