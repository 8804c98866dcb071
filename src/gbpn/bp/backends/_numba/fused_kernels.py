r"""numba kernels of the fused BP step (imported lazily by :mod:`gbpn.bp.backends.cpu_fused`; needs numba).

Edges are in CSR order by destination: the incoming edges of node ``i`` are ``rowptr[i]:rowptr[i+1]``,
``src[k]`` is the source of edge ``k`` and ``rev[k]`` the CSR position of its reverse. Each kernel is
one pass over the nodes of ``blocks`` (consecutive node ranges), and every write goes to the node's
own row or to its own incoming edges: :mod:`gbpn.bp.backends.cpu_fused` runs disjoint blocks on several threads
at once (the kernels release the GIL) without write conflicts, one call per thread, so that no
numba threading layer runs beside torch's OpenMP.

Messages and beliefs are kept in the linear domain, normalised: ``M[k]`` sums to 1 over classes
and ``B[i] = exp(b[i])`` with ``b`` the normalised log-belief. The cavity of edge ``k`` is
``B[src[k]] / M[rev[k]]`` (or, with message weights, ``exp(b[src] - w'_rev log M[rev])`` shifted by
its max): both are positive and bounded by ``c max H / min H``, which the caller keeps inside the
dtype. Options are passed as arrays (empty = off) so that one compiled version per dtype serves all.

The class count ``c`` is only known at run time, so loops over classes are short (2 to ~50): the
O(c^2) products run on chunks of consecutive edges (:func:`_chunk_edges`) held class-major (``[c, W]``),
so that the innermost loop runs along the chunk and vectorises whatever ``c`` is; from
``_BLAS_CLASSES`` classes on they are BLAS matrix products (numba's ``np.dot``), which keep
operands in registers where the loop streams them through memory, and without edge weights the
forward's chunks (and the backward's, where the cavities were saved) are held edge-major
(``[_CHUNK, c]``), so that the per-edge loops, the cavity's division among them, run along the
classes in contiguous memory and vectorise.

The cavity gathers two rows per edge: the reverse message ``M[rev[k]]``, a row of an ``[E, c]``
array in no useful order, and the source's belief ``B[src[k]]``, a row of an ``[N, c]`` array that
the node renumbering brings closer but not into cache. Each is a cache miss on any graph much
larger than the cache, so the cavity loop prefetches both rows ``_AHEAD`` edges before their use,
and the misses overlap. In training, :func:`forward_step` saves each step's cavities and
:func:`backward_step` reads them in edge order instead of gathering them again. Arrays written now
and read only a whole pass later (the saved cavities, the cavity gradients) are written with
non-temporal stores once they outgrow the cache.
"""
from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# reassociation lets LLVM vectorise the reductions; no nnan/ninf: LOG_ZERO rows exp() to 0
_FM = {"contract", "reassoc", "nsz"}
_CHUNK = 128  # edges per chunk from _BLAS_CLASSES classes on (the rows of a BLAS product)
_LOOP_CHUNK = 256  # edges per chunk below, where the products are loops (c = 7: the step 0.85x of 128; 512 no faster)
_GROUP = 1024  # edges per node group: a group's messages are still in cache when its beliefs read them
_BLAS_CLASSES = 8  # from this many classes on, chunk products go to BLAS (below, a call costs more than the loop)
_AHEAD = 24  # edges between the prefetch of a gathered row (reverse message, source belief) and its use
_PREFETCH_MIN = 1 << 19  # messages (E x c numbers) from which they no longer sit in cache and prefetching pays
_ROW_PAD = 128  # least numbers per row of the forward's per-node scratch (1 KB: more than a vector loop's reach)


# Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) while a kernel runs: beliefs far
# below the largest one are denormal in float32, and every arithmetic operation on a denormal
# costs a microcode assist (about 100 cycles); flushing them to zero changes values by < 1e-38.
_FTZ_DAZ = 0x8040
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _mxcsr_call(builder, name, ptr):
    fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    builder.call(fn, [builder.bitcast(ptr, ir.IntType(8).as_pointer())])


@intrinsic
def _get_mxcsr(typingctx):
    def codegen(context, builder, sig, args):
        ptr = cgutils.alloca_once(builder, ir.IntType(32))
        _mxcsr_call(builder, "llvm.x86.sse.stmxcsr", ptr)
        return builder.load(ptr)
    return types.uint32(), codegen


@intrinsic
def _put_mxcsr(typingctx, value):
    def codegen(context, builder, sig, args):
        ptr = cgutils.alloca_once(builder, ir.IntType(32))
        builder.store(builder.trunc(args[0], ir.IntType(32)), ptr)
        _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", ptr)
        return context.get_dummy_value()
    return types.none(value), codegen


@intrinsic
def _prefetch(typingctx, arr, index):
    """Hint the CPU to fetch the cache line holding ``arr.flat[index]`` (``llvm.prefetch``: read, keep)."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), i8p), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.none(arr, index), codegen


@intrinsic
def _stream(typingctx, arr, index, value):
    """``arr.flat[index] = value`` (C-contiguous ``arr``) as a non-temporal store: written to memory
    without first reading the line into the cache, for arrays written now and read only much later.
    Other threads see such stores after :func:`_fence`."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        store = builder.store(args[2], builder.gep(data, [args[1]]))
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return types.none(arr, index, arr.dtype), codegen


@intrinsic
def _sfence(typingctx):
    """Order the non-temporal stores before every later store (x86 ``sfence``)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


if _X86:
    @njit(inline="always")
    def _fence():
        _sfence()

    @njit(inline="always")
    def _flush_denormals():
        """Turn FTZ/DAZ on for this thread; returns the MXCSR to restore."""
        old = _get_mxcsr()
        _put_mxcsr(old | np.uint32(_FTZ_DAZ))
        return old

    @njit(inline="always")
    def _restore(old):
        _put_mxcsr(old)
else:  # other CPUs: leave the FP environment alone (their non-temporal stores are ordered)
    @njit(inline="always")
    def _fence():
        pass

    @njit(inline="always")
    def _flush_denormals():
        return np.uint32(0)

    @njit(inline="always")
    def _restore(old):
        pass


@njit(inline="always")
def _group_end(rowptr, i0, end):
    """The node after a group starting at ``i0``: whole nodes, about ``_GROUP`` edges (at least one node)."""
    i1 = i0 + 1
    while i1 < end and rowptr[i1] - rowptr[i0] < _GROUP:
        i1 += 1
    return i1


@njit(inline="always")
def _chunk_edges(c):
    """Edges per chunk of :func:`forward_step` and :func:`backward_step`. Below ``_BLAS_CLASSES``
    classes an edge's numbers do not depend on where its chunk starts (the products are loops over
    the classes), so the chunk's length changes timing only."""
    return _CHUNK if c >= _BLAS_CLASSES else _LOOP_CHUNK


@njit(inline="always")
def _beyond_cache(E, c):
    """Whether ``[E, c]`` edge arrays (messages, cavities, their gradients) outgrow the cache: then
    their gathered rows are prefetched and the rows written for a later pass are streamed."""
    return E * c >= _PREFETCH_MIN


@njit(inline="always")
def _prefetch_distance(E, c):
    """Edges between a reverse row's prefetch and its use; ``E`` (never) while the ``[E, c]``
    messages fit in cache."""
    return _AHEAD if _beyond_cache(E, c) else E


@njit(inline="always")
def _prefetch_row(M, r, c):
    """Prefetch row ``r`` of the ``[E, c]`` array ``M`` (every cache line it touches)."""
    base = r * c
    for off in range(0, c, 16):
        _prefetch(M, base + off)
    _prefetch(M, base + c - 1)


@njit(inline="always")
def _prefetch_cavity(k, src, rev, b_prev, B_prev, M_prev, mw, c):
    """Prefetch the rows the cavity of edge ``k`` reads (:func:`_cavity`): its reverse message and
    its source's belief (``b`` with message weights, else ``B``)."""
    _prefetch_row(M_prev, rev[k], c)
    _prefetch_row(B_prev if mw.shape[0] == 0 else b_prev, src[k], c)


@njit(inline="always", fastmath=_FM)
def _weighted_cavity(cav, e, k, src, rev, b_prev, M_prev, mw):
    """``cav[:, e]`` for edge ``k`` with message weights: ``exp(b[src] - w'_rev log M[rev] - max)``."""
    c = cav.shape[0]
    s = src[k]
    r = rev[k]
    w = mw[r]
    mx = -np.inf
    for a in range(c):
        v = b_prev[s, a] - w * np.log(M_prev[r, a])
        cav[a, e] = v
        mx = max(mx, v)
    for a in range(c):
        cav[a, e] = np.exp(cav[a, e] - mx)


@njit(inline="always", fastmath=_FM)
def _plain_cavity(cav, e, k, src, rev, B_prev, M_prev):
    """``cav[:, e] = B[src] / M[rev]`` for edge ``k`` (no message weights)."""
    s = src[k]
    r = rev[k]
    for a in range(cav.shape[0]):
        cav[a, e] = B_prev[s, a] / M_prev[r, a]


@njit(inline="always", fastmath=_FM)
def _cavity(cav, e, k, src, rev, b_prev, B_prev, M_prev, mw):
    """``cav[:, e]`` for edge ``k``: :func:`_plain_cavity`, or with message weights
    :func:`_weighted_cavity`."""
    if mw.shape[0] == 0:
        _plain_cavity(cav, e, k, src, rev, B_prev, M_prev)
    else:
        _weighted_cavity(cav, e, k, src, rev, b_prev, M_prev, mw)


@njit(inline="always", fastmath=_FM)
def _cavities(cav, k0, n, src, rev, b_prev, B_prev, M_prev, mw):
    """``cav[:, e]`` for edge ``k0 + e`` (:func:`_cavity`), prefetching the reverse message and the
    source's belief ahead. The message-weight test is taken once per chunk, outside the edge loops:
    inside them, beside the prefetches, it made the unweighted loop 3-4x slower (c = 7, one thread)."""
    E = rev.shape[0]
    c = cav.shape[0]
    ahead = _prefetch_distance(E, c)
    if mw.shape[0] == 0:
        for e in range(n):
            k = k0 + e
            if k + ahead < E:
                _prefetch_row(M_prev, rev[k + ahead], c)
                _prefetch_row(B_prev, src[k + ahead], c)
            _plain_cavity(cav, e, k, src, rev, B_prev, M_prev)
    else:
        for e in range(n):
            k = k0 + e
            if k + ahead < E:
                _prefetch_row(M_prev, rev[k + ahead], c)
                _prefetch_row(b_prev, src[k + ahead], c)
            _weighted_cavity(cav, e, k, src, rev, b_prev, M_prev, mw)


@njit(inline="always")
def _save_cavities(C, cav, k0, n, stream):
    """``C[k0 + e] = cav[:, e]``: an edge-major chunk's cavities as rows, for the backward; ``stream``:
    non-temporal (the backward reads them one whole pass later)."""
    c = cav.shape[0]
    if not stream:
        for e in range(n):
            for a in range(c):
                C[k0 + e, a] = cav[a, e]
    else:
        for e in range(n):
            base = (k0 + e) * c
            for a in range(c):
                _stream(C, base + a, cav[a, e])


@njit(inline="always")
def _load_cavities(cav, C, k0, n):
    """``cav[:, e] = C[k0 + e]``: an edge-major chunk's cavities as :func:`_save_cavities` wrote them."""
    for e in range(n):
        for a in range(cav.shape[0]):
            cav[a, e] = C[k0 + e, a]


@njit(inline="always")
def _save_block(Cf, cav, k0, n, stream):
    """The class-major chunk's cavities ``cav[:, :n]`` into numbers ``k0 c`` to ``(k0 + n) c`` of
    ``Cf`` (the ``[E, c]`` cavities, flat) as one class-major block (number ``k0 c + a n + e``), for
    the class-major backward, which takes the same chunks: a contiguous copy on both sides, where
    edge-major rows were a transpose on both. ``stream``: non-temporal."""
    c = cav.shape[0]
    base = k0 * c
    for a in range(c):
        if stream:
            for e in range(n):
                _stream(Cf, base + a * n + e, cav[a, e])
        else:
            for e in range(n):
                Cf[base + a * n + e] = cav[a, e]


@njit(inline="always")
def _load_block(cav, Cf, k0, n):
    """``cav[:, :n]``: the chunk's cavities from the class-major block :func:`_save_block` wrote."""
    c = cav.shape[0]
    base = k0 * c
    for a in range(c):
        for e in range(n):
            cav[a, e] = Cf[base + a * n + e]


@njit(inline="always", fastmath=_FM)
def _chunk_matmul(out, A, x, n):
    """``out[:, :n] = A @ x[:, :n]``, the innermost loop along the chunk (BLAS on whole chunks from
    ``_BLAS_CLASSES`` classes on: the columns from ``n`` on are computed from whatever ``x`` holds there)."""
    if A.shape[1] >= _BLAS_CLASSES:
        np.dot(A, x, out)
        return
    for i in range(A.shape[0]):
        for e in range(n):
            out[i, e] = 0
        for j in range(A.shape[1]):
            h = A[i, j]
            for e in range(n):
                out[i, e] += h * x[j, e]


@njit(inline="always", fastmath=_FM)
def _products(P, cav, n, HT, L, ew, k0, Hw):
    """``P[:, e] = H^T cav[:, e]`` (``HT`` = H^T; ``H^{w_k}`` per edge with edge weights)."""
    if ew.shape[0] == 0:
        _chunk_matmul(P, HT, cav, n)
    else:
        for e in range(n):
            _weighted_product(P, cav, e, ew[k0 + e], L, Hw)


@njit(inline="always", fastmath=_FM)
def _weighted_product(P, cav, e, w, L, Hw):
    """``P[:, e] = (H^w)^T cav[:, e]``, leaving ``H^w = exp(w L)`` in ``Hw``."""
    c = L.shape[0]
    for a in range(c):
        for b in range(c):
            Hw[a, b] = np.exp(w * L[a, b])
    for b in range(c):
        t = Hw[0, 0] * 0  # a zero of the dtype (Hw is set; P may hold garbage, and garbage * 0 can be NaN)
        for a in range(c):
            t += cav[a, e] * Hw[a, b]
        P[b, e] = t


@njit(inline="always", fastmath=_FM)
def _column_sums(out, P, n):
    c = P.shape[0]
    for e in range(n):
        out[e] = 0
    for b in range(c):
        for e in range(n):
            out[e] += P[b, e]


@njit(inline="always", fastmath=_FM)
def _inverse_row_sum(PW, e, one):
    """``one / sum(PW[e])``: the normaliser of an edge-major chunk's message ``e`` (np.divide: no
    zero-divisor test under the backward's default error model either)."""
    z = PW[e, 0] * 0
    for b in range(PW.shape[1]):
        z += PW[e, b]
    return np.divide(one, z)


@njit(inline="always", fastmath=_FM)
def _message_rows(k0, n, cavW, PW, src, rev, b_prev, B_prev, M_prev, M_new, C, Zs, H, lam, mw, stream, one):
    r""":func:`forward_step`'s edge pass for one chunk, edge-major (``[_CHUNK, c]`` scratch), from
    ``_BLAS_CLASSES`` classes on without edge weights: the cavity's division and the normalisation
    run along the classes in contiguous memory and vectorise (class-major, the cavity's loop strides
    across the chunk). ``P = cav H`` over the whole chunk (the rows past ``n`` hold finite values
    of an earlier chunk, or the scratch's zeros). A non-empty ``Zs`` keeps each edge's ``1 / Z``."""
    c = cavW.shape[1]
    _cavities(cavW.T, k0, n, src, rev, b_prev, B_prev, M_prev, mw)
    if C.shape[0] > 0:
        _save_cavities(C, cavW.T, k0, n, stream)
    np.dot(cavW, H, PW)
    for e in range(n):
        k = k0 + e
        zi = _inverse_row_sum(PW, e, one)
        if Zs.shape[0] > 0:
            Zs[k] = zi
        if lam > 0:
            for b in range(c):
                M_new[k, b] = (one - lam) * PW[e, b] * zi + lam * M_prev[k, b]
        else:
            for b in range(c):
                M_new[k, b] = PW[e, b] * zi


# error_model="numpy": numba's default checks every division for a zero divisor (to raise
# ZeroDivisionError), a branch that keeps the cavity's division loop scalar; without it the loop
# vectorises, with the same IEEE quotients (bitwise equal results; cavities never divide by zero).
# Measured 0.75x the training forward at c = 40. backward_step keeps the default (with the numpy
# model as a whole it was 1.03-1.24x slower on an Intel Xeon, 1.26x on an AMD EPYC); its edge-major
# chunk divides with np.divide instead (numpy's semantics under either model).
@njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy")
def forward_step(rowptr, blocks, src, rev, phi, known, clamp, b_prev, B_prev, M_prev, M_new, b_out, B_out,
                 res, H, HT, L, damping, ew, mw, span, C, Zs):
    r"""One BP step: for each node ``i`` and each incoming edge ``k``

    .. math::
        P_k = (H^{w_k})^\top \mathrm{cav}_k,\quad M'_k = (1-\lambda) P_k / \textstyle\sum P_k + \lambda M_k,
        \quad b'_i = \mathrm{pin}\big(\mathrm{lognorm}(\phi_i + \textstyle\sum_k w'_k \log M'_k)\big)

    writing ``M_new``, ``b_out``, ``B_out = exp(b_out)``, if ``res`` is non-empty the L1 change
    of ``B`` per node, and if ``C`` is non-empty the cavities (``[E, c]``, for :func:`backward_step`:
    rows on edge-major chunks, one class-major block per chunk on the others, :func:`_save_block`);
    if ``Zs`` is non-empty (edge-major chunks only), each message's inverse normaliser ``1 / Z``.
    ``damping`` is a 1-element array of the dtype (no float64 promotion). Without message weights
    the sum of logs is the log of float64 products of ``span`` messages at a time (``span`` small
    enough that no product underflows). From ``_BLAS_CLASSES`` classes on without
    edge weights, the edge pass runs on edge-major chunks (:func:`_message_rows`).
    """
    n_blocks = blocks.shape[0] - 1
    c = phi.shape[1]
    lam = damping[0]
    one = lam * 0 + 1
    stream = _beyond_cache(rev.shape[0], c)
    # per-block scratch
    W = _chunk_edges(c)
    cav_ = np.zeros((n_blocks, c, W), phi.dtype)  # zeros: whole-chunk BLAS products read past n
    P_ = np.empty((n_blocks, c, W), phi.dtype)
    inv_ = np.empty((n_blocks, W), phi.dtype)
    Hw_ = np.empty((n_blocks, c, c), phi.dtype)
    # padded rows: the loop that writes B_out[i] from z runs vectorised only if B_out[i] does not start
    # within a few vectors after z (LLVM tests it at run time); nothing else can lie there now, so the
    # scalar loop, which sums in another order, never runs instead (by where the heap put z and B_out)
    acc_ = np.empty((n_blocks, max(c, _ROW_PAD)), np.float64)
    z_ = np.empty((n_blocks, max(c, _ROW_PAD)), np.float64)
    rows = c >= _BLAS_CLASSES and ew.shape[0] == 0  # the edge-major chunk (_message_rows)
    Cf = C.reshape(-1)  # once: numba's reshape is a library call
    for blk in range(n_blocks):
        old = _flush_denormals()
        cav, P, inv, Hw, acc, z = cav_[blk], P_[blk], inv_[blk], Hw_[blk], acc_[blk], z_[blk]
        cavW, PW = cav.reshape((W, c)), P.reshape((W, c))
        i0 = blocks[blk]
        while i0 < blocks[blk + 1]:
            i1 = _group_end(rowptr, i0, blocks[blk + 1])
            for k0 in range(rowptr[i0], rowptr[i1], W):
                n = min(W, rowptr[i1] - k0)
                if rows:
                    _message_rows(k0, n, cavW, PW, src, rev, b_prev, B_prev, M_prev, M_new, C, Zs, H, lam, mw,
                                  stream, one)
                    continue
                _cavities(cav, k0, n, src, rev, b_prev, B_prev, M_prev, mw)
                if C.shape[0] > 0:
                    _save_block(Cf, cav, k0, n, stream)
                _products(P, cav, n, HT, L, ew, k0, Hw)
                _column_sums(inv, P, n)
                for e in range(n):
                    inv[e] = one / inv[e]
                for e in range(n):
                    k = k0 + e
                    for b in range(c):
                        m = P[b, e] * inv[e]
                        M_new[k, b] = (one - lam) * m + lam * M_prev[k, b] if lam > 0 else m
            for i in range(i0, i1):
                if known.shape[0] > 0 and known[i]:
                    for a in range(c):
                        b_out[i, a] = clamp[i, a]
                        B_out[i, a] = np.exp(clamp[i, a])
                else:
                    for a in range(c):
                        z[a] = phi[i, a]
                    if mw.shape[0] > 0:
                        for k in range(rowptr[i], rowptr[i + 1]):
                            w = mw[k]
                            for a in range(c):
                                z[a] += w * np.log(M_new[k, a])
                    else:
                        for a in range(c):
                            acc[a] = 1.0
                        count = 0
                        for k in range(rowptr[i], rowptr[i + 1]):
                            for a in range(c):
                                acc[a] *= M_new[k, a]
                            count += 1
                            if count == span:
                                for a in range(c):
                                    z[a] += np.log(acc[a])
                                    acc[a] = 1.0
                                count = 0
                        if count:
                            for a in range(c):
                                z[a] += np.log(acc[a])
                    zmax = -np.inf
                    for a in range(c):
                        zmax = max(zmax, z[a])
                    tot = 0.0
                    for a in range(c):  # B_out holds exp(z - max) until divided by its sum
                        B_out[i, a] = np.exp(B_out.dtype.type(z[a] - zmax))
                        tot += B_out[i, a]
                    lse = zmax + np.log(tot)
                    for a in range(c):
                        b_out[i, a] = z[a] - lse
                        B_out[i, a] /= tot
                if res.shape[0] > 0:
                    d = 0.0
                    for a in range(c):
                        d += abs(B_out[i, a] - B_prev[i, a])
                    res[i] = d
            i0 = i1
        _fence()
        _restore(old)


@njit(inline="always")
def _back_scratch(n_blocks, c, W, like):
    """Per-block scratch of the backward kernels for chunks of ``W`` edges, of ``like``'s dtype:
    cavities, products, tau, H tau (``[c, W]``), normalisers, sums (``[W]``), two ``[c, c]``. The
    cavities and tau start at zero: whole-chunk BLAS products read past the chunk's edges. Tau has
    a block of zeros before its first: a loop that writes tau and sums runs vectorised only if no row
    it reads starts within a few vectors before the row it writes (LLVM tests it at run time; else the
    scalar loop, which sums in another order, runs), and nothing can lie there now."""
    dt = like.dtype
    return (np.zeros((n_blocks, c, W), dt), np.empty((n_blocks, c, W), dt), np.zeros((n_blocks + 1, c, W), dt)[1:],
            np.empty((n_blocks, c, W), dt), np.empty((n_blocks, W), dt), np.empty((n_blocks, W), dt),
            np.empty((n_blocks, c, c), dt), np.empty((n_blocks, c, c), dt))


@njit(inline="always", fastmath=_FM)
def _center(tau, ssum, zinv, n):
    r"""Back through the normalisation :math:`m = P / Z`: :math:`\tau_e \leftarrow (\tau_e - s_e) / Z_e`."""
    for b in range(tau.shape[0]):
        for e in range(n):
            tau[b, e] = (tau[b, e] - ssum[e]) * zinv[e]


@njit(inline="always", fastmath=_FM)
def _inverse_sums(zinv, P, cav, n, Hrow, products, one):
    """``zinv[e] = one / Z_e``, the message's normaliser: from the products ``P`` (``products``), else
    ``cav . (H 1)`` (the undamped, unweighted backward needs no product)."""
    if products:
        _column_sums(zinv, P, n)
    else:
        for e in range(n):
            zinv[e] = 0
        for a in range(cav.shape[0]):
            h = Hrow[a]
            for e in range(n):
                zinv[e] += cav[a, e] * h
    for e in range(n):
        zinv[e] = one / zinv[e]


@njit(inline="always", fastmath=_FM)
def _add_reverse_rows(out, i0, i1, rowptr, rev, Gv, ahead):
    """``out[i] += sum of Gv[rev[k]]`` over the incoming edges ``k`` of each node ``i0 <= i < i1`` (= over
    its outgoing edges), the rows prefetched ``ahead`` edges before their use."""
    c = out.shape[1]
    E = rev.shape[0]
    for i in range(i0, i1):
        for k in range(rowptr[i], rowptr[i + 1]):
            if k + ahead < E:
                _prefetch_row(Gv, rev[k + ahead], c)
            r = rev[k]
            for a in range(c):
                out[i, a] += Gv[r, a]


@njit(inline="always", fastmath=_FM)
def _belief_grads(i0, i1, rowptr, rev, known, B, Gb, Gv, gz, Gphi, first, ahead):
    r"""``gz[i]`` for the nodes ``i0 <= i < i1``: the gradient of node ``i``'s log-belief, :math:`G^b_i`
    (``first``) or the cavity gradients of its outgoing edges :math:`\sum_{k \to i} G^v[\bar k]`, 0 if
    clamped, through the normalisation (:math:`g - B_i \sum g`); added to ``Gphi[i]``. One call per
    range of nodes: each call of an inlined helper still takes and drops a reference to every array
    it is passed, which per node was 12% of a c = 7 training step."""
    c = gz.shape[1]
    for i in range(i0, i1):
        for a in range(c):
            gz[i, a] = Gb[i, a] if first else 0
    if not first:
        _add_reverse_rows(gz, i0, i1, rowptr, rev, Gv, ahead)
    for i in range(i0, i1):
        if known.shape[0] > 0 and known[i]:
            for a in range(c):
                gz[i, a] = 0
        tot = gz[i, 0] * 0
        for a in range(c):
            tot += gz[i, a]
        for a in range(c):
            gz[i, a] -= B[i, a] * tot
            Gphi[i, a] += gz[i, a]


@njit(inline="always", fastmath=_FM)
def _coupling_grad(gl, cav, tau, n, ct):
    """``gl += cav[:, :n] tau[:, :n]^T`` (BLAS from ``_BLAS_CLASSES`` classes on, over whole chunks:
    the columns of ``tau`` past ``n`` are zeroed first)."""
    c = cav.shape[0]
    if c >= _BLAS_CLASSES:
        for b in range(c):
            for e in range(n, tau.shape[1]):
                tau[b, e] = 0
        np.dot(cav, tau.T, ct)
        for a in range(c):
            for b in range(c):
                gl[a, b] += ct[a, b]
    else:
        for a in range(c):
            for b in range(c):
                t = tau[0, 0] * 0
                for e in range(n):
                    t += cav[a, e] * tau[b, e]
                gl[a, b] += t


@njit(inline="always", fastmath=_FM)
def _weighted_back(Gv, Gw, k, cav, tau, e, w, L, Hw, gl):
    """With an edge weight ``w``: ``Gv[k] = cav ⊙ (H^w τ)``, ``gl += w cav (τ ⊙ H^w)^T`` and
    ``Gw[k] += Σ cav τ^T ⊙ H^w ⊙ L`` for the chunk column ``e`` of edge ``k``."""
    c = L.shape[0]
    gw = 0.0
    for a in range(c):
        for b in range(c):
            Hw[a, b] = np.exp(w * L[a, b])
    for a in range(c):
        ca = cav[a, e]
        qa = ca * 0
        for b in range(c):
            x = tau[b, e] * Hw[a, b]
            qa += x
            gl[a, b] += w * ca * x
            gw += ca * x * L[a, b]
        Gv[k, a] = ca * qa
    Gw[k] += gw


@njit(inline="always", fastmath=_FM)
def _cavity_grads(Gv, k0, n, cav, q, stream):
    """``Gv[k0 + e] = cav[e] * q[e]`` (``[_CHUNK, c]`` views of either layout); ``stream``:
    non-temporal, as ``Gv`` is read one whole pass later, gathered."""
    c = Gv.shape[1]
    if stream:
        for e in range(n):
            base = (k0 + e) * c
            for a in range(c):
                _stream(Gv, base + a, cav[e, a] * q[e, a])
    else:
        for e in range(n):
            for a in range(c):
                Gv[k0 + e, a] = cav[e, a] * q[e, a]


@njit(inline="always", fastmath=_FM)
def _tau_rows(k0, n, tauW, PW, M_t, Zs, dst, rev, mw, gz, Gv_next, D, first, carry, kept, one):
    r""":math:`\tau = (g / m - \textstyle\sum g) / Z` into ``tauW[e]`` for the chunk's edges, ``g`` the
    gradient of an edge's log-message (``D[k]`` added and zeroed when ``carry``), ``m`` its message
    (``M_t[k]``, ``1 / Z = Zs[k]`` when ``kept``, else ``PW[e] / Z``). Called with ``carry`` and
    ``kept`` constants, so that no loop reads an empty placeholder: before it runs a vectorised loop
    that writes ``tauW``, LLVM tests that the rows the loop reads do not overlap ``tauW``, and a
    placeholder's rows (never read, but in the test) could seem to, by where the heap put ``tauW``;
    the scalar loop then ran instead and summed ``g`` in another order (CI: two calls differed in
    the last bit)."""
    c = tauW.shape[1]
    for e in range(n):
        k = k0 + e
        d = dst[k]
        r = rev[k]
        wk = mw[k] if mw.shape[0] > 0 else one
        zi = Zs[k] if kept else _inverse_row_sum(PW, e, one)
        s = zi * 0
        for b in range(c):
            g = gz[d, b] if first else gz[d, b] - Gv_next[r, b]  # no step t+1 after the last
            g = D[k, b] + wk * g if carry else wk * g
            # np.divide: numpy's semantics, no zero-divisor test (with which a plain / does not vectorise)
            tauW[e, b] = np.divide(g, M_t[k, b] if kept else PW[e, b] * zi)
            s += g
        if carry:
            for b in range(c):
                D[k, b] = 0
        for b in range(c):
            tauW[e, b] = (tauW[e, b] - s) * zi


@njit(inline="always", fastmath=_FM)
def _back_rows(k0, n, C, M_t, Zs, cavW, PW, tauW, qW, ct, gl, dst, rev, mw, gz, Gv_next, Gv_cur, D, H, HT, first,
               carry, stream, one):
    r""":func:`backward_step` for one chunk of edges whose cavities were saved (undamped, no edge
    weights), from ``_BLAS_CLASSES`` classes on: edge-major (``[_CHUNK, c]`` scratch), so that
    every per-edge loop runs along the classes in contiguous memory and vectorises, the divisions
    included. ``P = cav H``, ``m = P / Z``, :math:`\tau = (g / m - \textstyle\sum g) / Z`,
    ``Gv = cav ⊙ τ H^T``, ``gl += cav^T τ`` (the rows past ``n`` of ``tauW`` are zeroed: the
    products run on whole chunks). With the forward's messages ``M_t`` and normalisers ``Zs``
    (non-empty ``Zs``), ``m`` and ``1 / Z`` are read instead: the same numbers, one product fewer."""
    c = cavW.shape[1]
    _load_cavities(cavW.T, C, k0, n)
    if Zs.shape[0] > 0:  # kept
        if carry:
            _tau_rows(k0, n, tauW, PW, M_t, Zs, dst, rev, mw, gz, Gv_next, D, first, True, True, one)
        else:
            _tau_rows(k0, n, tauW, PW, M_t, Zs, dst, rev, mw, gz, Gv_next, D, first, False, True, one)
    else:
        np.dot(cavW, H, PW)
        if carry:
            _tau_rows(k0, n, tauW, PW, M_t, Zs, dst, rev, mw, gz, Gv_next, D, first, True, False, one)
        else:
            _tau_rows(k0, n, tauW, PW, M_t, Zs, dst, rev, mw, gz, Gv_next, D, first, False, False, one)
    for e in range(n, tauW.shape[0]):
        for b in range(c):
            tauW[e, b] = 0
    np.dot(tauW, HT, qW)
    _cavity_grads(Gv_cur, k0, n, cavW, qW, stream)
    np.dot(cavW.T, tauW, ct)
    for a in range(c):
        for b in range(c):
            gl[a, b] += ct[a, b]


@njit(nogil=True, cache=True, fastmath=_FM)
def backward_step(rowptr, blocks, src, rev, dst, known, B_t, b_prev, B_prev, M_prev, M_t, Gb_ext, Gv_next, Gv_cur,
                  D, Gphi, gz, GL, Gw, H, HT, Hrow, L, damping, ew, mw, first, C, Zs):
    r"""Vector-Jacobian product of one :func:`forward_step` (step :math:`t`), one pass over the nodes.

    For node ``i``: :math:`g^b_i = [\text{first}]\,G^{\mathrm{ext}}_i + \sum_{k \to i} G^v_{t+1}[\bar k]`
    (the step-:math:`t{+}1` cavities that read :math:`b_i`, gathered through the reverse edges;
    0 on clamped nodes), :math:`g^z_i = g^b_i - B_i \sum g^b_i` (added to ``Gphi``), then per incoming
    edge ``k`` the gradient of :math:`\log M^t_k`,
    :math:`g_k = D_k + w'_k\,(g^z_i - G^v_{t+1}[\bar k])`, and back through the damping and the
    normalisation :math:`a = (1-\lambda)\,g / M^t`, :math:`\tau = (a - \sum_b a_b p_b) / Z`
    (:math:`p = P/Z` the undamped message): :math:`G^v_t[k] = \mathrm{cav} \odot (H^{w_k}\tau)`,
    :math:`G_{H^{w}} \mathrel{+}= \mathrm{cav}\,\tau^\top` (per block into ``GL``; with edge weights
    times :math:`w_k H^{w_k}`, and :math:`G_{w_k} \mathrel{+}= \sum \mathrm{cav}\,\tau^\top \odot H^{w_k} \odot L`),
    and the damping's share :math:`D_k \leftarrow \lambda\,g\,M^{t-1}_k / M^t_k` for step :math:`t-1`.
    ``D`` is empty when it would stay zero (no damping, no gradient of the last messages).

    ``C``, if non-empty (undamped steps only), holds the step's cavities as :func:`forward_step`
    saved them: they are read in edge order instead of gathered from ``B_prev[src]`` and
    ``M_prev[rev]``, and :math:`M^t` is recomputed from them (:math:`P / Z`), so that ``M_prev`` and
    ``M_t`` are not read; on graphs beyond the cache this trades two gathers per edge for one product.
    With a non-empty ``Zs`` too (edge-major chunks), ``M_t`` and its inverse normalisers ``Zs``, as the
    forward kept them, are read in edge order in place of that product.
    """
    n_blocks = blocks.shape[0] - 1
    c = B_t.shape[1]
    lam = damping[0]
    one = lam * 0 + 1
    weighted = ew.shape[0] > 0
    carry = D.shape[0] > 0  # an empty D: no damping and no gradient of the last messages (all zeros)
    saved = C.shape[0] > 0
    E = rev.shape[0]
    ahead = _prefetch_distance(E, c)
    stream = _beyond_cache(E, c)
    rows = saved and c >= _BLAS_CLASSES and not weighted  # the edge-major chunk (_back_rows)
    Cf = C.reshape(-1)  # once: numba's reshape is a library call
    W = _chunk_edges(c)
    cav_, P_, tau_, q_, zinv_, ssum_, Hw_, ct_ = _back_scratch(n_blocks, c, W, B_t)
    for blk in range(n_blocks):
        old = _flush_denormals()
        cav, P, tau, q, zinv, ssum, Hw = cav_[blk], P_[blk], tau_[blk], q_[blk], zinv_[blk], ssum_[blk], Hw_[blk]
        ct = ct_[blk]
        gl = GL[blk]
        cavW, PW, tauW, qW = cav.reshape((W, c)), P.reshape((W, c)), tau.reshape((W, c)), q.reshape((W, c))
        i0 = blocks[blk]
        while i0 < blocks[blk + 1]:
            i1 = _group_end(rowptr, i0, blocks[blk + 1])
            _belief_grads(i0, i1, rowptr, rev, known, B_t, Gb_ext, Gv_next, gz, Gphi, first, ahead)
            for k0 in range(rowptr[i0], rowptr[i1], W):
                n = min(W, rowptr[i1] - k0)
                if rows:
                    _back_rows(k0, n, C, M_t, Zs, cavW, PW, tauW, qW, ct, gl, dst, rev, mw, gz, Gv_next, Gv_cur, D, H,
                               HT, first, carry, stream, one)
                    continue
                if saved:
                    _load_block(cav, Cf, k0, n)
                else:
                    _cavities(cav, k0, n, src, rev, b_prev, B_prev, M_prev, mw)
                products = lam > 0 or weighted or saved
                if products:
                    _products(P, cav, n, HT, L, ew, k0, Hw)
                _inverse_sums(zinv, P, cav, n, Hrow, products, one)
                for e in range(n):
                    k = k0 + e
                    d = dst[k]
                    r = rev[k]
                    wk = mw[k] if mw.shape[0] > 0 else one
                    s = zinv[0] * 0
                    for b in range(c):
                        g = gz[d, b] if first else gz[d, b] - Gv_next[r, b]  # no step t+1 after the last
                        g = D[k, b] + wk * g if carry else wk * g
                        if lam > 0:
                            t = (one - lam) * g / M_t[k, b]
                            s += t * P[b, e]
                            D[k, b] = lam * g * M_prev[k, b] / M_t[k, b]
                        else:
                            t = g / (P[b, e] * zinv[e] if saved else M_t[k, b])
                            s += g
                            if carry:
                                D[k, b] = 0
                        tau[b, e] = t
                    ssum[e] = s * zinv[e] if lam > 0 else s
                _center(tau, ssum, zinv, n)
                if weighted:
                    for e in range(n):
                        _weighted_back(Gv_cur, Gw, k0 + e, cav, tau, e, ew[k0 + e], L, Hw, gl)
                else:
                    _chunk_matmul(q, H, tau, n)
                    _cavity_grads(Gv_cur, k0, n, cav.T, q.T, stream)
                    _coupling_grad(gl, cav, tau, n, ct)
            i0 = i1
        _fence()
        _restore(old)


@njit(nogil=True, cache=True, fastmath=_FM)
def gather_reverse(rowptr, blocks, rev, Gv, out):
    """``out[i] += sum of Gv[rev[k]]`` over the incoming edges ``k`` of ``i`` (= over the outgoing edges of ``i``)."""
    ahead = _prefetch_distance(rev.shape[0], out.shape[1])
    for blk in range(blocks.shape[0] - 1):
        old = _flush_denormals()
        _add_reverse_rows(out, blocks[blk], blocks[blk + 1], rowptr, rev, Gv, ahead)
        _restore(old)


@njit(nogil=True, cache=True, fastmath=_FM)
def adjoint_nodes(rowptr, blocks, rev, known, B, Gb, Gv, gz, Gphi, first):
    """The node half of one term of the adjoint series at a fixed point: ``gz`` and ``Gphi``
    (:func:`_belief_grads`) for every node, from the loss's ``Gb`` (``first``) or from ``Gv``."""
    ahead = _prefetch_distance(rev.shape[0], gz.shape[1])
    for blk in range(blocks.shape[0] - 1):
        old = _flush_denormals()
        _belief_grads(blocks[blk], blocks[blk + 1], rowptr, rev, known, B, Gb, Gv, gz, Gphi, first, ahead)
        _restore(old)


@njit(nogil=True, cache=True, fastmath=_FM)
def adjoint_pairs(rowptr, blocks, src, rev, dst, b, B, M, gz, Gv, D, GL, Gw, H, HT, Hrow, L, damping, ew, mw, exact):
    r"""The edge half of one term of the adjoint series at a fixed point (messages ``M``, beliefs
    ``b``/``B`` of every step alike), in place: :func:`backward_step`'s edge pass with
    :math:`G^v_{t+1}` and :math:`G^v_t` in one buffer. The new :math:`G^v_k` reads the old
    :math:`G^v_{\bar k}` only, so each pair of reverse edges is taken together (both read before
    either is written) by the block holding one of its two CSR positions: the lower where their sum
    is even, else the higher, so that the blocks get about equal shares. ``rev`` must pair every
    edge with another. ``gz`` is the node half's (:func:`adjoint_nodes`); ``D`` the damping's carry.
    ``exact``: ``M`` is not a fixed point (a forward that did not converge), so the step's output
    :math:`F(M)` is computed for the derivative of its normalisation instead of taken to be ``M``
    (one more product per edge)."""
    n_blocks = blocks.shape[0] - 1
    c = B.shape[1]
    lam = damping[0]
    one = lam * 0 + 1
    weighted = ew.shape[0] > 0
    carry = D.shape[0] > 0
    E = rev.shape[0]
    ahead = _prefetch_distance(E, c)
    W = 2 * _CHUNK  # a chunk of edges and the reverses it owns
    ks_ = np.empty((n_blocks, W), np.int64)
    cav_, P_, tau_, q_, zinv_, ssum_, Hw_, ct_ = _back_scratch(n_blocks, c, W, B)
    for blk in range(n_blocks):
        old = _flush_denormals()
        ks, cav, P, tau, q, zinv, ssum = ks_[blk], cav_[blk], P_[blk], tau_[blk], q_[blk], zinv_[blk], ssum_[blk]
        Hw, ct, gl = Hw_[blk], ct_[blk], GL[blk]
        k_end = rowptr[blocks[blk + 1]]
        for k0 in range(rowptr[blocks[blk]], k_end, _CHUNK):
            n = 0
            for k in range(k0, min(k0 + _CHUNK, k_end)):
                if k + ahead < E:  # the pair's rows in no useful order: the reverse's, the source's
                    _prefetch_cavity(k + ahead, src, rev, b, B, M, mw, c)
                    _prefetch_row(Gv, rev[k + ahead], c)
                    _prefetch_row(gz, src[k + ahead], c)
                r = rev[k]
                if (k < r) == ((k + r) % 2 == 0):
                    ks[n] = k
                    ks[n + 1] = r
                    n += 2
            if n == 0:
                continue
            for j in range(n):
                _cavity(cav, j, ks[j], src, rev, b, B, M, mw)
            products = lam > 0 or weighted or exact
            if products:
                if weighted:
                    for j in range(n):
                        _weighted_product(P, cav, j, ew[ks[j]], L, Hw)
                else:
                    _chunk_matmul(P, HT, cav, n)
            _inverse_sums(zinv, P, cav, n, Hrow, products, one)
            for j in range(n):
                k = ks[j]
                d = dst[k]
                r = rev[k]
                wk = mw[k] if mw.shape[0] > 0 else one
                for a in range(c):  # the gradient of the step's log-output, in tau until it becomes tau
                    g = gz[d, a] - Gv[r, a]
                    tau[a, j] = D[k, a] + wk * g if carry else wk * g
                if exact and lam > 0:
                    # off the fixed point the damped mix is normalised again, as the eager step does: back
                    # through that normalisation first (at a fixed point it changes no total derivative)
                    tot = zinv[0] * 0
                    for a in range(c):
                        tot += tau[a, j]
                    for a in range(c):
                        tau[a, j] -= ((one - lam) * P[a, j] * zinv[j] + lam * M[k, a]) * tot
                s = zinv[0] * 0
                for a in range(c):
                    g = tau[a, j]
                    # the step's (damped) output: M itself at a fixed point
                    mt = (one - lam) * P[a, j] * zinv[j] + lam * M[k, a] if exact else M[k, a]
                    if lam > 0:
                        t = (one - lam) * g / mt
                        s += t * P[a, j]
                        D[k, a] = lam * g * M[k, a] / mt
                    else:
                        t = g / mt
                        s += g
                    tau[a, j] = t
                ssum[j] = s * zinv[j] if lam > 0 else s
            _center(tau, ssum, zinv, n)
            # every read of Gv for this chunk's pairs is done: overwrite them
            if weighted:
                for j in range(n):
                    _weighted_back(Gv, Gw, ks[j], cav, tau, j, ew[ks[j]], L, Hw, gl)
            else:
                _chunk_matmul(q, H, tau, n)
                for j in range(n):
                    for a in range(c):
                        Gv[ks[j], a] = cav[a, j] * q[a, j]
                _coupling_grad(gl, cav, tau, n, ct)
        _restore(old)
