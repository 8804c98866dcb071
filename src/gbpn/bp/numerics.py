"""The numerical limits of BP, in one table: how wide ``log H`` may spread before a domain breaks.

``max(log H) - min(log H)`` (times the largest ``|edge weight|`` where the weights scale ``log H``)
decides three things, each with its own limit:

- ``REFUSE``: beyond it ``exp(log H - max)`` leaves the normal numbers of the dtype (float32 below
  ``exp(-87.3)``, float64 below ``exp(-708)``), so the message update is no longer exact and the
  layer refuses the coupling (:func:`~gbpn.bp.validation.check_coupling_range`);
- ``LINEAR_KERNEL``: up to it the fused kernels run their cavities in the linear domain, where a
  cavity divides by messages as small as ``exp(-spread)`` (:func:`linear_domain_ok`);
- ``LINEAR_EAGER``: up to it the eager inference step and the partitioned pairs step keep messages
  in the linear domain (their buffers are float32 or narrower whatever the compute dtype).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

# A finite stand-in for log(0): exp() of it is exactly 0 in float32 and float64,
# yet differences of two such values stay finite (no -inf - -inf = NaN).
LOG_ZERO = -1.0e4

REFUSE = {torch.float32: 80.0, torch.float64: 700.0}
LINEAR_KERNEL = {torch.float32: 60.0, torch.float64: 600.0}
LINEAR_EAGER = 60.0


def linear_domain_ok(log_H: Tensor, edge_weight: Optional[Tensor], dtype: torch.dtype) -> bool:
    """Whether the fused kernels' linear-domain cavity stays finite: the spread of ``log H`` times
    the largest ``|w|`` under :data:`LINEAR_KERNEL`."""
    spread = float(log_H.max() - log_H.min())
    if edge_weight is not None and edge_weight.numel():
        spread *= max(1.0, float(edge_weight.abs().max()))
    return math.isfinite(spread) and spread < LINEAR_KERNEL[dtype]
