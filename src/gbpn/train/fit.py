"""Training GBPN / GBPN-I (paper 2.2-2.4, 3.3, appendix A.2): :func:`fit` one model, :func:`predict` with it.

The configuration lives in :mod:`gbpn.train.config`, the objective in :mod:`gbpn.train.objective`, the
scores in :mod:`gbpn.train.metrics`, the epoch loop with model selection in :mod:`gbpn.train.loop`,
sampled-tree epochs in :mod:`gbpn.train.minibatch` and ``--potential auto`` in :mod:`gbpn.train.auto`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.data.features import prepare_features
from gbpn.data.graph import as_training_graph, clean_graph
from gbpn.data.splits import check_masks, random_split
from gbpn.distributed import rank_and_world
from gbpn.errors import GBPNError
from gbpn.models.gbpn import GBPN
from gbpn.train.auto import candidate_name, fit_auto
from gbpn.train.config import TrainConfig, default_dropout, resolve_device
from gbpn.train.loop import Selection, optimizer_step
from gbpn.train.session import Session
from gbpn.train.metrics import check_metric, default_metric, f1_with_val_threshold
from gbpn.train.minibatch import check_data_parallel, data_parallel_epochs, tree_epochs
from gbpn.train.objective import balanced_class_weight, degree_temperature, empirical_coupling, marginal_nll
from gbpn.train.units import Units

logger = logging.getLogger("gbpn")


@dataclass
class TrialResult:
    model: GBPN
    metrics: Dict[str, float]
    masks: Tuple[Tensor, Tensor, Tensor]
    history: List[Dict[str, float]] = field(default_factory=list)
    config: Optional[TrainConfig] = None  # as trained: with --potential auto, the chosen encoder


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
    options = config.potential_options()
    if config.potential == "linkx":
        if num_nodes is None:
            raise GBPNError("the linkx potential needs the graph's number of nodes")
        options["num_nodes"] = num_nodes
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
    num_classes = int(data.num_classes)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    dropout = config.dropout if config.dropout is not None else default_dropout(data.num_features, int(masks[0].sum()))
    model = GBPN(**model_args(data.num_features, num_classes, config, dropout, data.num_nodes, seed))
    if config.coupling_init == "empirical":
        with torch.no_grad():
            model.bp.coupling.weight.copy_(empirical_coupling(data.edge_index, data.y, masks[0], num_classes).log())
    # the factors (H, and T of a triangle model) learn at --coupling-lr
    coupling_params = list(model.bp.coupling.parameters()) + list(getattr(model.bp, "triangle", torch.nn.Module())
                                                                  .parameters())
    factor_ids = {id(p) for p in coupling_params}
    other = [p for p in model.parameters() if id(p) not in factor_ids]
    opt = torch.optim.AdamW(
        [{"params": other}, {"params": coupling_params, "lr": config.coupling_lr or config.lr}],
        lr=config.lr,
        weight_decay=config.weight_decay,
    )

    cpu_masks = masks
    model.to(device)
    cpu_data, data = data, data.to(device)
    masks = tuple(m.to(device) for m in masks)
    train_mask = masks[0]
    y = data.y
    ei, rev, ew = data.edge_index, data.rev_index, getattr(data, "edge_weight", None)
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
    train_idx = train_mask.nonzero().view(-1)
    transductive = config.variant == "gbpn"
    eval_known = train_mask if transductive else None
    warmup_epochs = int(round(config.warmup * config.epochs))
    cw = balanced_class_weight(y[train_idx], num_classes) if config.class_weight else None

    def train_loss(epoch: int) -> Tensor:
        steps = 0 if epoch < warmup_epochs else None
        if transductive:
            perm = train_idx[torch.randperm(train_idx.numel(), generator=gen).to(device)]
            known = torch.zeros_like(train_mask)
            known[perm[: perm.numel() // 2]] = True
            loss_idx = perm[perm.numel() // 2 :]
            out = model(x, ei, ew, rev_index=rev, known_labels=y, known_mask=known, num_steps=steps, triangles=tri)
        else:
            loss_idx = train_idx
            out = model(x, ei, ew, rev_index=rev, num_steps=steps, triangles=tri)
        return marginal_nll(out[loss_idx], y[loss_idx], None if alpha is None else alpha[loss_idx], cw)

    def evaluate(epoch: int) -> Tensor:
        return predict(model, data, eval_known, num_steps=0 if epoch < warmup_epochs else None, x=x,
                       edge_chunk=config.edge_chunk, triangles=tri)

    sampler = None
    if config.batch_size is None:
        train_epoch = lambda epoch: optimizer_step(opt, train_loss(epoch))  # noqa: E731
    else:
        if config.sampler == "exp3":
            from gbpn.graph.csr import CSRGraph
            from gbpn.sampling.importance import Exp3Sampler

            sampler = Exp3Sampler(CSRGraph.from_edge_index(ei, data.num_nodes), config.fanout, config.exp3_gamma)
        rank, world = rank_and_world()
        if world == 1:
            train_epoch = tree_epochs(model, opt, cpu_data, x, train_idx.cpu(), transductive, config,
                                      warmup_epochs, gen, cw, sampler)
        else:
            train_epoch = data_parallel_epochs(model, opt, cpu_data, x, train_idx.cpu(), transductive, config,
                                                warmup_epochs, seed, cw, device)
    if on_epoch is not None:
        inner = train_epoch

        def train_epoch(epoch: int) -> float:
            loss = inner(epoch)
            on_epoch(epoch, model, sampler)
            return loss

    selection = Selection(model, train_epoch, evaluate, y, masks, config.epochs, desc, config.patience, config.metric)

    def finish(selection: Selection) -> TrialResult:
        metrics, best_out, history = selection.result()
        model.cpu()
        if rank_and_world()[1] > 1:  # data-parallel ranks must end identical: record the evidence
            from gbpn.distributed import all_gather_object

            metrics.update(world_size=rank_and_world()[1],
                           rank_parameter_digests=all_gather_object(parameter_digest(model)))
        metrics.update(first_loss=history[0]["loss"], last_loss=history[-1]["loss"])
        metrics.update(dropout=dropout, coupling=model.bp.coupling.normalized().tolist(), device=str(device),
                       potential=candidate_name(config), potential_separate=config.separate,
                       precompute_seconds=precompute_seconds)
        if tri is not None:
            metrics.update(triangles=tri.size(1), triangle_seconds=triangle_seconds,
                           triangle_form=model.bp.triangle.form)
        if config.backward == "implicit":  # convergence of the training passes (fallbacks: see gbpn.bp.implicit)
            metrics.update({f"implicit_{k}": v for k, v in model.bp.implicit_stats.summary().items()})
        positive = getattr(data, "positive_class", None)
        if positive is not None and num_classes == 2:
            metrics.update(f1_with_val_threshold(best_out.cpu(), cpu_data.y, cpu_masks[1], cpu_masks[2], positive))
        return TrialResult(model=model, metrics=metrics, masks=cpu_masks, history=history, config=config)

    return Session(selection, model, opt, finish, [gen], cuda=device.type == "cuda")


def parameter_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer, bit for bit."""
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
