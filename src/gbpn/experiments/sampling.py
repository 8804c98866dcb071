r"""Neighbour sub-sampling studies: the variance of Exp3 importance sampling against uniform
and optimal sampling (paper appendix B, Figure 7), and accuracy and log-likelihood as the
number of sampled neighbours varies, split by degree (paper section 3.3, Figure 5).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.train.config import TrainConfig
from gbpn.graph.degree import degree
from gbpn.data.splits import random_split
from gbpn.errors import GBPNError
from gbpn.io import pyplot, save_figure, write_csv
from gbpn.progress import Progress
from gbpn.sampling.importance import variance_ratios
from gbpn.train.fit import fit, predict
from gbpn.train.units import Units
from gbpn.data.features import prepare_features

RATIOS = tuple(f"{k}_{a}_vs_{b}" for k in ("total", "median")
               for a, b in (("importance", "optimal"), ("uniform", "optimal"), ("importance", "uniform")))


def _known(config: TrainConfig, train_mask: Tensor) -> Optional[Tensor]:
    return train_mask if config.variant == "gbpn" else None


def largest_degree(data: Data) -> int:
    """The most neighbours any node has (0 without edges)."""
    return int(degree(data.edge_index, data.num_nodes).max()) if data.num_edges else 0


def variance_study(data: Data, config: TrainConfig, trials: int = 3, seed: int = 0,
                   progress: bool = False, keep: Optional[str | Path] = None) -> Dict[str, List[Dict]]:
    """Train with ``--sampler exp3`` and, after every epoch, compare the variance of Exp3's
    distributions with uniform and optimal (:math:`p^*`) sampling on the whole graph's
    messages under the current model; also train with uniform sampling on the same splits.

    ``config`` must describe mini-batch training (``batch_size`` and ``fanout``). The
    messages come from full-neighbourhood BP in evaluation mode, with the training labels
    as evidence for GBPN, the same conditions as its evaluation.

    Returns ``{"epochs": [...], "accuracy": [...]}``: one row per (trial, epoch) with the
    ratios of :func:`gbpn.sampling.importance.variance_ratios`, and one row per
    (trial, sampler) with its test accuracy. ``progress``: a bar on a terminal, elsewhere a line per
    trained model with the time spent and left (:class:`gbpn.progress.Progress`). ``keep``: a folder that
    keeps each finished (trial, sampler) training's rows, so that a call after an interruption trains only
    what is still missing (the caller removes it once the study is saved).
    """
    if config.batch_size is None or config.fanout is None:
        raise GBPNError("the variance study trains on sampled trees: give a batch size and a fanout")
    max_deg = largest_degree(data)
    if max_deg <= config.fanout:
        raise GBPNError(f"no node has more than {config.fanout} neighbours (the largest degree is {max_deg}), "
                        f"so every sampler keeps all of them and there is no variance to compare: "
                        f"give a fanout below {max_deg}" if max_deg > 1 else
                        "no node has more than one neighbour: there is nothing to sample")
    x = prepare_features(data.x)
    epochs: List[Dict] = []
    accuracy: List[Dict] = []
    graph = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "study": "variance"}
    units = Units(keep, {**config.to_dict(), **graph}, seed, (data.y,))
    with Progress(2 * trials, "sampling study", unit="training", enabled=progress,
                  plan=f"{trials} trial(s) x Exp3 and uniform sampling, {config.epochs} epochs each") as bar:
        for t in range(trials):
            s = seed + t
            masks = random_split(data.y, config.train_frac, config.val_frac, s)
            known = _known(config, masks[0])

            def record(epoch: int, model, sampler) -> None:
                model.eval()
                with torch.no_grad():
                    _, log_msg = model.bp(model.self_potential(x, data.edge_index), data.edge_index,
                                          rev_index=data.rev_index,
                                          known_labels=data.y if known is not None else None, known_mask=known,
                                          return_messages=True)
                epochs.append({"trial": t, "epoch": epoch, **variance_ratios(
                    log_msg, data.edge_index, data.num_nodes, config.fanout, sampler.probs, sampler.graph)})
                model.train()

            for sampler in ("exp3", "uniform"):
                bar.start(f"trial {t}, {sampler} sampling")
                saved = units.get_torch(f"trial{t}-{sampler}")  # finished before an interruption
                if saved is not None:
                    epochs.extend(saved["epochs"])
                    accuracy.append(saved["accuracy"])
                    bar.done("kept from before")
                    continue
                first = len(epochs)
                res = fit(data, replace(config, sampler=sampler), seed=s, masks=masks,
                          on_epoch=record if sampler == "exp3" else None)
                accuracy.append({"trial": t, "sampler": sampler, "test_accuracy": res.metrics["test_accuracy"],
                                 "val_accuracy": res.metrics["val_accuracy"]})
                units.put_torch(f"trial{t}-{sampler}", {"epochs": epochs[first:], "accuracy": accuracy[-1]})
                bar.done(f"test accuracy {100 * res.metrics['test_accuracy']:.1f}%")
    return {"epochs": epochs, "accuracy": accuracy}


def _mean_std(rows: List[Dict], key: str, by: str = "epoch"):
    xs = sorted({r[by] for r in rows})
    vals = [[r[key] for r in rows if r[by] == x and np.isfinite(r[key])] for x in xs]
    mean = np.array([np.mean(v) if v else np.nan for v in vals])
    std = np.array([np.std(v) if v else np.nan for v in vals])
    return np.array(xs), mean, std


def _finite_mean(values: List[float]) -> float:
    """Mean of the defined (finite) ratios; NaN when none is."""
    ok = [v for v in values if np.isfinite(v)]
    return float(np.mean(ok)) if ok else float("nan")


def save_variance_study(result: Dict[str, List[Dict]], out_dir: str | Path, title: str = "") -> Dict[str, float]:
    """Write ``variance.csv``, ``sampler_accuracy.csv`` and ``variance.png``/``.svg``
    (two panels as in appendix Figure 7); return a summary of the last epochs: the mean of
    each ratio where it is defined, NaN where it never is."""
    plt = pyplot()

    out = Path(out_dir)
    write_csv(out / "variance.csv", result["epochs"])
    write_csv(out / "sampler_accuracy.csv", result["accuracy"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for pair, label, color, ax in (("importance_vs_optimal", "Exp3 / optimal", "tab:blue", axes[0]),
                                   ("uniform_vs_optimal", "uniform / optimal", "tab:orange", axes[0]),
                                   ("importance_vs_uniform", "Exp3 / uniform", "tab:green", axes[1])):
        for kind, style in (("total", "-"), ("median", ":")):
            ep, mean, std = _mean_std(result["epochs"], f"{kind}_{pair}")
            ax.plot(ep, mean, style, color=color, label=f"{label} ({'summed over nodes' if kind == 'total' else 'median node'})")
            ax.fill_between(ep, mean - std, mean + std, color=color, alpha=0.15)
    for ax, ttl in zip(axes, ("(a) variance relative to the optimal p*", "(b) variance of Exp3 relative to uniform")):
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("epoch")
        ax.set_ylabel("variance ratio (mean ± std over trials)")
        ax.set_title(ttl, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"neighbour sampling variance {title}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, out / "variance")
    rows = result["epochs"]
    last = max(r["epoch"] for r in rows)
    tail = [r for r in rows if r["epoch"] >= last // 2]  # the second half of training
    summary = {f"{k}_second_half": _finite_mean([r[k] for r in tail]) for k in RATIOS}
    for s in ("exp3", "uniform"):
        acc = [r["test_accuracy"] for r in result["accuracy"] if r["sampler"] == s]
        summary[f"{s}_test_accuracy_mean"], summary[f"{s}_test_accuracy_std"] = float(np.mean(acc)), float(np.std(acc))
    return summary


def degree_split(deg: Tensor, low_fraction: float = 0.3) -> Tensor:
    """Boolean mask of the ``low_fraction`` lowest-degree entries (ties broken by position)."""
    order = torch.argsort(deg, stable=True)
    low = torch.zeros(deg.numel(), dtype=torch.bool)
    low[order[: int(round(low_fraction * deg.numel()))]] = True
    return low


def subsampling_study(data: Data, fanouts: Sequence[Optional[int]], config: TrainConfig, trials: int = 1,
                      seed: int = 0, progress: bool = False, keep: Optional[str | Path] = None) -> List[Dict]:
    """The paper's degree-misalignment experiment: a 1-hop GBPN trained on the *unweighted*
    NLL with at most ``d`` uniformly sampled neighbours per node (``None``: all), then
    evaluated with every neighbour. For each ``d`` and trial: test log-likelihood and
    accuracy overall, on the 30% lowest-degree and on the 70% highest-degree test nodes.
    ``progress``: a bar on a terminal, elsewhere a line per trained model (:class:`gbpn.progress.Progress`).
    ``keep``: a folder that keeps each finished (fanout, trial) row, so that a call after an interruption
    trains only the rows still missing (the caller removes it once the study is saved).
    """
    rows = []
    graph = {"nodes": data.num_nodes, "edges": data.edge_index.size(1), "study": "subsampling"}
    units = Units(keep, {**config.to_dict(), **graph}, seed, (data.y,))
    with Progress(len(fanouts) * trials, "sub-sampling study", unit="training", enabled=progress,
                  plan=f"{len(fanouts)} fanout(s) x {trials} trial(s), {config.epochs} epochs each") as bar:
        deg_all = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        for fanout in fanouts:
            cfg = replace(config, num_steps=1, num_hops=1, fanout=fanout, degree_weight=False,
                          batch_size=config.batch_size or 256, sampler="uniform")
            for t in range(trials):
                bar.start(f"max neighbours {fanout if fanout is not None else 'all'}, trial {t}")
                row = units.get(f"fanout{fanout}-trial{t}")
                if row is not None:  # finished before an interruption
                    rows.append(row)
                    bar.done("kept from before")
                    continue
                s = seed + t
                masks = random_split(data.y, cfg.train_frac, cfg.val_frac, s)
                res = fit(data, cfg, seed=s, masks=masks)
                log_b = predict(res.model, data, _known(cfg, masks[0]))
                test = masks[2].nonzero().view(-1)
                loglik = log_b[test].gather(1, data.y[test].view(-1, 1)).view(-1)
                correct = (log_b[test].argmax(1) == data.y[test]).float()
                low = degree_split(deg_all[test].float())
                row = {"max_neighbours": fanout if fanout is not None else "all", "trial": t}
                for name, sel in (("all", torch.ones_like(low)), ("low30", low), ("high70", ~low)):
                    row[f"{name}_log_likelihood"] = float(loglik[sel].mean())
                    row[f"{name}_accuracy"] = float(correct[sel].mean())
                units.put(f"fanout{fanout}-trial{t}", row)
                rows.append(row)
                bar.done(f"test accuracy {100 * row['all_accuracy']:.1f}%")
    return rows


def save_subsampling_study(rows: List[Dict], out_dir: str | Path, title: str = "") -> None:
    """Write ``subsampling.csv`` and ``subsampling.png``/``.svg``: log-likelihood and accuracy
    against the maximum number of sampled neighbours, overall and per degree group."""
    plt = pyplot()

    out = Path(out_dir)
    write_csv(out / "subsampling.csv", rows)
    labels = list(dict.fromkeys(str(r["max_neighbours"]) for r in rows))
    pos = np.arange(len(labels))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (name, ttl) in zip(axes, (("all", "(a) all test nodes"), ("high70", "(b) 70% highest degree"),
                                      ("low30", "(c) 30% lowest degree"))):
        for key, color, twin in (("log_likelihood", "tab:blue", ax), ("accuracy", "tab:red", ax.twinx())):
            vals = [[r[f"{name}_{key}"] for r in rows if str(r["max_neighbours"]) == lab] for lab in labels]
            mean, std = np.array([np.mean(v) for v in vals]), np.array([np.std(v) for v in vals])
            twin.errorbar(pos, mean, yerr=std, color=color, marker="o", capsize=3)
            twin.set_ylabel(f"test {key.replace('_', '-')}", color=color)
        ax.set_xticks(pos, labels)
        ax.set_xlabel("maximum sampled neighbours in training")
        ax.set_title(ttl, fontsize=10)
    fig.suptitle(f"1-hop GBPN trained on the unweighted NLL {title}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, out / "subsampling")


__all__ = ["largest_degree", "variance_study", "save_variance_study", "subsampling_study", "save_subsampling_study", "degree_split"]
