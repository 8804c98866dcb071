r"""GMNN: Graph Markov Neural Networks (Qu, Bengio & Tang 2019).

The joint label distribution is a conditional random field trained with variational
EM on the pseudo-likelihood, with two GCNs:

* :math:`q_\theta(y_n \mid x_n)` -- a GCN on the features (the variational posterior);
* :math:`p_\phi(y_n \mid y_{\mathrm{NB}(n)})` -- the pseudo-likelihood factor, a network on
  the one-hot labels of the neighbours. By default (``p_exclude_self``) it is a GCN layer
  without self-loops followed by a linear layer,
  :math:`p_\phi(\cdot \mid y_{\mathrm{NB}(n)}) = \mathrm{softmax}(W_2\,\sigma(\sum_{j \in \mathrm{NB}(n)}
  \tfrac{1}{\sqrt{d_n d_j}} W_1 y_j + b_1) + b_2)`, so node :math:`n`'s own label never
  reaches its own prediction (a second message-passing layer would bring it back along
  :math:`n \to j \to n`). With ``p_exclude_self=False`` it is a two-layer GCN with
  self-loops, as in the reference code (which lets :math:`p` partly copy its input).

Training (paper section 4, Algorithm 1):

1. *Pre-train* :math:`q_\theta` on the gold labels :math:`y_L`.
2. *M-step*: draw :math:`\hat y_n \sim q_\theta(y_n)^{1/\tau}` (normalised) for
   unlabelled nodes and set :math:`\hat y_L = y_L`; maximise
   :math:`\sum_n \log p_\phi(\hat y_n \mid \hat y_{\mathrm{NB}(n)})` over all nodes.
3. *E-step*: maximise :math:`\sum_{n \in U} \mathbb{E}_{p_\phi(y_n \mid \hat y_{\mathrm{NB}(n)})}
   \log q_\theta(y_n) + \sum_{n \in L} \log q_\theta(y_n^{\text{gold}})`, i.e. a soft
   cross-entropy of :math:`q_\theta` against :math:`p_\phi`'s predictions, with the
   gold one-hot labels on the training nodes.
4. Repeat 2-3 for ``em_rounds`` rounds.

The paper classifies the unlabelled objects with :math:`q_\theta` (end of Algorithm 1,
and the reference code reports the accuracy of ``q``); so do we, keeping the
:math:`q_\theta` parameters with the best validation accuracy over pre-training and
all E-steps. The accuracy of :math:`p_\phi` (inputs: gold labels on train, samples
from :math:`q_\theta` elsewhere) is reported alongside.
"""
from __future__ import annotations

import copy
import time
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv
from tqdm.auto import tqdm

from gbpn.baselines.gnn import GCN
from gbpn.baselines.training import (
    Masks,
    better,
    feature_dropout,
    soft_cross_entropy,
    split_metrics,
)
from gbpn.errors import GBPNError
from gbpn.progress import step as progress_step

DRAWS = ("sample", "max", "expect")


class NeighbourLabelNet(nn.Module):
    r"""Logits of :math:`p_\phi(y_n \mid y_{\mathrm{NB}(n)})` from the neighbours' (one-hot) labels only:
    :math:`W_2\,\mathrm{drop}(\sigma(\mathrm{GCNConv}_{\text{no self-loops}}(\mathrm{drop}(Y))))`.

    Args:
        num_classes: number of classes :math:`c` (input and output size).
        hidden_channels: hidden width. (default: ``256``)
        dropout: dropout on the input labels and the hidden layer. (default: ``0.0``)
        cached: cache the GCN normalisation (one graph). (default: ``False``)
    """

    def __init__(self, num_classes: int, hidden_channels: int = 256, dropout: float = 0.0, cached: bool = False):
        super().__init__()
        self.dropout = dropout
        self.conv = GCNConv(num_classes, hidden_channels, add_self_loops=False, cached=cached)
        self.lin = nn.Linear(hidden_channels, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, y: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.conv(feature_dropout(y, self.dropout, self.training), edge_index))
        return self.lin(feature_dropout(h, self.dropout, self.training))


class GMNN(nn.Module):
    """The two networks of GMNN and the data exchange between them.

    Args:
        in_channels: node feature size.
        num_classes: number of classes :math:`c`.
        hidden_channels: hidden width of both GCNs. (default: ``256``)
        dropout: dropout of both GCNs. (default: ``0.0``)
        tau: annealing temperature of the samples drawn from :math:`q_\\theta`. (default: ``0.1``)
        draw: ``"sample"`` (:math:`\\hat y \\sim q^{1/\\tau}`), ``"max"`` (argmax) or
            ``"expect"`` (the probabilities themselves). (default: ``"sample"``)
        p_exclude_self: :math:`p_\\phi` sees the neighbours' labels only (one GCN layer
            without self-loops + a linear layer); else a two-layer GCN with self-loops. (default: ``True``)
        cached: cache the GCN normalisation (one graph). (default: ``False``)
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 256,
        dropout: float = 0.0,
        tau: float = 0.1,
        draw: str = "sample",
        p_exclude_self: bool = True,
        cached: bool = False,
    ):
        super().__init__()
        if draw not in DRAWS:
            raise GBPNError(f"GMNN draw must be one of {', '.join(DRAWS)}, got {draw!r}")
        if tau <= 0:
            raise GBPNError(f"GMNN tau must be positive, got {tau}")
        self.num_classes = num_classes
        self.tau = tau
        self.draw = draw
        self.q = GCN(in_channels, hidden_channels, num_classes, dropout, cached=cached)
        if p_exclude_self:
            self.p: nn.Module = NeighbourLabelNet(num_classes, hidden_channels, dropout, cached=cached)
        else:
            self.p = GCN(num_classes, hidden_channels, num_classes, dropout, cached=cached)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.q.reset_parameters()
        self.p.reset_parameters()

    def gold(self, y: Tensor, train_mask: Tensor) -> Tensor:
        """One-hot labels ``[N, c]`` on ``train_mask`` (zero rows elsewhere)."""
        out = torch.zeros(y.numel(), self.num_classes, device=y.device)
        out[train_mask] = F.one_hot(y[train_mask], self.num_classes).float()
        return out

    @torch.no_grad()
    def draw_labels(self, x: Tensor, edge_index: Tensor, y: Tensor, train_mask: Tensor, generator: torch.Generator) -> Tensor:
        """:math:`\\hat y` as ``[N, c]`` rows (one-hot unless ``draw == "expect"``), gold on ``train_mask``."""
        self.q.eval()
        probs = F.softmax(self.q(x, edge_index) / self.tau, dim=-1)
        if self.draw == "expect":
            out = probs.clone()
        else:
            if self.draw == "sample":
                idx = torch.multinomial(probs.cpu(), 1, generator=generator).view(-1).to(probs.device)
            else:
                idx = probs.argmax(-1)
            out = F.one_hot(idx, self.num_classes).float()
        out[train_mask] = F.one_hot(y[train_mask], self.num_classes).float()
        return out

    @torch.no_grad()
    def p_targets(self, y_hat: Tensor, edge_index: Tensor, y: Tensor, train_mask: Tensor) -> Tensor:
        """:math:`p_\\phi(y_n \\mid \\hat y_{\\mathrm{NB}(n)})` ``[N, c]``, gold one-hot on ``train_mask``."""
        self.p.eval()
        out = F.softmax(self.p(y_hat, edge_index), dim=-1)
        out[train_mask] = F.one_hot(y[train_mask], self.num_classes).float()
        return out

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Logits of :math:`q_\\theta`, the predictor."""
        return self.q(x, edge_index)


class _QFit:
    """:math:`q_\\theta`'s training steps, with its best-validation row and parameters so far, and the
    step count and progress bar that both networks' steps advance."""

    def __init__(self, model: GMNN, x: Tensor, edge_index: Tensor, y: Tensor, masks: Masks, metric: str,
                 opt: torch.optim.Optimizer, bar: tqdm):
        self.model, self.x, self.edge_index, self.y, self.masks, self.metric = model, x, edge_index, y, masks, metric
        self.opt, self.bar = opt, bar
        self.best: Optional[Dict[str, float]] = None
        self.best_q = copy.deepcopy(model.q.state_dict())
        self.step = 0

    def tick(self) -> None:
        self.step += 1
        self.bar.update()

    def train(self, target: Tensor, idx: Tensor, phase: str) -> None:
        """One step of q towards ``target`` on the nodes ``idx``, then its metrics on every split."""
        q = self.model.q
        q.train()
        loss = soft_cross_entropy(q(self.x, self.edge_index)[idx], target[idx])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        q.eval()
        with torch.no_grad():
            row = {"epoch": self.step, "phase": phase, **split_metrics(q(self.x, self.edge_index), self.y, self.masks,
                                                                       self.metric)}
        if better(row, self.best, self.metric):
            self.best, self.best_q = row, copy.deepcopy(q.state_dict())
        self.tick()
        progress_step(self.step, self.bar.total, "step")  # for a log's heartbeat line (gbpn.progress)
        self.bar.set_postfix(phase=phase, val=f"{100 * row['val_accuracy']:.1f}%",
                             best=f"{100 * self.best['val_accuracy']:.1f}%")


def _schedule(epochs: int, em_rounds: int, pretrain_fraction: float) -> Tuple[int, int]:
    """(pre-training steps, steps of each M- or E-step)."""
    if em_rounds < 0 or not 0 < pretrain_fraction <= 1:
        raise GBPNError("GMNN needs em_rounds >= 0 and pretrain_fraction in (0, 1]")
    pre_steps = max(1, int(round(pretrain_fraction * epochs))) if em_rounds else epochs
    return pre_steps, (epochs - pre_steps) // (2 * em_rounds) if em_rounds else 0


def _m_step(model: GMNN, opt: torch.optim.Optimizer, y_hat: Tensor, edge_index: Tensor, steps: int,
            fit: _QFit) -> None:
    """Fit p to the drawn labels ``y_hat`` (gold on the training nodes, samples from q elsewhere)."""
    for _ in range(steps):
        model.p.train()
        loss = soft_cross_entropy(model.p(y_hat, edge_index), y_hat)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        fit.tick()
    model.p.eval()


def fit_gmnn(
    model: GMNN,
    x: Tensor,
    edge_index: Tensor,
    y: Tensor,
    masks: Masks,
    epochs: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 2.5e-4,
    em_rounds: int = 2,
    pretrain_fraction: float = 0.4,
    generator: Optional[torch.Generator] = None,
    progress: bool = False,
    metric: str = "accuracy",
) -> Dict[str, float]:
    """Pre-training plus ``em_rounds`` rounds of (M-step on p, E-step on q), ``epochs`` steps in all.

    ``pretrain_fraction`` of the steps pre-train q; the rest is split evenly between the
    M- and E-steps of every round. Each network keeps its own AdamW optimiser. Before
    every M-step q is reset to its best-validation parameters so far.
    """
    pre_steps, phase_steps = _schedule(epochs, em_rounds, pretrain_fraction)
    generator = generator or torch.Generator()
    train_mask = masks[0]
    opt_q = torch.optim.AdamW(model.q.parameters(), lr=lr, weight_decay=weight_decay)
    opt_p = torch.optim.AdamW(model.p.parameters(), lr=lr, weight_decay=weight_decay)
    start = time.perf_counter()
    bar = tqdm(total=pre_steps + 2 * em_rounds * phase_steps, desc="gmnn", disable=None if progress else True, leave=False)
    fit = _QFit(model, x, edge_index, y, masks, metric, opt_q, bar)
    gold, train_idx = model.gold(y, train_mask), train_mask.nonzero().view(-1)
    for _ in range(pre_steps):
        fit.train(gold, train_idx, "pretrain")
    all_idx = torch.arange(y.numel(), device=y.device)
    p_metrics: Dict[str, float] = {}
    for r in range(em_rounds):
        model.q.load_state_dict(fit.best_q)  # M-step: p fits gold + samples from the best q so far
        y_hat = model.draw_labels(x, edge_index, y, train_mask, generator)
        _m_step(model, opt_p, y_hat, edge_index, phase_steps, fit)
        with torch.no_grad():
            p_metrics = split_metrics(model.p(y_hat, edge_index), y, masks)
        target = model.p_targets(y_hat, edge_index, y, train_mask)  # E-step: q fits p's predictions, all nodes
        for _ in range(phase_steps):
            fit.train(target, all_idx, f"e-step {r + 1}")
    bar.close()
    elapsed = time.perf_counter() - start
    model.q.load_state_dict(fit.best_q)
    best = fit.best
    metrics = {
        **{k: v for k, v in best.items() if k.startswith(("train_", "val_", "test_"))},
        "best_epoch": best["epoch"],
        "best_phase": best["phase"],
        "train_seconds": elapsed,
    }
    metrics.update({f"p_{k}": v for k, v in p_metrics.items()})
    return metrics
