"""What several commands write: a file option that may name a folder, and a mean with its spread."""
from __future__ import annotations

import math
import os
from typing import Optional


def file_in(path: Optional[str], name: str) -> Optional[str]:
    """A file option's value, or ``name`` inside it when it names a folder (an existing one, or one
    written with a trailing slash)."""
    if path and (path.endswith(("/", os.sep)) or os.path.isdir(path)):
        return os.path.join(path, name)
    return path


def mean_std(summary: dict, key: str) -> str:
    """``85.70 ± 1.40`` in per cent; no ± for one trial, where there is no spread to report."""
    mean = f"{100 * summary[f'{key}_mean']:.2f}"
    return mean if summary["num_trials"] < 2 else f"{mean} ± {100 * summary[f'{key}_std']:.2f}"


def ratio(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "undefined"
