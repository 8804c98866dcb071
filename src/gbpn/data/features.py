"""Node features as the models read them."""
from __future__ import annotations

import torch
from torch import Tensor


def prepare_features(x: Tensor, max_density: float = 0.1, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sparse COO features when most entries are zero (bag-of-words), else dense; in ``dtype``
    (:func:`feature_dtype` gives a model's)."""
    x = x.to(dtype)
    if x.is_sparse:
        return x.coalesce()
    if x.numel() and float((x != 0).float().mean()) <= max_density:
        return x.to_sparse().coalesce()
    return x
