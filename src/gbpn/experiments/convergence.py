"""How BP refines a trained model's predictions step by step (paper Figure 4).

:func:`convergence` runs BP for ``t = 0 .. T`` steps on a trained model (``T`` steps in all: each
continues from the messages of the one before) and returns
the residual :math:`\\|p^{(t)} - p^{(T)}\\|` per step (mean and max over nodes of the L1
distance between class distributions), the train/val/test accuracy per step, the
residual between consecutive steps, and per node the step after which its prediction
stays correct (``-1`` if it is wrong at step T).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.io import pyplot, save_figure, write_table
from gbpn.models.gbpn import GBPN
from gbpn.train.fit import feature_dtype, predict
from gbpn.data.features import prepare_features
from gbpn.data.graph import clean_graph


@torch.no_grad()
def belief_steps(model: GBPN, data: Data, known_mask: Optional[Tensor], num_steps: int) -> List[Tensor]:
    """The log-beliefs after ``t = 0 .. num_steps`` BP steps of a trained model. Each step continues from
    the previous one's messages (``messages=``), so the whole costs ``num_steps`` steps, not
    ``num_steps^2 / 2``; past a step whose belief change is below the layer's ``tol`` the beliefs stay
    (as a run of more steps stops there). A triangle model reruns BP for every ``t`` (its messages are
    not handed back)."""
    x = prepare_features(data.x, dtype=feature_dtype(model))  # a float64 model reads float64 features
    if getattr(model, "motifs", "none") != "none":
        return [predict(model, data, known_mask, num_steps=t, x=x) for t in range(num_steps + 1)]
    model.eval()
    graph = clean_graph(data) if "rev_index" not in data else data  # as predict prepares it
    log_self = model.self_potential(x, graph.edge_index)  # once: every step starts from it
    options = dict(edge_weight=getattr(graph, "edge_weight", None), rev_index=getattr(graph, "rev_index", None),
                   known_labels=graph.y if known_mask is not None else None, known_mask=known_mask)
    steps, messages = [model.bp(log_self, graph.edge_index, num_steps=0, **options)], None
    for _ in range(num_steps):
        log_b, res, messages = model.bp(log_self, graph.edge_index, num_steps=1, messages=messages,
                                        return_residuals=True, return_messages=True, **options)
        steps.append(log_b)
        if model.bp.tol is not None and res.numel() and float(res[-1]) < model.bp.tol:
            break
    return steps + [steps[-1]] * (num_steps + 1 - len(steps))


@torch.no_grad()
def convergence(
    model: GBPN,
    data: Data,
    masks: Tuple[Tensor, Tensor, Tensor],
    known_mask: Optional[Tensor] = None,
    num_steps: int = 20,
) -> Dict[str, np.ndarray]:
    """Per-step residuals and accuracies, and per-node settling steps (see module docstring), over
    ``num_steps`` BP steps :math:`T` (:func:`belief_steps`: :math:`T` steps in all)."""
    beliefs = [b.exp() for b in belief_steps(model, data, known_mask, num_steps)]
    final = beliefs[-1]
    y = data.y
    correct = torch.stack([b.argmax(1) == y for b in beliefs])  # [T+1, N]
    # settle[i] = first t such that correct at every t' >= t
    wrong_after = torch.flip(torch.cummax(torch.flip((~correct).int(), [0]), 0).values, [0])  # 1 if wrong at some t' >= t
    settled = (wrong_after == 0)
    settle = torch.where(settled.any(0), settled.int().argmax(0), torch.full_like(y, -1))
    out = {
        "step": np.arange(num_steps + 1),
        "residual_mean": np.array([float((b - final).abs().sum(1).mean()) for b in beliefs]),
        "residual_max": np.array([float((b - final).abs().sum(1).max()) for b in beliefs]),
        "step_change_max": np.array([np.nan] + [float((beliefs[t] - beliefs[t - 1]).abs().sum(1).max())
                                                for t in range(1, num_steps + 1)]),
        "settle_step": settle.numpy(),
    }
    for name, m in zip(("train", "val", "test"), masks):
        out[f"{name}_accuracy"] = correct[:, m].float().mean(1).numpy() if bool(m.any()) else np.full(num_steps + 1, np.nan)
    return out


def steps_to_tolerance(step_change: np.ndarray, tol: float = 1e-4) -> Optional[int]:
    """First step whose largest belief change from the previous step is below ``tol``."""
    below = np.nonzero(np.nan_to_num(step_change, nan=np.inf) < tol)[0]
    return int(below[0]) if below.size else None


def node_layout(data: Data, seed: int = 0) -> Tuple[np.ndarray, str]:
    """2-D coordinates from a spectral embedding of the graph joined with the (PCA-reduced)
    features, reduced with UMAP when ``umap-learn`` is installed, else with t-SNE."""
    import scipy.sparse as sp
    from sklearn.decomposition import PCA, TruncatedSVD
    from sklearn.manifold import TSNE, SpectralEmbedding

    n = data.num_nodes
    ei = data.edge_index.numpy()
    adj = sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n)).tocsr() + sp.eye(n)
    with warnings.catch_warnings():  # a disconnected graph is expected here: only a picture depends on it
        warnings.filterwarnings("ignore", message="Graph is not fully connected")
        spec = SpectralEmbedding(n_components=8, affinity="precomputed", random_state=seed).fit_transform(adj)
    x = data.x.numpy()
    k = min(16, x.shape[1])
    feats = (TruncatedSVD(k, random_state=seed) if x.shape[1] > 64 else PCA(k, random_state=seed)).fit_transform(x) if k > 1 else x
    z = np.concatenate([spec / (spec.std() + 1e-12), feats / (feats.std() + 1e-12)], axis=1)
    try:
        import umap  # type: ignore

        with warnings.catch_warnings():  # seeded UMAP runs on one thread, and says so each time
            warnings.filterwarnings("ignore", message="n_jobs value", category=UserWarning)
            return umap.UMAP(n_components=2, random_state=seed).fit_transform(z), "UMAP"
    except ImportError:
        tsne = TSNE(n_components=2, random_state=seed, init="pca", perplexity=min(30.0, (n - 1) / 3))  # small graphs
        return tsne.fit_transform(z), "t-SNE (umap-learn not installed)"


def save_convergence(result: Dict[str, np.ndarray], layout: Optional[np.ndarray], method: str,
                     out_dir: str | Path, title: str = "") -> Sequence[Path]:
    """Write convergence.csv, settle_steps.csv and the figure as PNG and SVG into ``out_dir``."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator  # matplotlib is there: pyplot() checked

    out = Path(out_dir)
    cols = ["step", "residual_mean", "residual_max", "step_change_max", "train_accuracy", "val_accuracy", "test_accuracy"]
    write_table(out / "convergence.csv", cols,
                ([f"{result[c][t]:.6g}" for c in cols] for t in range(len(result["step"]))))
    xy = layout is not None
    write_table(out / "settle_steps.csv", ["node", "settle_step"] + (["x", "y"] if xy else []),
                ([i, s] + ([f"{layout[i, 0]:.5g}", f"{layout[i, 1]:.5g}"] if xy else [])
                 for i, s in enumerate(result["settle_step"])))

    ncol = 2 if layout is not None else 1
    fig, axes = plt.subplots(1, ncol, figsize=(6.5 * ncol, 4.6), squeeze=False)
    ax = axes[0, 0]
    steps = result["step"]
    ax.semilogy(steps[:-1], np.maximum(result["residual_mean"][:-1], 1e-12), "b-o", ms=3, label="mean ‖p(t) − p(T)‖₁")
    ax.semilogy(steps[:-1], np.maximum(result["residual_max"][:-1], 1e-12), "b--", label="max ‖p(t) − p(T)‖₁")
    ax.set_xlabel("BP step t")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
    ax.set_ylabel("residual to the last step", color="b")
    ax2 = ax.twinx()
    for name, color in (("train", "tab:red"), ("val", "tab:orange"), ("test", "tab:green")):
        ax2.plot(steps, 100 * result[f"{name}_accuracy"], color=color, label=f"{name} accuracy")
    ax2.set_ylabel("accuracy (%)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    # below the axes, where no curve runs (tight_layout makes room for it)
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    ax.set_title(f"BP convergence {title}")
    if layout is not None:
        ax = axes[0, 1]
        s = result["settle_step"]
        ok = s >= 0
        ax.scatter(layout[~ok, 0], layout[~ok, 1], s=3, c="lightgrey", label="wrong at the last step")
        sc = ax.scatter(layout[ok, 0], layout[ok, 1], s=4, c=s[ok], cmap="viridis")
        fig.colorbar(sc, ax=ax, label="step after which the prediction stays correct",
                     ticks=MaxNLocator(integer=True))
        ax.set_title(f"nodes laid out by {method.split(' ')[0]}")
        ax.set_xlabel("component 1")
        ax.set_ylabel("component 2")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, markerscale=3, frameon=False)
    fig.tight_layout()
    save_figure(fig, out / "convergence")
    return [out / "convergence.png", out / "convergence.svg"]
