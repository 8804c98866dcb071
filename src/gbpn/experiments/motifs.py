"""Triangle (motif) models in the benchmark grids (issue 50): their names, the exact-model reference, and how
well a learned triangle factor matches the true one.

* ``gbpn-triangle`` / ``gbpn-i-triangle`` (with a cap: ``gbpn-triangle50``, at most 50 triangles per node;
  with an encoder: ``gbpn-triangle:sign``) are GBPN / GBPN-I with ``--motifs triangle``.
* ``exact-bp`` (training labels clamped, as GBPN) and ``exact-bp-i`` (no evidence, as GBPN-I) run BP with
  the *true* factors of a synthetic MRF (``data.true_log_self``, ``true_H``, ``true_T``: the ``synth-triangle``
  data set, :func:`gbpn.data.triangle_mrf.make_triangle_mrf`): the accuracy a model that learned everything
  exactly would reach with the same inference, the reference row of the ``motifs`` preset.
"""
from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from gbpn.errors import GBPNError
from gbpn.train.config import MAX_COUNT

EXACT_MODELS = ("exact-bp", "exact-bp-i")
# the reference BP, damped so that loopy BP on the lattice settles (20 undamped steps still oscillate by
# 0.08 to 0.5 in L1 on synth-triangle; these end near 0.02 or below: the last residual is reported)
EXACT_STEPS, EXACT_DAMPING = 50, 0.5
_TRIANGLE = re.compile(r"^(gbpn|gbpn-i)-triangle(\d*)$")


def triangle_variant(variant: str) -> Optional[Tuple[str, Optional[int]]]:
    """``(variant, cap)`` of a triangle model's variant part (``gbpn-i-triangle50`` -> ``("gbpn-i", 50)``),
    or ``None`` for any other name."""
    m = _TRIANGLE.match(variant)
    if m is None:
        return None
    cap = int(m.group(2)) if m.group(2) else None
    if cap is not None and not 1 <= cap <= MAX_COUNT:  # as gbpn train's --max-triangles-per-node
        raise GBPNError(f"{variant}: the cap (triangles per node) must lie in 1..{MAX_COUNT}, got {cap}")
    return m.group(1), cap


def exact_bp(model: str, data, masks) -> Dict[str, float]:
    """Accuracy of BP with the true factors of ``data`` (see the module docstring) on ``masks``'s splits."""
    from gbpn.bp.motifs import MotifBeliefPropagation
    from gbpn.train.metrics import score

    if not all(hasattr(data, k) for k in ("true_log_self", "true_H", "true_T")):
        raise GBPNError(f"{model} runs BP with the true factors of a synthetic MRF (synth-triangle); "
                        f"{getattr(data, 'name', 'this data set')} has none")
    bp = MotifBeliefPropagation(int(data.num_classes), EXACT_STEPS, EXACT_DAMPING, coupling_init=data.true_H.double(),
                                learn_coupling=False, triangle_form="full", learn_triangle=False,
                                triangle_init=data.true_T.double())
    known = masks[0] if model == "exact-bp" else None
    with torch.no_grad():
        out, res = bp(data.true_log_self.double(), data.edge_index, data.triangle_index,
                      known_labels=None if known is None else data.y, known_mask=known, return_residuals=True)
    metrics = {f"{split}_accuracy": score("accuracy", out, data.y, mask)
               for split, mask in zip(("train", "val", "test"), masks)}
    metrics["last_residual"] = float(res[-1])
    return metrics


def triangle_fit(model: torch.nn.Module, data) -> Dict[str, float]:
    """For a triangle model trained on data with a known triangle factor: the correlation and relative error
    of the learned :math:`\\log T` with the true one, scale removed (:func:`~gbpn.experiments.coupling.compare_couplings`);
    empty otherwise."""
    from gbpn.experiments.coupling import compare_couplings

    triangle = getattr(getattr(model, "bp", None), "triangle", None)
    true_T = getattr(data, "true_T", None)
    if triangle is None or true_T is None:
        return {}
    cmp = compare_couplings(triangle.T.double().numpy(), np.asarray(true_T, dtype=float))
    return {"triangle_correlation": cmp["correlation"], "triangle_relative_error": cmp["relative_error"]}
