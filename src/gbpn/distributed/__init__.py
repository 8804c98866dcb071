"""Running gbpn on several processes with ``torch.distributed``, launched by ``torchrun``.

``torchrun --nproc_per_node 2 -m gbpn train ...`` trains data-parallel on sampled trees
(:func:`gbpn.train.fit.fit` wraps the model in ``DistributedDataParallel`` when a process group
is up) and ``torchrun ... -m gbpn predict ...`` runs partitioned full-graph BP
(:mod:`gbpn.distributed.inference`). Gloo on CPU, NCCL with CUDA; rank 0 writes the outputs.
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Tuple

import torch
import torch.distributed as dist
from torch import Tensor


def launched() -> bool:
    """Whether this process was started by ``torchrun`` with more than one process in total."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: str = "cpu") -> Tuple[int, int]:
    """Join the process group ``torchrun`` describes in the environment (``gloo`` on CPU, ``nccl``
    for CUDA devices); returns (rank, world size). A no-op outside ``torchrun``."""
    if launched() and not dist.is_initialized():
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        dist.init_process_group("nccl" if cuda else "gloo")
    return rank_and_world()


def rank_and_world() -> Tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_device(device: str) -> str:
    """``cuda`` under ``torchrun``: this process's GPU (``LOCAL_RANK``); anything else unchanged."""
    if device in ("cuda", "auto") and launched() and torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank (itself when not distributed)."""
    if rank_and_world()[1] == 1:
        return obj
    box: List[Any] = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj: Any) -> List[Any]:
    if rank_and_world()[1] == 1:
        return [obj]
    out: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_to_all_rows(send: Tensor, counts: List[int], recv: Tensor) -> Callable[[], Tensor]:
    """Start sending row blocks ``counts[q]`` of ``send`` to rank ``q``; returns a function that
    waits for the blocks received into ``recv`` (same shape), grouped by sender. The counts are
    symmetric (rank ``q`` sends this rank as many rows as it receives). Every type travels as
    bytes (gloo has no bfloat16)."""
    work = dist.all_to_all_single(recv.view(torch.uint8), send.contiguous().view(torch.uint8),
                                  output_split_sizes=counts, input_split_sizes=counts, async_op=True)

    def wait() -> Tensor:
        work.wait()
        return recv

    return wait
