r"""BP inference on CUDA in two Triton kernels per step instead of a dozen whole-array passes.

They compute the reference step of :mod:`gbpn.bp.functional` up to rounding.

The GPU counterpart of :mod:`gbpn.bp.backends.cpu_fused` for inference (no gradient). The edges are sorted by
destination once (:func:`device_csr`, cached per graph) and each step is

1. an **edge kernel**, one program per block of consecutive edges: it gathers the source beliefs
   and the reverse messages, forms the cavities ``B[src] / M[rev]`` (linear domain, as the CPU
   kernel), multiplies them by :math:`H` (:func:`_product`: ``tl.dot`` with exact IEEE float32
   products, no TF32, or one rank-1 update per class), normalises, damps and writes the new messages;
2. a **node kernel**, one program per block of nodes: each node sums the logarithms of its incoming
   messages (a contiguous CSR range: no atomics, so runs are deterministic), log-normalises them with
   :math:`\log\phi` into the belief, pins the known nodes and measures the residual if asked.

Training on CUDA runs the eager path (there is no Triton backward), and so do edge weights (a
per-edge :math:`H^{w}`); ``kernel="fused"`` says why. Measured on an H200 (README, "Fused BP
kernels"), the step beats the eager one only at two classes, so ``kernel="auto"`` uses it there
(the rule lives in :func:`gbpn.bp.dispatch.select`).

``TRITON_INTERPRET=1`` runs the kernels on CPU tensors through Triton's interpreter, which is how
the tests check them on a machine without a GPU. The kernels live in
:mod:`~gbpn.bp.backends.triton_kernels`, which loads Triton (a second or more) only where they run.
"""
from __future__ import annotations

import importlib.util
from typing import List, Optional

import torch

from gbpn.bp.backends._numba.runtime import self_tested
from gbpn.graph.layouts import device_csr
from gbpn.bp.problem import BPProblem, BPResult, Capability, compiled_reasons, csr_ordered, edge_ordered


def triton_unavailable(dtype: torch.dtype, device: torch.device) -> Optional[str]:
    """``None`` if the Triton kernels run for ``dtype`` on ``device``, else why not (warned once per reason)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (it ships with CUDA builds of torch)"
    return self_tested(f"triton-{dtype}-{device}", lambda: _kernels()._self_test(dtype, device), "Triton BP kernels")


def _kernels():
    """:mod:`~gbpn.bp.backends.triton_kernels`, imported (with Triton, a second or more) on first use."""
    from gbpn.bp.backends import triton_kernels

    return triton_kernels


class CUDATriton(Capability):
    """Inference on CUDA: two Triton kernels per step (:func:`~gbpn.bp.backends.triton_kernels.triton_bp`)."""

    name = "cuda_triton"
    device_type = "cuda"

    def reasons(self, p: BPProblem) -> List[str]:
        why = compiled_reasons(p)
        if p.device.type != "cuda":
            why.append("runs on CUDA")
        if not why:  # imports triton and runs the kernels once: only where nothing else declines
            unavailable = triton_unavailable(p.dtype, p.device)
            if unavailable is not None:
                why.append(unavailable)
        return why

    def run(self, p: BPProblem) -> BPResult:
        layout = device_csr(p.edge_index, p.rev_index, p.num_nodes)
        log_belief, residuals, log_msg = _kernels().triton_bp(
            p.phi(), p.log_H, layout, p.num_steps, p.damping, p.tol, p.known_mask, p.clamp,
            csr_ordered(p.message_weight, layout.perm), p.return_residuals, p.return_messages)
        return BPResult(log_belief, residuals, edge_ordered(log_msg if p.return_messages else None, layout.perm))
