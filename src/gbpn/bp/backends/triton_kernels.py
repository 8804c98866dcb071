"""The Triton kernels of :mod:`gbpn.bp.backends.cuda_triton` and the loop that launches them.

Importing Triton takes a second or more, so this module loads only where the backend runs or tests
it (dispatch on a CPU declines the backend without it). ``TRITON_INTERPRET=1`` set before it loads
runs the kernels on CPU tensors through Triton's interpreter.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.graph.layouts import DeviceCSR, device_csr

try:  # the cuda_triton backend loads this module only where triton is installed (the cuda extra)
    import triton
    import triton.language as tl
except ImportError as err:  # pragma: no cover - a direct import without it
    raise ImportError("gbpn's Triton kernels need triton: pip install 'gbpn[cuda]'") from err

PRODUCTS = ("dot", "broadcast", "loop")
_BLOCKS = (64, 64)  # edges per program of the edge kernel, nodes per program of the node kernel


def _product(c: int, dtype: torch.dtype) -> str:
    """How the edge kernel multiplies by H by default: ``tl.dot`` on float32 from 16 classes on, else
    one rank-1 update per class (the two measured on a GPU; "broadcast", a ``[rows, c, c]`` product
    in registers for small c, is tested but not yet timed on one)."""
    return "dot" if dtype == torch.float32 and c >= 16 else "loop"


@triton.jit
def _messages(k, kmask, src_ptr, rev_ptr, B_ptr, b_ptr, M_prev_ptr, H_ptr, mw_ptr, lam_ptr, C,
              DAMP: tl.constexpr, HAS_MW: tl.constexpr, PRODUCT: tl.constexpr, PRECISION: tl.constexpr,
              ROWS: tl.constexpr, CP: tl.constexpr):
    """The new messages of edges ``k`` (``[ROWS, CP]``, normalised, damped; garbage where masked)."""
    cols = tl.arange(0, CP)
    m2 = kmask[:, None] & (cols < C)[None, :]
    s = tl.load(src_ptr + k, mask=kmask, other=0).to(tl.int64)
    r = tl.load(rev_ptr + k, mask=kmask, other=0).to(tl.int64)
    Mr = tl.load(M_prev_ptr + r[:, None] * C + cols[None, :], mask=m2, other=1.0)
    if HAS_MW:  # exp(b[src] - w'_rev log M[rev] - max): the cavity of a weighted message
        w = tl.load(mw_ptr + r, mask=kmask, other=0.0)
        v = tl.load(b_ptr + s[:, None] * C + cols[None, :], mask=m2, other=0.0) - w[:, None] * tl.log(Mr)
        mx = tl.max(tl.where(m2, v, -float("inf")), 1)
        cav = tl.where(m2, tl.exp(v - mx[:, None]), 0.0)
    else:
        mx = tl.zeros([ROWS], dtype=Mr.dtype)
        w = mx
        cav = tl.load(B_ptr + s[:, None] * C + cols[None, :], mask=m2, other=0.0) / Mr
    if PRODUCT == 0:
        P = tl.dot(cav, tl.load(H_ptr + cols[:, None] * CP + cols[None, :]), input_precision=PRECISION)
    elif PRODUCT == 1:  # [ROWS, CP, CP] in registers: small c
        H = tl.load(H_ptr + cols[:, None] * CP + cols[None, :])
        P = tl.sum(cav[:, :, None] * H[None, :, :], 1)
    else:  # one rank-1 update per class, the cavity column re-read from cache
        P = tl.zeros([ROWS, CP], dtype=Mr.dtype)
        for a in range(0, C):
            Ma = tl.load(M_prev_ptr + r * C + a, mask=kmask, other=1.0)
            if HAS_MW:
                ca = tl.exp(tl.load(b_ptr + s * C + a, mask=kmask, other=0.0) - w * tl.log(Ma) - mx)
            else:
                ca = tl.load(B_ptr + s * C + a, mask=kmask, other=0.0) / Ma
            P += ca[:, None] * tl.load(H_ptr + a * CP + cols)[None, :]
    m = P / tl.sum(P, 1)[:, None]
    if DAMP:  # lam from memory, in the dtype (a float argument would be float32)
        lam = tl.load(lam_ptr)
        m = (1 - lam) * m + lam * tl.load(M_prev_ptr + k.to(tl.int64)[:, None] * C + cols[None, :], mask=m2,
                                          other=1.0)
    return m

@triton.jit
def _finish(z, i, nmask, b_ptr, B_old_ptr, B_ptr, known_ptr, clamp_ptr, res_ptr, C,
            HAS_KNOWN: tl.constexpr, WANT_RES: tl.constexpr, CP: tl.constexpr):
    """Log-normalise the accumulated ``z`` into ``b`` and ``B = exp(b)``, pin known nodes, residual."""
    cols = tl.arange(0, CP)
    m2 = nmask[:, None] & (cols < C)[None, :]
    at = i.to(tl.int64)[:, None] * C + cols[None, :]
    z = tl.where(m2, z, -float("inf"))
    zmax = tl.where(nmask, tl.max(z, 1), 0.0)
    ez = tl.exp(z - zmax[:, None])
    tot = tl.sum(ez, 1)
    b = z - (zmax + tl.log(tot))[:, None]
    B = ez / tot[:, None]
    if HAS_KNOWN:
        kn = tl.load(known_ptr + i, mask=nmask, other=0) != 0
        cl = tl.load(clamp_ptr + at, mask=m2, other=0.0)
        b = tl.where(kn[:, None], cl, b)
        B = tl.where(kn[:, None], tl.exp(cl), B)
    if WANT_RES:
        old = tl.load(B_old_ptr + at, mask=m2, other=0.0)
        tl.store(res_ptr + i, tl.sum(tl.where(m2, tl.abs(B - old), 0.0), 1), mask=nmask)
    tl.store(b_ptr + at, b, mask=m2)
    tl.store(B_ptr + at, B, mask=m2)

@triton.jit
def _edge_kernel(src_ptr, rev_ptr, B_ptr, b_ptr, M_prev_ptr, M_new_ptr, H_ptr, mw_ptr, lam_ptr, E, C,
                 DAMP: tl.constexpr, HAS_MW: tl.constexpr, PRODUCT: tl.constexpr, PRECISION: tl.constexpr,
                 BLOCK: tl.constexpr, CP: tl.constexpr):
    """A step, part 1: the new messages of a block of consecutive edges."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    kmask = k < E
    cols = tl.arange(0, CP)
    m = _messages(k, kmask, src_ptr, rev_ptr, B_ptr, b_ptr, M_prev_ptr, H_ptr, mw_ptr, lam_ptr, C, DAMP, HAS_MW,
                  PRODUCT, PRECISION, BLOCK, CP)
    tl.store(M_new_ptr + k.to(tl.int64)[:, None] * C + cols[None, :], m,
             mask=kmask[:, None] & (cols < C)[None, :])

@triton.jit
def _node_kernel(rowptr_ptr, M_new_ptr, phi_ptr, mw_ptr, b_ptr, B_old_ptr, B_ptr, known_ptr, clamp_ptr,
                 res_ptr, N, C, HAS_MW: tl.constexpr, HAS_KNOWN: tl.constexpr, WANT_RES: tl.constexpr,
                 BLOCK: tl.constexpr, CP: tl.constexpr):
    """A step, part 2: each node sums the logs of its incoming messages (CSR rows), no atomics."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    nmask = i < N
    cols = tl.arange(0, CP)
    cmask = (cols < C)[None, :]
    start = tl.load(rowptr_ptr + i, mask=nmask, other=0).to(tl.int64)
    deg = tl.load(rowptr_ptr + i + 1, mask=nmask, other=0).to(tl.int64) - start
    z = tl.load(phi_ptr + i.to(tl.int64)[:, None] * C + cols[None, :], mask=nmask[:, None] & cmask, other=0.0)
    for j in range(0, tl.max(deg, 0)):
        on = j < deg
        k = start + j
        lm = tl.log(tl.load(M_new_ptr + k[:, None] * C + cols[None, :], mask=on[:, None] & cmask, other=1.0))
        if HAS_MW:
            lm = lm * tl.load(mw_ptr + k, mask=on, other=0.0)[:, None]
        z += lm
    _finish(z, i, nmask, b_ptr, B_old_ptr, B_ptr, known_ptr, clamp_ptr, res_ptr, C, HAS_KNOWN, WANT_RES, CP)


def triton_bp(phi: Tensor, log_H: Tensor, layout: DeviceCSR, steps: int, damping: float, tol: Optional[float],
              known: Optional[Tensor], clamp: Optional[Tensor], message_weight: Optional[Tensor], want_res: bool,
              want_msg: bool, blocks: Optional[Tuple[int, int]] = None, product: Optional[str] = None,
              precision: str = "ieee") -> Tuple[Tensor, List[Tensor], Optional[Tensor]]:
    r"""``steps`` BP steps from the pinned, normalised log self-potentials ``phi`` (:math:`b^0`), messages
    initialised to :math:`1/c`, without gradients. ``message_weight`` is in CSR order. Returns the
    log-beliefs ``[N, c]``, the per-step residuals (when ``want_res`` or ``tol``; stops once one is
    below ``tol``) and, with ``want_msg``, the final log-messages ``[E, c]`` in CSR order.
    ``blocks`` (edges, nodes per program), ``product`` (:data:`PRODUCTS`, default :func:`_product`) and
    ``precision`` (``tl.dot``'s ``input_precision``) tune the kernels (benchmarks/triton_blocks.py)."""
    n, c = phi.shape
    E = layout.src.numel()
    dtype, dev = phi.dtype, phi.device
    product = product or _product(c, dtype)
    cp = max(16 if product == "dot" else 2, triton.next_power_of_2(c))
    block_e, block_n = blocks or _BLOCKS
    with torch.no_grad():
        phi = phi.detach().contiguous()
        L = log_H.detach().to(dtype)
        Hp = torch.zeros(cp, cp, dtype=dtype, device=dev)
        Hp[:c, :c] = (L - L.max()).exp()
        lam = torch.tensor([damping], dtype=dtype, device=dev)
        M, M_next = torch.full((E, c), 1.0 / c, dtype=dtype, device=dev), torch.empty(E, c, dtype=dtype, device=dev)
        b, B = phi.clone(), phi.exp()
        b_next, B_next = torch.empty_like(b), torch.empty_like(B)
        mw = phi.new_empty(0) if message_weight is None else message_weight.detach().to(dtype).contiguous()
        known_i = phi.new_empty(0, dtype=torch.int8) if known is None else known.view(-1).to(torch.int8).contiguous()
        clamp_ = phi.new_empty(0) if clamp is None else clamp.to(dtype).contiguous()
        track = want_res or tol is not None
        res_node = phi.new_empty(n if track else 0)
        opts = dict(HAS_MW=message_weight is not None, CP=cp)
        node_opts = dict(HAS_KNOWN=known is not None, WANT_RES=track, **opts)
        residuals: List[Tensor] = []
        for _ in range(steps):
            _edge_kernel[(triton.cdiv(E, block_e),)](
                layout.src, layout.rev, B, b, M, M_next, Hp, mw, lam, E, c, DAMP=damping > 0,
                PRODUCT=PRODUCTS.index(product), PRECISION=precision, BLOCK=block_e, **opts)
            _node_kernel[(triton.cdiv(n, block_n),)](
                layout.rowptr, M_next, phi, mw, b_next, B, B_next, known_i, clamp_, res_node, n, c,
                BLOCK=block_n, **node_opts)
            M, M_next, b, b_next, B, B_next = M_next, M, b_next, b, B_next, B
            if track:
                residuals.append(res_node.max())
                if tol is not None and float(residuals[-1]) < tol:
                    break
        return b, residuals, (M.log() if want_msg else None)


def _self_test(dtype: torch.dtype, device: torch.device) -> None:
    """Run the kernels on a 3-node path with every option on, at 2 and 16 classes (both products
    for float32), and check that the beliefs and residuals are finite."""
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]], device=device)
    layout = device_csr(ei, torch.tensor([1, 0, 3, 2], device=device), 3)
    known = torch.tensor([True, False, False], device=device)
    for c in (2, 16):
        phi = torch.log_softmax(torch.arange(3 * c, dtype=dtype, device=device).view(3, c), -1)
        log_H = torch.eye(c, dtype=dtype, device=device) - 0.5
        clamp = torch.full((3, c), -1e4, dtype=dtype, device=device)
        clamp[:, 0] = 0.0
        phi = torch.where(known.view(-1, 1), clamp, phi)
        weight = torch.full((4,), 2.0, dtype=dtype, device=device)
        out, res, _ = triton_bp(phi, log_H, layout, 2, 0.5, None, known, clamp, weight, True, True)
        if not (torch.isfinite(out).all() and len(res) == 2 and math.isfinite(float(res[-1]))):
            raise RuntimeError(f"Triton BP self-test gave non-finite beliefs at {c} classes")
