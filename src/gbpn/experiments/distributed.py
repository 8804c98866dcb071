"""Data-parallel mini-batch training with ``torch.distributed`` (DistributedDataParallel).

Launch one process per worker with ``torchrun``; each rank samples its own computation
trees from its own shard of the training nodes, gradients are averaged across ranks every
step (gloo on CPU, NCCL on GPU), and every rank ends with the same parameters::

    torchrun --nproc_per_node 2 examples/train_ddp.py --dataset cora --batch-size 256

Only rank 0 evaluates and writes files.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data

from gbpn.config import TrainConfig, default_dropout
from gbpn.data.splits import random_split
from gbpn.errors import GBPNError
from gbpn.metrics import accuracy
from gbpn.nn.model import GBPN
from gbpn.training import model_args, predict, prepare_features, tree_epochs


def init_process_group() -> Tuple[int, int]:
    """Join the group ``torchrun`` set up (``gloo`` on CPU, ``nccl`` with CUDA); returns (rank, world size)."""
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def fit_distributed(
    data: Data, config: TrainConfig, seed: int = 0, masks: Optional[Tuple[Tensor, Tensor, Tensor]] = None
) -> Tuple[GBPN, Dict[str, float], List[float]]:
    """Train with DDP on mini-batches of sampled trees; returns the model, rank 0's final
    metrics (empty on other ranks) and the per-epoch mean training loss of this rank."""
    if config.batch_size is None:
        raise GBPNError("distributed training is mini-batch training: set batch_size")
    rank, world = init_process_group()
    if masks is None:
        masks = random_split(data.y, config.train_frac, config.val_frac, seed)  # the same on every rank
    train_mask = masks[0]
    torch.manual_seed(seed)  # same initial parameters everywhere (DDP also broadcasts rank 0's)
    dropout = config.dropout if config.dropout is not None else default_dropout(data.num_features, int(masks[0].sum()))
    model = GBPN(**model_args(data.num_features, int(data.num_classes), config, dropout))
    ddp = DistributedDataParallel(model)
    coupling = list(model.bp.coupling.parameters())
    other = [p for n, p in model.named_parameters() if not n.startswith("bp.coupling.")]
    opt = torch.optim.AdamW([{"params": other}, {"params": coupling, "lr": config.coupling_lr or config.lr}],
                            lr=config.lr, weight_decay=config.weight_decay)
    # each rank gets an equal-sized shard of the training nodes, so all take the same number of steps
    train_idx = train_mask.nonzero().view(-1)
    shard_perm = torch.randperm(train_idx.numel(), generator=torch.Generator().manual_seed(seed))
    per_rank = train_idx.numel() // world
    shard = train_idx[shard_perm[rank * per_rank : (rank + 1) * per_rank]]
    torch.manual_seed(seed * 1009 + rank + 1)  # independent dropout per rank
    gen = torch.Generator().manual_seed(seed * 1009 + rank + 1)  # independent tree sampling per rank
    x = prepare_features(data.x)
    epoch_fn = tree_epochs(ddp, opt, data, x, shard, config.variant == "gbpn", config, 0, gen)
    losses = []
    for epoch in range(config.epochs):
        model.train()
        losses.append(epoch_fn(epoch))
    metrics: Dict[str, float] = {}
    if rank == 0:
        log_b = predict(model, data, train_mask if config.variant == "gbpn" else None, x=x,
                        edge_chunk=config.edge_chunk)
        metrics = {f"{name}_accuracy": accuracy(log_b, data.y, m) for name, m in zip(("train", "val", "test"), masks)}
    return model, metrics, losses
