r"""numba kernels of binary BP in log-odds (imported lazily by :mod:`gbpn.nn.binary`; needs numba).

With two classes a normalised message or belief is one number, its log-odds
:math:`x = \log p(0) - \log p(1)`. Edges are in the paired layout (:func:`~gbpn.nn.functional.paired_order`):
edge ``k < h`` runs ``u[k] -> v[k]`` and edge ``h + k`` is its reverse, so one pass over the ``h``
pairs reads both messages of a pair side by side and writes both new ones in place. Beliefs
(``B``, float64) are gathered and the new messages scattered into one accumulator row per thread
(``acc[t]``, float64): each block of pairs runs on its own thread with its own row, no write
conflicts; :func:`beliefs` then sums the rows per node.
"""
from __future__ import annotations

import math

from numba import njit

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


@njit(nogil=True, cache=True, fastmath=_FM)
def messages(u, blocks, v, B, M, acc, mw, coef, damping):
    """New messages of pairs ``blocks[0]:blocks[1]`` in place in ``M`` ``[2h]``, scattered into ``acc[0]``
    weighted by ``mw`` ``[2h]`` (empty: all ones). ``coef = (H00, H10, H01, H11)``."""
    h = u.shape[0]
    a0, a1, b0, b1 = coef[0], coef[1], coef[2], coef[3]
    d = damping[0]
    weighted = mw.shape[0] > 0
    for k in range(blocks[0], blocks[1]):
        a = u[k]
        b = v[k]
        m_ab = M[k]
        m_ba = M[h + k]
        w_ab = mw[k] if weighted else 1.0
        w_ba = mw[h + k] if weighted else 1.0
        n_ab = _message(B[a] - w_ba * m_ba, a0, a1, b0, b1)
        n_ba = _message(B[b] - w_ab * m_ab, a0, a1, b0, b1)
        if d > 0.0:
            n_ab = _damped(n_ab, m_ab, d)
            n_ba = _damped(n_ba, m_ba, d)
        M[k] = n_ab
        M[h + k] = n_ba
        acc[0, b] += w_ab * n_ab
        acc[0, a] += w_ba * n_ba


@njit(nogil=True, cache=True, fastmath=_FM)
def beliefs(phi, blocks, acc, B, known, clamp, res):
    """Beliefs of nodes ``blocks[0]:blocks[1]``: ``phi`` plus every thread's accumulated messages
    (the rows are zeroed for the next step), ``clamp`` where ``known`` (empty: none), and with a
    non-empty ``res`` each node's L1 change of its two probabilities."""
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
