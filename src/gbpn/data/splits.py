"""Random train/validation/test splits as boolean masks."""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
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


def check_masks(masks: Sequence[Tensor], y: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(train, val, test)`` as boolean ``[N]`` masks, or a :class:`GBPNError` saying what to fix:
    a mask of another length or of node ids (not a boolean mask), an empty training mask, masks
    that overlap (the model would be scored on nodes it trained on), or masked nodes without a label
    (``y < 0``: a node scored against no label counts as wrong)."""
    if len(masks) != 3:
        raise GBPNError("masks must be (train, val, test)")
    n, out = y.numel(), []
    for name, m in zip(("train", "val", "test"), masks):
        m = torch.as_tensor(m, device=y.device)
        if m.dtype != torch.bool:
            if m.is_floating_point() or m.dim() != 1 or m.numel() != n or bool(((m != 0) & (m != 1)).any()):
                raise GBPNError(f"the {name} mask must be a boolean tensor with one entry per node ({n}); got "
                                f"{m.dtype} of shape {tuple(m.shape)} (node ids? torch_geometric.utils.index_to_mask "
                                "makes a mask of them)")
            m = m.bool()
        if m.dim() != 1 or m.numel() != n:
            raise GBPNError(f"the {name} mask must have one entry per node ({n}), got shape {tuple(m.shape)}")
        out.append(m)
    train, val, test = out
    if not bool(train.any()):
        raise GBPNError("the training mask is empty")
    for (a, ma), (b, mb) in ((("train", train), ("val", val)), (("train", train), ("test", test)),
                             (("val", val), ("test", test))):
        both = int((ma & mb).sum())
        if both:
            raise GBPNError(f"the {a} and {b} masks share {both} node(s); a node belongs to one of them")
    unlabelled = {name: int((m & (y < 0)).sum()) for name, m in zip(("train", "val", "test"), out)}
    if any(unlabelled.values()):
        which = ", ".join(f"{k} {v}" for k, v in unlabelled.items() if v)
        raise GBPNError(f"masks hold nodes without a label (y < 0: {which}); leave them out, e.g. mask & (y >= 0)")
    return train, val, test


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


SPLIT_NAMES = ("train", "val", "test")


def node_splits(y: Tensor, masks: Optional[Sequence[Tensor]]) -> np.ndarray:
    """Each node's part of a split as text, for a file a person reads: ``train``, ``val`` or ``test`` by
    ``masks``, ``unlabelled`` where ``y < 0``, ``unused`` for a labelled node in none of them (a public
    split that leaves some out); ``""`` for every node when ``masks`` is ``None`` (no split known)."""
    out = np.full(y.numel(), "" if masks is None else "unused", dtype=object)
    if masks is None:
        return out
    out[(y < 0).cpu().numpy()] = "unlabelled"
    for name, m in zip(SPLIT_NAMES, masks):
        out[m.cpu().numpy()] = name
    return out
