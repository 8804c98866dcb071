"""Reading a learned coupling: scale removal, comparison with a known truth, figures and CSV.

BP normalises messages, so ``H`` and ``a * H`` give the same beliefs: only
``log H`` up to an additive constant is identifiable. Both matrices are therefore
compared after centring, ``log H - mean(log H)``, and the error reported is
``||L_learned - L_true||_F / ||L_true||_F`` on the centred logs (0 = identical up to
scale), with the Pearson correlation of their entries beside it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from gbpn.io import atomic_write, pyplot, write_table


def _names(class_names: Optional[Sequence[str]], c: int) -> list:
    """The class names when there is one per class, else the class numbers."""
    return list(class_names) if class_names and len(class_names) == c else [str(k) for k in range(c)]


def _save(plt, fig, path: str | Path) -> None:
    """Write ``fig`` to ``path`` atomically, in the format its suffix names (PNG without one), and close it."""
    path = Path(path)
    atomic_write(path, lambda fh: fig.savefig(fh, format=path.suffix.lstrip(".") or "png", dpi=120,
                                              bbox_inches="tight"), mode="wb")
    plt.close(fig)


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
    names = _names(class_names, c)
    # class names may hold commas, quotes or a formula: write_table quotes and neutralises them
    write_table(path, ["class", *names], ([n, *(f"{v:.6g}" for v in row)] for n, row in zip(names, H)))


def plot_couplings(
    matrices: Dict[str, np.ndarray], path: str | Path, class_names: Optional[Sequence[str]] = None, suptitle: str = ""
) -> None:
    """Heatmaps of one or more couplings side by side (scale removed: mean of log H is 0), one colour scale."""
    plt = pyplot()

    mats = {k: np.exp(centred_log(v)) for k, v in matrices.items()}
    c = next(iter(mats.values())).shape[0]
    names = _names(class_names, c)
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
    _save(plt, fig, path)


def identifiability(kinds: Sequence[str], output: str | Path, epochs: int = 500, seed: int = 0,
                    variant: str = "gbpn", log=print, progress: bool = False) -> Dict[str, Dict[str, float]]:
    """Train on grids sampled here with a known coupling and compare the learned H with it
    (paper Figure 3 a-d). Writes ``identifiability_<kind>.png`` / ``.svg``, ``identifiability.csv``
    and returns the errors per kind. ``progress``: a bar on a terminal, elsewhere a line per grid with
    the time spent and left (:class:`gbpn.progress.Progress`). Each finished grid's results are kept in
    ``output/units`` until the study is written: a call after an interruption trains only the grids left."""
    import shutil

    from gbpn.progress import Progress
    from gbpn.train.config import TrainConfig
    from gbpn.data.datasets import load_dataset
    from gbpn.train import fit as fitting
    from gbpn.train.units import Units

    out = Path(output)
    results: Dict[str, Dict[str, float]] = {}
    units = Units(out / "units", {"study": "identifiability", "epochs": epochs, "variant": variant}, seed, ())
    with Progress(len(kinds), "identifiability", unit="grid", enabled=progress,
                  plan=f"{', '.join(kinds)}: each sampled, then trained for {epochs} epochs") as bar:
        for kind in kinds:
            bar.start(kind)
            saved = units.get_torch(kind)
            if saved is not None:  # trained before an interruption (its figures are written)
                results[kind] = saved
                bar.done("kept from before")
                continue
            data = load_dataset(f"synth-{kind}")
            res = fitting.fit(data, TrainConfig(variant=variant, epochs=epochs), seed=seed)
            learned = res.model.bp.coupling.normalized().numpy()
            true = data.true_H.numpy()
            cmp = compare_couplings(learned, true)
            results[kind] = {**cmp, "test_accuracy": res.metrics["test_accuracy"]}
            for ext in ("png", "svg"):
                plot_couplings({"true H": true, "learned H": learned}, out / f"identifiability_{kind}.{ext}",
                               suptitle=f"{kind}: relative error {cmp['relative_error']:.2f}, "
                                        f"correlation {cmp['correlation']:.3f}")
            units.put_torch(kind, results[kind])
            bar.done()
            log(f"{kind}: relative error {cmp['relative_error']:.3f}, correlation {cmp['correlation']:.3f}, "
                f"test accuracy {100 * res.metrics['test_accuracy']:.1f}%")
    cols = ["relative_error", "correlation", "max_abs_log_diff", "test_accuracy"]
    write_table(out / "identifiability.csv", ["kind", *cols],
                ([k, *(f"{r[c]:.6g}" for c in cols)] for k, r in results.items()))
    shutil.rmtree(out / "units", ignore_errors=True)
    return results


def favoured_third(T: np.ndarray) -> np.ndarray:
    r"""For a triangle factor :math:`T` ``[c, c, c]``: ``[c, c]``, the third label :math:`k` that a triangle
    whose other two corners hold :math:`a` and :math:`b` favours most, :math:`\arg\max_k T_{abk}`."""
    return np.asarray(T).argmax(axis=2)


def save_triangle_csv(path: str | Path, T: np.ndarray, class_names: Optional[Sequence[str]] = None) -> None:
    """Every entry of a triangle factor, one row per ``(a, b, k)``, scale removed (mean of log T is 0)."""
    c = T.shape[0]
    names = _names(class_names, c)
    scaled = np.exp(centred_log(T))
    write_table(path, ["class_a", "class_b", "class_k", "T"],
                ([names[a], names[b], names[k], f"{scaled[a, b, k]:.6g}"]
                 for a in range(c) for b in range(c) for k in range(c)))


def plot_triangle(T: np.ndarray, path: str | Path, class_names: Optional[Sequence[str]] = None,
                  true_T: Optional[np.ndarray] = None, suptitle: str = "") -> None:
    """Heatmaps of a triangle factor, one slice :math:`T_{\\cdot\\cdot k}` per third label :math:`k` (scale
    removed, one colour scale), with the true factor's slices in a second row when given."""
    plt = pyplot()

    rows = {"learned": np.exp(centred_log(T))}
    if true_T is not None:
        rows = {"true": np.exp(centred_log(true_T)), **rows}
    c = T.shape[0]
    names = _names(class_names, c)
    vmin, vmax = min(m.min() for m in rows.values()), max(m.max() for m in rows.values())
    fig, axes = plt.subplots(len(rows), c, figsize=(1.0 + (0.5 * c + 1.0) * c, (1.0 + 0.5 * c) * len(rows) + 0.6),
                             squeeze=False)
    for r, (what, M) in enumerate(rows.items()):
        for k in range(c):
            ax = axes[r][k]
            im = ax.imshow(M[:, :, k], cmap="viridis", vmin=vmin, vmax=vmax)
            ax.set_xticks(range(c), names, rotation=45, ha="right")
            ax.set_yticks(range(c), names)
            ax.set_title(f"{what}: third = {names[k]}", fontsize=9)
            if c <= 6:
                for i in range(c):
                    for j in range(c):
                        ax.text(j, i, f"{M[i, j, k]:.2f}", ha="center", va="center", fontsize=7,
                                color="w" if M[i, j, k] < (vmin + vmax) / 2 else "k")
    fig.colorbar(im, ax=[a for row in axes for a in row], label="T (scaled: mean log T = 0)")
    if suptitle:
        fig.suptitle(suptitle)
    _save(plt, fig, path)


def triangle_report(T: np.ndarray, H: np.ndarray, class_names: Sequence[str],
                    true_T: Optional[np.ndarray] = None) -> List[str]:
    r"""Lines that read a learned triangle factor: per pair of corner labels :math:`(a, b)` the third
    label it favours and by how much (:math:`\max_k T_{abk} / \mathrm{mean}_k T_{abk}`); how far
    :math:`\log T` departs from a constant (its std, scale removed: 0 is a triangle factor that adds
    nothing to :math:`H`); the correlation with the true factor when known."""
    c = T.shape[0]
    L = centred_log(T)
    fav = favoured_third(T)
    width = max(8, max(len(n) for n in class_names) + 1)
    cell = max(width, max(len(n) for n in class_names) + 7)
    lines = ["triangle factor T: the third label a triangle favours, given its other two corners' labels "
             "(row, column), and max_k T / mean_k T:", " " * width + "".join(f"{n:>{cell}}" for n in class_names)]
    for a in range(c):
        lines.append(f"{class_names[a]:>{width}}" + "".join(
            f"{class_names[fav[a, b]] + ' x' + format(T[a, b].max() / T[a, b].mean(), '.2f'):>{cell}}"
            for b in range(c)))
    lines.append(f"std of log T (scale removed): {L.std():.3f} (0: T adds nothing to the coupling H, whose log "
                 f"std is {centred_log(H).std():.3f})")
    if true_T is not None:
        cmp = compare_couplings(T, np.asarray(true_T))
        lines.append(f"against the true triangle factor (scale removed): relative error {cmp['relative_error']:.3f}, "
                     f"correlation {cmp['correlation']:.3f}")
    return lines


def plot_cp_factors(log_u: np.ndarray, path: str | Path, class_names: Optional[Sequence[str]] = None,
                    suptitle: str = "") -> None:
    """Heatmap of a CP triangle factor's :math:`u` ``[R, c]`` (rank by class), for many classes, where
    the slices of :func:`plot_triangle` would be too many to read."""
    plt = pyplot()

    R, c = log_u.shape
    names = _names(class_names, c)
    fig, ax = plt.subplots(figsize=(1.5 + 0.3 * c, 1.0 + 0.3 * R))
    im = ax.imshow(np.exp(log_u), cmap="viridis", aspect="auto")
    ax.set_xticks(range(c), names, rotation=90)
    ax.set_xlabel("class")
    ax.set_ylabel("rank r")
    fig.colorbar(im, ax=ax, label="u_r(class): T = sum_r u_r(a) u_r(b) u_r(k)")
    if suptitle:
        ax.set_title(suptitle)
    _save(plt, fig, path)
