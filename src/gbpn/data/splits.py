"""Random train/validation/test splits as boolean masks."""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from gbpn.errors import GBPNError


def random_split(
    y: Tensor, train: float = 0.3, val: float = 0.2, seed: int = 0
) -> Tuple[Tensor, Tensor, Tensor]:
    """Split the labelled nodes (``y >= 0``) at random into train/val/test masks.

    The test set is everything labelled that is not train or val (50% by default).
    The permutation comes from a ``torch.Generator`` seeded with ``seed``.
    """
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise GBPNError(f"split fractions must be positive and sum below 1, got train={train}, val={val}")
    labelled = (y >= 0).nonzero().view(-1)
    n = labelled.numel()
    if n < 3:
        raise GBPNError(f"need at least 3 labelled nodes to split, got {n}")
    perm = labelled[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]
    n_train, n_val = max(1, int(round(train * n))), int(round(val * n))
    masks = []
    for idx in (perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]):
        m = torch.zeros(y.numel(), dtype=torch.bool)
        m[idx] = True
        masks.append(m)
    return masks[0], masks[1], masks[2]
