"""Random train/validation/test splits as boolean masks."""
from __future__ import annotations

from typing import Dict, Tuple

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


def trial_split(data, trial: int, seed: int, train: float = 0.3, val: float = 0.2
                ) -> Tuple[Tuple[Tensor, Tensor, Tensor], Dict]:
    """The masks of one trial and a description that rebuilds them (:func:`split_from_record`):
    the data set's public split number ``trial`` (modulo their count) where it has
    ``public_splits`` ``[3, S, N]`` (geom-gcn, Platonov et al., OGB), else a random
    ``train``/``val``/rest split seeded with ``seed``."""
    public = getattr(data, "public_splits", None)
    if public is not None:
        k = trial % public.size(1)
        return (public[0, k], public[1, k], public[2, k]), {"kind": "public", "index": k}
    return random_split(data.y, train, val, seed), {"kind": "random", "train": train, "val": val, "seed": seed}


def split_from_record(data, record: Dict) -> Tuple[Tensor, Tensor, Tensor]:
    """Masks from a description written by :func:`trial_split` (older records: random)."""
    if record.get("kind") == "public":
        public = getattr(data, "public_splits", None)
        if public is None:
            raise GBPNError("the checkpoint was trained on a public split that this graph does not have")
        k = int(record["index"])
        return public[0, k], public[1, k], public[2, k]
    return random_split(data.y, record["train"], record["val"], record["seed"])
