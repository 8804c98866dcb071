"""Figures (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np


def plot_coupling(H: np.ndarray, path: str | Path, class_names: Optional[Sequence[str]] = None,
                  title: str = "learned coupling H (scale removed)") -> Path:
    """Heatmap of a coupling matrix with its values written in the cells; saved atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gbpn.io import atomic_write

    H = np.asarray(H, dtype=float)
    c = H.shape[0]
    names = list(class_names) if class_names and len(class_names) == c else [str(k) for k in range(c)]
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * c, 1.0 + 0.6 * c))
    im = ax.imshow(H, cmap="viridis")
    ax.set_xticks(range(c), names, rotation=45, ha="right")
    ax.set_yticks(range(c), names)
    ax.set_xlabel("class of node j")
    ax.set_ylabel("class of node i")
    ax.set_title(title)
    if c <= 12:
        for i in range(c):
            for j in range(c):
                ax.text(j, i, f"{H[i, j]:.2f}", ha="center", va="center", color="w" if H[i, j] < H.mean() else "k", fontsize=8)
    fig.colorbar(im, ax=ax, label="H[i, j]")
    fig.tight_layout()
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=120), mode="wb")
    plt.close(fig)
    return path
