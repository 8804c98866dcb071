"""Partitioned full-graph BP inference: one part of the graph per rank, boundary messages exchanged.

Every rank holds its nodes, their features' self-potentials, the edges among them and one
stored message per cut edge; each BP step swaps only the messages that cross parts
(``all_to_all_single``), in rounds of bounded size. The result equals single-process
inference (:meth:`gbpn.bp.layer.BeliefPropagation.infer_pairs`) up to float rounding.

    torchrun --standalone --nproc_per_node 2 -m gbpn predict --checkpoint runs/x/model.pt
"""
from __future__ import annotations

import logging
import math
import time
from typing import Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from gbpn.distributed import all_gather_object, all_to_all_rows, broadcast_object, rank_and_world
from gbpn.distributed.partition import (
    Part,
    build_part,
    load_parts,
    partition,
    partition_summary,
    resolve_partitioner,
    save_parts,
)
from gbpn.errors import GBPNError
from gbpn.memory import release_file_pages
from gbpn.models.encoders.registry import reads_own_features
from gbpn.models.gbpn import GBPN
from gbpn.bp import Boundary

logger = logging.getLogger("gbpn")
SLOW_STEP = 5.0  # seconds: a BP step this slow gets its line without -v


def graph_pairs(data: Data) -> Tensor:
    """Undirected edges ``[2, P]``, each once: ``data.pairs`` when present, else from ``edge_index``."""
    pairs = getattr(data, "pairs", None)
    if pairs is None:
        ei = data.edge_index
        pairs = ei[:, ei[0] < ei[1]]
    return pairs


def local_self_potential(model: GBPN, data: Data, nodes: Tensor, node_chunk: int = 1 << 16) -> Tensor:
    """Log self-potentials of ``nodes`` (BP normalises them): from their own features for the ``mlp``
    encoder (node chunks); an encoder that reads the neighbourhood computes on the whole graph
    and keeps the rows of ``nodes``."""
    from gbpn.data.features import prepare_features

    if not reads_own_features(model.potential):  # the encoder registry says which read nothing else
        x = model.precompute(prepare_features(data.x), data.edge_index)
        return model.self_potential(x, data.edge_index).index_select(0, nodes)
    # only this part's rows are read (the features may be memory-mapped)
    out = [model.self_potential(prepare_features(data.x.index_select(0, nodes[i:i + node_chunk])))
           for i in range(0, nodes.numel(), node_chunk)]
    return torch.cat(out) if out else torch.empty((0, model.num_classes))


@torch.no_grad()
def partitioned_predict(model: GBPN, data: Data, known_mask: Optional[Tensor] = None, **kw) -> Tuple[Optional[Tensor], Dict]:
    """Log-beliefs ``[N, c]`` of the whole graph on rank 0 (``None`` on the others) and the report
    of :func:`partitioned_beliefs` (keyword arguments as there): every rank's rows are gathered
    on rank 0, which needs ``N x c`` there. Outside ``torchrun`` this is single-process in-place
    inference."""
    nodes, local, report = partitioned_beliefs(model, data, known_mask, **kw)
    rank, world = rank_and_world()
    return _gather(local, nodes, data.num_nodes, rank, world), report


@torch.no_grad()
def partitioned_beliefs(
    model: GBPN,
    data: Data,
    known_mask: Optional[Tensor] = None,
    num_steps: Optional[int] = None,
    message_dtype: torch.dtype = torch.float32,
    chunk: int = 1 << 20,
    partitioner: str = "auto",
    round_rows: int = 1 << 18,
    node_chunk: int = 1 << 16,
    parts_file: Optional[str] = None,
) -> Tuple[Tensor, Tensor, Dict]:
    """This rank's nodes (global ids, ascending), their log-beliefs ``[n_r, c]`` and a report: the
    partition (parts, cut fraction, nodes, local edges, cut edges and halo per part), seconds per
    step and bytes sent per step by every rank. Nothing is gathered: for graphs whose ``N x c``
    beliefs do not fit on one rank, each rank writes its own rows.

    Nodes in ``known_mask`` are clamped to ``data.y``. ``round_rows`` bounds the cut-edge rows in
    flight per peer. ``parts_file``: the node parts are read from there when it exists (written by
    an earlier run on the same graph and number of ranks), else computed and saved there, so
    repeated inference partitions once, as an offline step would."""
    if getattr(model, "motifs", "none") != "none":
        raise GBPNError("partitioned inference runs pairwise BP; a triangle model (--motifs triangle) predicts in one "
                        "process (leave out torchrun)")
    model.eval()
    rank, world = rank_and_world()
    pairs = graph_pairs(data)
    num_nodes, c = data.num_nodes, model.num_classes
    start = time.perf_counter()
    part, method = _node_parts(pairs, num_nodes, rank, world, partitioner, parts_file if world > 1 else None)
    mine = build_part(pairs, part, rank, world)
    summary = partition_summary(all_gather_object(mine.stats()), pairs.size(1))
    summary["partition_seconds"] = time.perf_counter() - start
    summary["method"] = method
    if rank == 0:
        logger.info(f"partition: {world} part(s), {100 * summary['cut_fraction']:.1f}% of {pairs.size(1)} "
                    "undirected edges cut; "
                    + "; ".join(f"part {q}: {s['nodes']} nodes, {s['local_pairs']} local edges, {s['cut_edges']} cut, "
                                f"halo {s['halo']}" for q, s in enumerate(summary["per_part"]))
                    + f"; {method}, {summary['partition_seconds']:.1f} s")
    log_self = local_self_potential(model, data, mine.nodes, node_chunk)
    # a memory-mapped input keeps every page this rank read in its resident set; the part is
    # built and the potentials computed, so give back the features and (unless the part's
    # edges are the input's own, as in one process) the edge list
    released = release_file_pages(data.x) + (release_file_pages(pairs) if mine.pairs is not pairs else 0)
    if released:
        logger.debug(f"rank {rank}: released {released / 1e6:.0f} MB of memory-mapped input")
    known = labels = None
    if known_mask is not None:
        known, labels = known_mask.index_select(0, mine.nodes), data.y.index_select(0, mine.nodes)
    boundary = _boundary(mine, world, round_rows) if world > 1 else None
    step_seconds, last = [], [time.perf_counter()]

    def on_step(step: int) -> None:
        now = time.perf_counter()
        times = all_gather_object(now - last[0])
        step_seconds.append(times)
        if rank == 0:  # a line per step at -v, or at default verbosity where a step is slow enough to matter
            logger.log(logging.INFO if max(times) >= SLOW_STEP else logging.DEBUG,
                       f"BP step {step + 1}: " + ", ".join(f"rank {q} {t:.1f} s" for q, t in enumerate(times)))
        last[0] = time.perf_counter()

    steps = model.bp.steps_of(num_steps)
    log_belief = model.bp.infer_pairs(log_self, mine.pairs, labels, known, steps, chunk, message_dtype,
                                      boundary=boundary, on_step=on_step)
    sent = all_gather_object(boundary.bytes_sent // max(steps, 1) if boundary is not None else 0)
    report = {"partition": summary, "step_seconds": step_seconds, "bytes_sent_per_step": sent}
    if rank == 0 and world > 1:
        logger.info(f"communication: {sum(sent) / 1e6:.1f} MB sent per BP step in all "
                    f"({', '.join(f'rank {q} {b / 1e6:.1f} MB' for q, b in enumerate(sent))}); "
                    f"{100 * summary['cut_fraction']:.1f}% of edges cut")
    return mine.nodes, log_belief, report


def _node_parts(pairs: Tensor, num_nodes: int, rank: int, world: int, partitioner: str,
                parts_file: Optional[str]) -> Tuple[Tensor, str]:
    """Every node's part and how it was found: read from ``parts_file`` (rank 0 reads, all receive;
    an unfit file fails on every rank, not only on rank 0), else :func:`partition`, saved by rank 0
    to ``parts_file`` when one is named."""
    if parts_file is not None:
        loaded, error = None, None
        if rank == 0:
            try:
                loaded = load_parts(parts_file, num_nodes, pairs.size(1), world)
            except GBPNError as err:
                error = str(err)
        loaded, error = broadcast_object((loaded, error))
        if error is not None:
            raise GBPNError(error)
        if loaded is not None:
            return loaded[0], f"{loaded[1]} (read from {parts_file})"
    method = broadcast_object(resolve_partitioner(partitioner, pairs.size(1)) if rank == 0 else None)
    if method == "refined" and world > 1:  # every rank counts its share of the edges, the same moves follow
        part = partition(pairs, num_nodes, world, method, share=(rank, world), all_reduce=dist.all_reduce)
    else:
        part = broadcast_object(partition(pairs, num_nodes, world, method) if rank == 0 else None)
    if parts_file is not None and rank == 0:
        save_parts(parts_file, part, pairs.size(1), method)
    return part, method


def _boundary(mine: Part, world: int, round_rows: int) -> Boundary:
    most = torch.tensor([max(mine.cut_peer_counts)])
    dist.all_reduce(most, op=dist.ReduceOp.MAX)  # every rank takes part in every round
    rounds = max(1, math.ceil(int(most) / round_rows))
    return Boundary(node=mine.cut_node, counts=mine.cut_peer_counts, exchange=all_to_all_rows, rounds=rounds)


def _gather(local: Tensor, nodes: Tensor, num_nodes: int, rank: int, world: int) -> Optional[Tensor]:
    """The whole ``[N, c]`` on rank 0, from every rank's rows of its ``nodes``."""
    if world == 1:
        return local
    sizes = all_gather_object(nodes.numel())
    pad = max(sizes)
    buf = local.new_zeros((pad, local.size(1)))
    buf[: local.size(0)] = local
    ids = torch.full((pad,), -1, dtype=torch.int64)
    ids[: nodes.numel()] = nodes
    if rank != 0:
        dist.gather(buf, dst=0)
        dist.gather(ids, dst=0)
        return None
    bufs = [torch.empty_like(buf) for _ in range(world)]
    all_ids = [torch.empty_like(ids) for _ in range(world)]
    dist.gather(buf, bufs, dst=0)
    dist.gather(ids, all_ids, dst=0)
    out = local.new_empty((num_nodes, local.size(1)))
    for b, i, n in zip(bufs, all_ids, sizes):
        out[i[:n]] = b[:n]
    return out
