"""Training GBPN / GBPN-I (paper 2.2-2.4, 3.3, appendix A.2): :func:`fit` one model, :func:`predict` with it.

The configuration lives in :mod:`gbpn.train.config`, the objective in :mod:`gbpn.train.objective`, the
scores in :mod:`gbpn.train.metrics`, the epoch loop with model selection in :mod:`gbpn.train.loop`,
sampled-tree epochs in :mod:`gbpn.train.minibatch` and ``--potential auto`` in :mod:`gbpn.train.auto`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.data.features import prepare_features
from gbpn.data.graph import as_training_graph, clean_graph
from gbpn.data.splits import check_masks, random_split
from gbpn.distributed import rank_and_world
from gbpn.errors import GBPNError
from gbpn.models.encoders.registry import graph_options
from gbpn.models.gbpn import GBPN
from gbpn.train.auto import candidate_name, fit_auto
from gbpn.train.config import TrainConfig, default_dropout, resolve_device
from gbpn.train.loop import Selection, StepScores, optimizer_step
from gbpn.train.session import Session, TrialResult
from gbpn.train.metrics import check_metric, default_metric, f1_with_val_threshold
from gbpn.train.minibatch import check_data_parallel, data_parallel_epochs, tree_epochs
from gbpn.train.objective import balanced_class_weight, degree_temperature, empirical_coupling, marginal_nll
from gbpn.train.units import Units

logger = logging.getLogger("gbpn")


def feature_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype a model's encoder reads: its parameters' (float64 for a ``.double()`` model; float32
    for ``precision="bf16"``, whose master weights are float32)."""
    param = next(model.parameters(), None)
    return param.dtype if param is not None and param.is_floating_point() else torch.float32


def model_args(in_channels: int, num_classes: int, config: TrainConfig, dropout: float,
               num_nodes: Optional[int] = None, seed: int = 0) -> Dict:
    """Constructor arguments of :class:`GBPN` for ``config`` (stored in checkpoints).
    ``num_nodes``: the graph's, needed by the ``linkx`` potential (a weight per node); ``seed``: the
    trial's, which samples the triangles under ``max_triangles_per_node``."""
    implicit = config.backward == "implicit"
    options = {**config.potential_options(), **graph_options(config.potential, num_nodes)}
    # a pairwise model's arguments stay those of earlier versions (their checkpoints, bit for bit)
    motifs = {} if config.motifs == "none" else {
        "motifs": config.motifs, "max_triangles_per_node": config.max_triangles_per_node, "triangle_seed": seed}
    return {
        **motifs,
        "in_channels": in_channels,
        "num_classes": num_classes,
        "hidden_channels": config.hidden,
        "num_hidden": config.num_hidden,
        "dropout": dropout,
        "num_steps": config.num_steps,
        **({"max_steps": config.max_steps} if implicit else {}),  # implicit mode's bound on the steps of a pass
        "damping": config.damping,
        "tol": config.tol if implicit else None,
        "backward": config.backward,
        "learn_coupling": config.learn_coupling,
        "precision": config.precision,
        "potential": config.potential,
        "potential_options": options,
    }


@torch.no_grad()
def predict(
    model: GBPN,
    data: Data,
    known_mask: Optional[Tensor] = None,
    num_steps: Optional[int] = None,
    x: Optional[Tensor] = None,
    node_chunk: Optional[int] = None,
    edge_chunk: Optional[int] = None,
    message_dtype: Optional[torch.dtype] = None,
    triangles: Optional[Tensor] = None,
) -> Tensor:
    """Log-beliefs ``[N, c]`` in evaluation mode; nodes in ``known_mask`` are clamped to ``data.y``.
    Runs on the model's device (inputs are moved there) and returns the beliefs there.

    ``node_chunk`` computes the self-potentials that many nodes at a time (a graph encoder's,
    ``gcn``, ``sage``, ``gat``, ``dagnn`` or ``linkx``, on the whole graph at once) and ``edge_chunk``
    the BP messages that many edges at a time, so a large graph's inference needs the
    ``[E, c]`` messages but never the MLP's ``[N, hidden]`` activations or ``[E, c]`` temporaries
    for the whole graph at once.

    ``message_dtype`` (e.g. ``torch.bfloat16``) switches to
    :meth:`~gbpn.bp.layer.BeliefPropagation.infer_pairs`: one in-place message buffer per
    undirected edge in that precision, for graphs whose float32 messages do not fit in
    memory. It reads ``data.pairs`` ``[2, P]`` (each undirected edge once) when present,
    so a huge graph never needs its symmetric ``edge_index``; chunks are ``edge_chunk``
    pairs (default 2^20).

    A triangle model (``motifs="triangle"``) runs on the whole graph (no ``edge_chunk``, no
    ``message_dtype``), on ``triangles`` (default: :meth:`~gbpn.models.gbpn.GBPN.triangles_of` the graph).
    """
    model.eval()
    device = next(model.parameters()).device
    if known_mask is not None and getattr(data, "y", None) is None:
        raise GBPNError("known_mask clamps nodes to their labels in data.y, and data has no y")
    if ("rev_index" not in data and isinstance(data.edge_index, Tensor) and data.edge_index.layout == torch.strided
            and message_dtype is None):
        # a plain Data as fit reads it: cleaned the same way
        data = clean_graph(data)
    data = data.to(device)  # no copy when it is there already
    x = (model.precompute(prepare_features(data.x, dtype=feature_dtype(model)).to(device), data.edge_index)
         if x is None else x.to(device))
    known_mask = None if known_mask is None else known_mask.to(device)
    log_self = model.self_potential(x, data.edge_index, node_chunk=node_chunk)
    return model.infer(log_self, data, known_mask, num_steps=num_steps, edge_chunk=edge_chunk,
                       message_dtype=message_dtype, triangles=triangles)


def fit(
    data: Data,
    config: TrainConfig,
    seed: int = 0,
    masks: Optional[Tuple[Tensor, Tensor, Tensor]] = None,
    progress: bool = False,
    desc: str = "train",
    on_epoch: Optional[Callable[[int, GBPN, object], None]] = None,
    units: Optional[str | Path] = None,
) -> TrialResult:
    """Train one model with full-batch AdamW; keep the parameters of the best validation epoch.

    With ``config.potential == "auto"`` one model per :func:`auto_candidates` entry is trained
    with the same seed and split, and the one :func:`select_by_validation` picks is returned; its
    metrics name the choice (``potential``, ``potential_separate``) and list every candidate's
    validation score (``auto_candidates``). With ``config.budget`` a search by successive halving
    chooses an encoder and its hyper-parameters instead (:func:`~gbpn.train.auto.fit_budgeted`; its
    metrics list every configuration tried, ``auto_search``).

    GBPN (transductive): every step clamps a fresh random half of the training
    nodes and takes the loss on the other half; evaluation clamps all of them.
    GBPN-I (inductive): features only, loss on all training nodes.

    Args:
        data: a graph from :func:`gbpn.data.load_dataset`, or any PyG ``Data`` with ``x`` and ``y``
            (checked and cleaned first: :func:`gbpn.data.graph.as_training_graph`).
        config: hyper-parameters.
        seed: seeds the split (unless ``masks`` is given), the initialisation,
            dropout and the half-sampling.
        masks: ``(train, val, test)`` boolean masks; default a random split.
        on_epoch: called as ``on_epoch(epoch, model, sampler)`` after each epoch's training
            (``sampler`` is the :class:`~gbpn.sampling.importance.Exp3Sampler` or ``None``).
        units: with ``--potential auto``, a folder that keeps each finished candidate (or search rung) of
            this trial, so that a call after an interruption trains only what is missing.

    Trains on ``config.device``; the returned model, masks and history are on the CPU.
    Mini-batch training samples trees on the CPU and moves each batch to the device.
    """
    config.validate()
    if rank_and_world()[1] > 1:
        check_data_parallel(config)
    data = as_training_graph(data)
    masks = random_split(data.y, config.train_frac, config.val_frac, seed) if masks is None else check_masks(masks,
                                                                                                             data.y)
    check_metric(config.metric, int(data.num_classes))
    unseen = int(data.num_classes) - int(data.y[masks[0]].unique().numel())
    if unseen > 0:
        logger.warning(f"{desc}: {unseen} of {int(data.num_classes)} classes have no training node, so the model "
                       "learns them from no example (label more nodes of those classes, or merge them)")
    if config.metric == "auto":
        config = replace(config, metric=default_metric(data.y, int(data.num_classes), masks[0] | masks[1]))
    if config.potential != "auto":
        return _fit_one(data, config, seed, masks, progress, desc, on_epoch)
    units = Units(units, config.to_dict(), seed, masks)
    return fit_auto(data, config, seed, masks, progress, desc, on_epoch, units, _fit_one, start_one)


def _fit_one(data: Data, config: TrainConfig, seed: int, masks: Tuple[Tensor, Tensor, Tensor], progress: bool,
             desc: str, on_epoch: Optional[Callable[[int, GBPN, object], None]]) -> TrialResult:
    return start_one(data, config, seed, masks, desc, on_epoch).finish(progress)


def start_one(data: Data, config: TrainConfig, seed: int, masks: Tuple[Tensor, Tensor, Tensor], desc: str,
              on_epoch: Optional[Callable[[int, GBPN, object], None]] = None) -> Session:
    """One GBPN training of ``config`` (a single encoder), built and ready, not yet trained: ``.finish()``
    trains it and returns its :class:`TrialResult`; a budgeted search advances it a few epochs at a time."""
    device = resolve_device(config.device)
    if device.type != "cpu" and config.sampler == "exp3":
        raise GBPNError("the Exp3 sampler learns on the CPU; train it with --device cpu")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    dropout = config.dropout if config.dropout is not None else default_dropout(data.num_features, int(masks[0].sum()))
    model, opt = _model_and_optimizer(data, config, dropout, seed, masks[0])
    model.to(device)
    g = _on_device(model, data, masks, config, device, desc)
    warmup_epochs = int(round(config.warmup * config.epochs))
    # GBPN's evaluation clamps the training labels: its training score comes from the steps' unclamped half
    step_scores = StepScores() if config.variant == "gbpn" else None
    train_loss, evaluate = _objective(model, g, config, gen, warmup_epochs, step_scores)
    train_epoch, sampler = _epochs(model, opt, g, config, gen, seed, warmup_epochs, train_loss, step_scores)
    if on_epoch is not None:
        inner = train_epoch

        def train_epoch(epoch: int) -> float:
            loss = inner(epoch)
            on_epoch(epoch, model, sampler)
            return loss

    selection = Selection(model, train_epoch, evaluate, g.data.y, g.masks, config.epochs, desc, config.patience,
                          config.metric, step_scores)
    return Session(selection, model, opt, lambda s: _finish(s, model, g, config, dropout), [gen],
                   cuda=device.type == "cuda")


def _model_and_optimizer(data: Data, config: TrainConfig, dropout: float, seed: int, train_mask: Tensor):
    """The GBPN of ``config`` (initialised from the global generator, seeded by the caller) and its AdamW, the
    factors (H, and T of a triangle model) at ``--coupling-lr``."""
    num_classes = int(data.num_classes)
    model = GBPN(**model_args(data.num_features, num_classes, config, dropout, data.num_nodes, seed))
    if config.coupling_init == "empirical":
        with torch.no_grad():
            model.bp.coupling.weight.copy_(empirical_coupling(data.edge_index, data.y, train_mask, num_classes).log())
    coupling_params = list(model.bp.coupling.parameters()) + list(getattr(model.bp, "triangle", torch.nn.Module())
                                                                  .parameters())
    factor_ids = {id(p) for p in coupling_params}
    other = [p for p in model.parameters() if id(p) not in factor_ids]
    opt = torch.optim.AdamW(
        [{"params": other}, {"params": coupling_params, "lr": config.coupling_lr or config.lr}],
        lr=config.lr,
        weight_decay=config.weight_decay,
    )
    return model, opt


@dataclass
class _Graph:
    """A training's graph on its device and what every epoch reads of it, computed once: the encoder's input ``x``
    (precomputed), the triangles of a triangle model, the training nodes, the loss's degree weights and class
    weights; ``cpu_data`` and ``cpu_masks`` as given."""

    data: Data
    masks: Tuple[Tensor, Tensor, Tensor]
    cpu_data: Data
    cpu_masks: Tuple[Tensor, Tensor, Tensor]
    device: torch.device
    x: object
    triangles: Optional[Tensor]
    train_idx: Tensor
    alpha: Optional[Tensor]
    class_weight: Optional[Tensor]
    precompute_seconds: float
    triangle_seconds: float


def _on_device(model: GBPN, data: Data, masks, config: TrainConfig, device: torch.device, desc: str) -> _Graph:
    """The graph moved to ``device`` with its once-per-training inputs (timed: precomputation, triangles)."""
    cpu_data, cpu_masks = data, masks
    data = data.to(device)
    masks = tuple(m.to(device) for m in masks)
    ei = data.edge_index
    start = time.perf_counter()
    x = model.precompute(prepare_features(data.x, dtype=feature_dtype(model)), ei)  # once, not per step
    precompute_seconds = time.perf_counter() - start
    start = time.perf_counter()
    tri = model.triangles_of(ei, data.num_nodes)  # once per graph: the same triangles every step
    triangle_seconds = time.perf_counter() - start
    if tri is not None:
        logger.info(f"{desc}: {tri.size(1):,} triangles" + (f" (at most {config.max_triangles_per_node} per node)"
                                                            if config.max_triangles_per_node else "")
                    + f", enumerated in {triangle_seconds:.2f} s")
    alpha = degree_temperature(ei, data.num_nodes) if config.degree_weight else None
    train_idx = masks[0].nonzero().view(-1)
    cw = balanced_class_weight(data.y[train_idx], int(data.num_classes)) if config.class_weight else None
    return _Graph(data, masks, cpu_data, cpu_masks, device, x, tri, train_idx, alpha, cw, precompute_seconds,
                  triangle_seconds)


def _objective(model: GBPN, g: _Graph, config: TrainConfig, gen: torch.Generator, warmup_epochs: int,
               step_scores: Optional[StepScores] = None):
    """``train_loss(epoch)`` of a full-batch step and ``evaluate(epoch)``'s log-beliefs (no BP during warm-up).

    GBPN (transductive) clamps a fresh random half of the training nodes (drawn from ``gen``) and takes the loss on
    the other half (its rows go to ``step_scores``), and evaluation clamps all of them; GBPN-I reads features only,
    the loss on every training node."""
    transductive = config.variant == "gbpn"
    data, train_mask, train_idx, tri = g.data, g.masks[0], g.train_idx, g.triangles
    y, ei, rev, ew = data.y, data.edge_index, data.rev_index, getattr(data, "edge_weight", None)

    def train_loss(epoch: int) -> Tensor:
        steps = 0 if epoch < warmup_epochs else None
        if transductive:
            perm = train_idx[torch.randperm(train_idx.numel(), generator=gen).to(g.device)]
            known = torch.zeros_like(train_mask)
            known[perm[: perm.numel() // 2]] = True
            loss_idx = perm[perm.numel() // 2 :]
            out = model(g.x, ei, ew, rev_index=rev, known_labels=y, known_mask=known, num_steps=steps, triangles=tri)
        else:
            loss_idx = train_idx
            out = model(g.x, ei, ew, rev_index=rev, num_steps=steps, triangles=tri)
        if step_scores is not None:
            step_scores.record(out[loss_idx], loss_idx)
        return marginal_nll(out[loss_idx], y[loss_idx], None if g.alpha is None else g.alpha[loss_idx],
                            g.class_weight)

    def evaluate(epoch: int) -> Tensor:
        return predict(model, data, train_mask if transductive else None,
                       num_steps=0 if epoch < warmup_epochs else None, x=g.x, edge_chunk=config.edge_chunk,
                       triangles=tri)

    return train_loss, evaluate


def _epochs(model: GBPN, opt, g: _Graph, config: TrainConfig, gen: torch.Generator, seed: int, warmup_epochs: int,
            train_loss: Callable[[int], Tensor], step_scores: Optional[StepScores] = None):
    """``(train_epoch, sampler)``: a full-batch step of ``train_loss``, or an epoch over sampled trees (one process,
    or data-parallel under ``torchrun``); ``sampler`` is the Exp3 sampler or None."""
    if config.batch_size is None:
        return (lambda epoch: optimizer_step(opt, train_loss(epoch))), None
    sampler = None
    if config.sampler == "exp3":
        from gbpn.graph.csr import CSRGraph
        from gbpn.sampling.importance import Exp3Sampler

        sampler = Exp3Sampler(CSRGraph.from_edge_index(g.data.edge_index, g.data.num_nodes), config.fanout,
                              config.exp3_gamma)
    transductive = config.variant == "gbpn"
    if rank_and_world()[1] == 1:
        return tree_epochs(model, opt, g.cpu_data, g.x, g.train_idx.cpu(), transductive, config, warmup_epochs, gen,
                           g.class_weight, sampler, step_scores=step_scores), sampler
    return data_parallel_epochs(model, opt, g.cpu_data, g.x, g.train_idx.cpu(), transductive, config, warmup_epochs,
                                seed, g.class_weight, g.device, step_scores), sampler


def _finish(selection: Selection, model: GBPN, g: _Graph, config: TrainConfig, dropout: float) -> TrialResult:
    """The finished training's result: the best epoch's metrics with what the run used and measured."""
    metrics, best_out, history = selection.result()
    model.cpu()
    if rank_and_world()[1] > 1:  # data-parallel ranks must end identical: record the evidence
        from gbpn.distributed import all_gather_object

        metrics.update(world_size=rank_and_world()[1],
                       rank_parameter_digests=all_gather_object(parameter_digest(model)))
    metrics.update(first_loss=history[0]["loss"], last_loss=history[-1]["loss"])
    metrics.update(dropout=dropout, coupling=model.bp.coupling.normalized().tolist(), device=str(g.device),
                   potential=candidate_name(config), potential_separate=config.separate,
                   precompute_seconds=g.precompute_seconds)
    tri = g.triangles
    if tri is not None:
        metrics.update(triangles=tri.size(1), triangle_seconds=g.triangle_seconds, triangle_form=model.bp.triangle.form)
    if config.backward == "implicit":  # convergence of the training passes (fallbacks: see gbpn.bp.implicit)
        metrics.update({f"implicit_{k}": v for k, v in model.bp.implicit_stats.summary().items()})
    positive = getattr(g.data, "positive_class", None)
    if positive is not None and int(g.data.num_classes) == 2:
        metrics.update(f1_with_val_threshold(best_out.cpu(), g.cpu_data.y, g.cpu_masks[1], g.cpu_masks[2], positive))
    return TrialResult(model=model, metrics=metrics, masks=g.cpu_masks, history=history, config=config)


def parameter_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer, bit for bit."""
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
