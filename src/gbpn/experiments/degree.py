"""Predicted confidence against node degree (paper section 2.4, the wrapped figure).

GBPN's belief in a node multiplies one message per neighbour into its self-potential,
so its confidence can grow exponentially with degree; this is why the training loss
tempers beliefs by :math:`\\alpha_i = d_i^{-1/2}`. :func:`confidence_by_degree` bins the
test nodes by degree and reports mean confidence (largest class probability), accuracy
and log-likelihood per bin.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.graph.degree import degree
from gbpn.io import pyplot, save_figure, write_table
from gbpn.models.gbpn import GBPN
from gbpn.train.fit import predict


@torch.no_grad()
def confidence_by_degree(model: GBPN, data: Data, mask: Tensor, known_mask: Optional[Tensor] = None,
                         num_bins: int = 8) -> Dict[str, np.ndarray]:
    log_b = predict(model, data, known_mask)
    deg = degree(data.edge_index, data.num_nodes)[mask].numpy()
    conf = log_b[mask].exp().max(1).values.numpy()
    y = data.y[mask]
    correct = (log_b[mask].argmax(1) == y).numpy()
    loglik = log_b[mask].gather(1, y.view(-1, 1)).view(-1).numpy()
    # log-spaced bins over the degrees present (degree 0 gets its own bin)
    hi = max(int(deg.max()), 1)
    edges = np.unique(np.concatenate([[0, 1], np.round(np.logspace(0, np.log10(hi + 1), num_bins)).astype(int)]))
    which = np.clip(np.searchsorted(edges, deg, side="right") - 1, 0, len(edges) - 2)
    rows = {k: [] for k in ("degree_low", "degree_high", "count", "confidence", "accuracy", "log_likelihood")}
    for b in range(len(edges) - 1):
        sel = which == b
        if not sel.any():
            continue
        rows["degree_low"].append(edges[b])
        rows["degree_high"].append(edges[b + 1] - 1 if b < len(edges) - 2 else hi)
        rows["count"].append(int(sel.sum()))
        rows["confidence"].append(float(conf[sel].mean()))
        rows["accuracy"].append(float(correct[sel].mean()))
        rows["log_likelihood"].append(float(loglik[sel].mean()))
    out = {k: np.array(v) for k, v in rows.items()}
    out["node_degree"], out["node_confidence"], out["node_correct"] = deg, conf, correct
    return out


def save_degree(result: Dict[str, np.ndarray], out_dir: str | Path, title: str = "") -> None:
    plt = pyplot()

    out = Path(out_dir)
    cols = ["degree_low", "degree_high", "count", "confidence", "accuracy", "log_likelihood"]
    write_table(out / "degree.csv", cols, ([f"{result[c][i]:.6g}" for c in cols] for i in range(len(result["count"]))))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    deg = np.maximum(result["node_degree"], 0.8)
    ok = result["node_correct"].astype(bool)
    ax.scatter(deg[ok], result["node_confidence"][ok], s=4, alpha=0.3, c="tab:green", label="correct")
    ax.scatter(deg[~ok], result["node_confidence"][~ok], s=6, alpha=0.6, c="tab:red", label="wrong")
    mid = np.sqrt(np.maximum(result["degree_low"], 0.8) * np.maximum(result["degree_high"], 0.8))
    ax.plot(mid, result["confidence"], "k-o", ms=4, label="mean confidence per bin")
    ax.set_xscale("log")
    ax.set_xlabel("node degree")
    ax.set_ylabel("predicted probability of the top class")
    ax.set_title(f"confidence against degree {title}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "degree")
