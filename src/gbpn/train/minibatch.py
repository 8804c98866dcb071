"""Mini-batch training on sampled computation trees (paper section 3.3), in one process or
data-parallel over the ranks of ``torchrun``."""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.distributed import rank_and_world
from gbpn.errors import GBPNError
from gbpn.models.gbpn import GBPN
from gbpn.train.config import TrainConfig
from gbpn.train.loop import StepScores, optimizer_step
from gbpn.train.objective import marginal_nll


def tree_epochs(model: GBPN, opt, data: Data, x: Tensor, train_idx: Tensor, transductive: bool,
                 config: TrainConfig, warmup_epochs: int, gen: torch.Generator,
                 class_weight: Optional[Tensor] = None, sampler=None, graph=None,
                 max_batches: Optional[int] = None, shard: Optional[Tuple[int, int, torch.Generator]] = None,
                 step_scores: Optional[StepScores] = None) -> Callable[[int], float]:
    """One epoch of mini-batch steps on sampled computation trees (paper section 3.3).

    Each epoch shuffles the training nodes; for GBPN a random half is evidence (clamped
    wherever it appears in a tree) and the other half are the targets. Every batch of
    targets becomes a forest of trees of depth ``num_hops`` with at most ``fanout``
    children per node, and BP runs ``num_hops`` steps on it (exact on a tree). Roots are
    never clamped. The degree temperature uses each root's number of sampled neighbours,
    the count its belief actually aggregates.

    With an :class:`~gbpn.sampling.importance.Exp3Sampler` (built on ``sampler.graph``, the
    CSR form of ``data.edge_index``) neighbours are drawn from its distributions, messages
    carry importance weights, and the sampler learns from the messages every batch and
    updates at the end of each epoch.

    ``graph`` (a :class:`~gbpn.sampling.CSRGraph`) saves building one from
    ``data.edge_index``; ``max_batches`` caps the batches per epoch (for benchmarks); ``step_scores``
    gets every batch's root beliefs (the training score of a model whose evaluation clamps them).

    ``shard = (rank, world, shared)`` is data-parallel training: the epoch's order and evidence
    half come from ``shared`` (seeded alike on every rank), each rank takes every ``world``-th
    target (the same count on all, so all take the same number of steps) and samples its trees
    with its own ``gen``; a batch is then ``batch_size`` targets per rank.
    """
    from gbpn.sampling import sample_tree
    from gbpn.graph.csr import CSRGraph

    if graph is None:
        graph = sampler.graph if sampler is not None else CSRGraph.from_edge_index(data.edge_index, data.num_nodes)
    hops = config.num_hops or config.num_steps
    steps = None if config.backward == "implicit" else hops  # implicit: to convergence (exact on a tree)
    y = data.y
    device = x.device  # trees are sampled on the CPU; each batch moves to the model's device

    def epoch_fn(epoch: int) -> float:
        perm = train_idx[torch.randperm(train_idx.numel(), generator=gen if shard is None else shard[2])]
        known = torch.zeros(data.num_nodes, dtype=torch.bool)
        if transductive:
            known[perm[: perm.numel() // 2]] = True
            perm = perm[perm.numel() // 2 :]
        if shard is not None:
            rank, world, _ = shard
            perm = perm[rank::world][: perm.numel() // world]
        losses = []
        for b, start in enumerate(range(0, perm.numel(), config.batch_size)):
            if max_batches is not None and b >= max_batches:
                break
            targets = perm[start : start + config.batch_size]
            tree = sample_tree(graph, targets, hops, config.fanout, gen,
                               probs=None if sampler is None else sampler.probs)
            known_t = known[tree.node_map]
            known_t[: tree.batch_size] = False
            weight = tree.message_weight()
            out = model(x.index_select(0, tree.node_map.to(device)), tree.edge_index.to(device),
                        rev_index=tree.rev_index.to(device), known_labels=y[tree.node_map].to(device),
                        known_mask=known_t.to(device), num_steps=0 if epoch < warmup_epochs else steps,
                        message_weight=None if weight is None else weight.to(device),
                        return_messages=sampler is not None)
            if sampler is not None:
                out, log_msg = out
                sampler.observe(tree, log_msg)
            out = out[: tree.batch_size]
            if step_scores is not None:
                step_scores.record(out, targets)
            alpha = None
            if config.degree_weight:
                children = torch.bincount(tree.parent[tree.parent >= 0], minlength=tree.num_nodes)[: tree.batch_size]
                alpha = children.clamp_min(1).float().pow(-0.5)
            alpha = None if alpha is None else alpha.to(device)
            losses.append(optimizer_step(opt, marginal_nll(out, y[targets].to(device), alpha, class_weight)))
        if sampler is not None:
            sampler.end_epoch()
        return sum(losses) / max(len(losses), 1)

    return epoch_fn


def check_data_parallel(config: TrainConfig) -> None:
    """What data-parallel training (under ``torchrun``) supports, checked before anything runs."""
    if config.batch_size is None:
        raise GBPNError("training under torchrun is data-parallel on sampled trees: give --batch-size "
                        "(full-batch training has one batch, nothing to split across processes)")
    if config.sampler == "exp3":
        raise GBPNError("the Exp3 sampler learns per process; train it in one process (without torchrun)")


def data_parallel_epochs(model: GBPN, opt, data: Data, x: Tensor, train_idx: Tensor, transductive: bool,
                          config: TrainConfig, warmup_epochs: int, seed: int, class_weight: Optional[Tensor],
                          device: torch.device, step_scores: Optional[StepScores] = None) -> Callable[[int], float]:
    """:func:`tree_epochs` for one rank of ``torchrun``: gradients averaged over ranks by
    ``DistributedDataParallel`` (gloo on CPU, NCCL on GPU), so every rank keeps the same parameters;
    the epoch loss is the mean over ranks."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, world = rank_and_world()
    # unused parameters: the coupling during warm-up epochs without BP
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  find_unused_parameters=warmup_epochs > 0)
    shared = torch.Generator().manual_seed(seed + 1)  # the epoch's order and evidence, alike on every rank
    own = torch.Generator().manual_seed(seed + 1 + 7919 * (rank + 1))  # this rank's trees
    torch.manual_seed(seed + 7919 * (rank + 1))  # this rank's dropout; the initial parameters came before
    epoch_fn = tree_epochs(ddp, opt, data, x, train_idx, transductive, config, warmup_epochs, own, class_weight,
                           shard=(rank, world, shared), step_scores=step_scores)

    def mean_over_ranks(epoch: int) -> float:
        loss = torch.tensor([epoch_fn(epoch)], dtype=torch.float64, device=device)  # NCCL reduces on the GPU
        dist.all_reduce(loss)
        return float(loss) / world

    return mean_over_ranks
