r"""numba kernels of binary BP in log-odds (imported lazily by :mod:`gbpn.nn.binary`; needs numba).

With two classes a normalised message or belief is one number, its log-odds
:math:`x = \log p(0) - \log p(1)`. Edges are in the paired layout (:func:`~gbpn.nn.functional.paired_order`):
edge ``k < h`` runs ``u[k] -> v[k]`` and edge ``h + k`` is its reverse, so one pass over the ``h``
pairs reads both messages of a pair side by side and writes both new ones in place. Beliefs
(``B``, float64) are gathered and the new messages scattered into one accumulator row per thread
(``acc[t]``, float64): each block of pairs runs on its own thread with its own row, no write
conflicts; :func:`beliefs` then sums the rows per node. The kernels flush denormals to zero
while they run, as the general ones do: ``e^-|x|`` of a confident cavity is denormal in float32.
"""
from __future__ import annotations

import math

from numba import njit

from gbpn.nn._fused_kernels import _flush_denormals, _restore

_FM = {"contract", "reassoc", "nsz"}


@njit(inline="always", fastmath=_FM)
def _message(x, a0, a1, b0, b1):
    """Log-odds of the message for a cavity of log-odds ``x``: ``log((a0 e^x + a1) / (b0 e^x + b1))``
    with ``a = (H00, H10)``, ``b = (H01, H11)``; ``e^-|x|`` only, so clamped cavities (|x| ~ 1e4) saturate."""
    if x > 0.0:
        t = math.exp(-x)
        return math.log((a0 + a1 * t) / (b0 + b1 * t))
    t = math.exp(x)
    return math.log((a0 * t + a1) / (b0 * t + b1))


@njit(inline="always", fastmath=_FM)
def _damped(new, old, d):
    """Log-odds of ``(1 - d) sigmoid(new) + d sigmoid(old)`` (damping of normalised messages)."""
    p = (1.0 - d) / (1.0 + math.exp(-new)) + d / (1.0 + math.exp(-old))
    q = (1.0 - d) / (1.0 + math.exp(new)) + d / (1.0 + math.exp(old))
    return math.log(p / q)


@njit(inline="always", fastmath=_FM)
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(nogil=True, cache=True, fastmath=_FM)
def messages(u, blocks, v, Bc, M, M_new, acc, mw, coef, damping):
    """New messages of pairs ``blocks[0]:blocks[1]`` from ``M`` into ``M_new`` ``[2h]`` (may be ``M``
    itself: each pair reads its own two messages before writing them), scattered into ``acc[0]``
    weighted by ``mw`` ``[2h]`` (empty: all ones). ``Bc`` (the beliefs), ``coef = (H00, H10, H01, H11)``
    and ``mw`` are in the messages' dtype, so that float32 messages are computed in float32."""
    h = u.shape[0]
    a0, a1, b0, b1 = coef[0], coef[1], coef[2], coef[3]
    one = a0 / a0
    d = damping[0]
    weighted = mw.shape[0] > 0
    old = _flush_denormals()
    for k in range(blocks[0], blocks[1]):
        a = u[k]
        b = v[k]
        m_ab = M[k]
        m_ba = M[h + k]
        w_ab = mw[k] if weighted else one
        w_ba = mw[h + k] if weighted else one
        n_ab = _message(Bc[a] - w_ba * m_ba, a0, a1, b0, b1)
        n_ba = _message(Bc[b] - w_ab * m_ab, a0, a1, b0, b1)
        if d > 0.0:
            n_ab = _damped(n_ab, m_ab, d)
            n_ba = _damped(n_ba, m_ba, d)
        M_new[k] = n_ab
        M_new[h + k] = n_ba
        acc[0, b] += w_ab * n_ab
        acc[0, a] += w_ba * n_ba
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


@njit(inline="always", fastmath=_FM)
def _message_vjp(x, g, m_old, d, coef, gH):
    """For one message ``n = damp(f(x), m_old)`` and the gradient ``g`` of ``n``: adds the coupling's
    gradient to ``gH`` ``[4]`` (w.r.t. log H00, log H10, log H01, log H11) and returns the gradients of
    the cavity ``x`` and of ``m_old`` (through the damping)."""
    carry = 0.0
    if d > 0.0:
        n = _message(x, coef[0], coef[1], coef[2], coef[3])
        p = (1.0 - d) * _sigmoid(n) + d * _sigmoid(m_old)
        q = (1.0 - d) * _sigmoid(-n) + d * _sigmoid(-m_old)
        scale = g / (p * q)
        carry = scale * d * _sigmoid(m_old) * _sigmoid(-m_old)
        g = scale * (1.0 - d) * _sigmoid(n) * _sigmoid(-n)
    # sa = sigmoid(x + log(H00/H10)), sb = sigmoid(x + log(H01/H11)) from one exponential
    if x > 0.0:
        t = math.exp(-x)
        sa = coef[0] / (coef[0] + coef[1] * t)
        sb = coef[2] / (coef[2] + coef[3] * t)
    else:
        t = math.exp(x)
        sa = coef[0] * t / (coef[0] * t + coef[1])
        sb = coef[2] * t / (coef[2] * t + coef[3])
    gH[0] += g * sa
    gH[1] += g * (1.0 - sa)
    gH[2] -= g * sb
    gH[3] -= g * (1.0 - sb)
    return g * (sa - sb), carry


@njit(nogil=True, cache=True, fastmath=_FM)
def backward_pairs(u, blocks, v, B, M, G, gm, acc, gH, mw, coef, damping):
    """The backward of one step for pairs ``blocks[0]:blocks[1]``: ``B`` and ``M`` are the step's
    input beliefs and messages, ``gm`` ``[N]`` the gradient of its output beliefs (0 at known nodes),
    ``G`` ``[2h]`` on entry the gradient of its output messages from later steps, on return the
    gradient of its input messages from this step (in place); the gradient of its input beliefs
    goes to ``acc[0]``, the coupling's to ``gH[0]``."""
    h = u.shape[0]
    d = damping[0]
    weighted = mw.shape[0] > 0
    g4 = gH[0]
    old = _flush_denormals()
    for k in range(blocks[0], blocks[1]):
        a = u[k]
        b = v[k]
        w_ab = mw[k] if weighted else 1.0
        w_ba = mw[h + k] if weighted else 1.0
        m_ab = M[k]
        m_ba = M[h + k]
        gx_ab, carry_ab = _message_vjp(B[a] - w_ba * m_ba, w_ab * gm[b] + G[k], m_ab, d, coef, g4)
        gx_ba, carry_ba = _message_vjp(B[b] - w_ab * m_ab, w_ba * gm[a] + G[h + k], m_ba, d, coef, g4)
        acc[0, a] += gx_ab
        acc[0, b] += gx_ba
        G[k] = carry_ab - w_ab * gx_ba
        G[h + k] = carry_ba - w_ba * gx_ab
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
