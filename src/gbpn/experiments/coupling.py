"""Reading a learned coupling: scale removal, comparison with a known truth, figures and CSV.

BP normalises messages, so ``H`` and ``a * H`` give the same beliefs: only
``log H`` up to an additive constant is identifiable. Both matrices are therefore
compared after centring, ``log H - mean(log H)``, and the error reported is
``||L_learned - L_true||_F / ||L_true||_F`` on the centred logs (0 = identical up to
scale), with the Pearson correlation of their entries beside it.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np

from gbpn.io import atomic_write


def centred_log(H: np.ndarray) -> np.ndarray:
    L = np.log(np.asarray(H, dtype=float))
    return L - L.mean()


def compare_couplings(learned: np.ndarray, true: np.ndarray) -> Dict[str, float]:
    """Scale-free distance between a learned and a true coupling (see module docstring)."""
    a, b = centred_log(learned), centred_log(true)
    denom = np.linalg.norm(b)
    corr = float(np.corrcoef(a.ravel(), b.ravel())[0, 1]) if a.size > 1 and a.std() > 0 and b.std() > 0 else float("nan")
    return {
        "relative_error": float(np.linalg.norm(a - b) / denom) if denom > 0 else float("nan"),
        "correlation": corr,
        "max_abs_log_diff": float(np.abs(a - b).max()),
    }


def save_coupling_csv(path: str | Path, H: np.ndarray, class_names: Optional[Sequence[str]] = None) -> None:
    c = H.shape[0]
    names = list(class_names) if class_names and len(class_names) == c else [str(k) for k in range(c)]
    buf = io.StringIO()
    buf.write("class," + ",".join(names) + "\n")
    for n, row in zip(names, H):
        buf.write(n + "," + ",".join(f"{v:.6g}" for v in row) + "\n")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def plot_couplings(
    matrices: Dict[str, np.ndarray], path: str | Path, class_names: Optional[Sequence[str]] = None, suptitle: str = ""
) -> None:
    """Heatmaps of one or more couplings side by side (scale removed: mean of log H is 0), one colour scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mats = {k: np.exp(centred_log(v)) for k, v in matrices.items()}
    c = next(iter(mats.values())).shape[0]
    names = list(class_names) if class_names and len(class_names) == c else [str(k) for k in range(c)]
    vmin = min(m.min() for m in mats.values())
    vmax = max(m.max() for m in mats.values())
    fig, axes = plt.subplots(1, len(mats), figsize=(1.0 + (0.6 * c + 1.2) * len(mats), 1.4 + 0.55 * c), squeeze=False)
    for k, (ax, (title, H)) in enumerate(zip(axes[0], mats.items())):
        im = ax.imshow(H, cmap="viridis", vmin=vmin, vmax=vmax)
        ax.set_xticks(range(c), names, rotation=45, ha="right")
        ax.set_yticks(range(c), names)
        ax.set_xlabel("class of node j")
        if k == 0:
            ax.set_ylabel("class of node i")
        ax.set_title(title)
        if c <= 12:
            mid = (vmin + vmax) / 2
            for i in range(c):
                for j in range(c):
                    ax.text(j, i, f"{H[i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="w" if H[i, j] < mid else "k")
    fig.colorbar(im, ax=list(axes[0]), label="H (scaled: mean log H = 0)")
    if suptitle:
        fig.suptitle(suptitle)
    path = Path(path)
    atomic_write(path, lambda fh: fig.savefig(fh, format=path.suffix.lstrip(".") or "png", dpi=120,
                                              bbox_inches="tight"), mode="wb")
    plt.close(fig)
