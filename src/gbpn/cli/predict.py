"""``gbpn predict``: per-node class probabilities from a trained checkpoint, as CSV (partitioned over the
ranks of ``torchrun`` when launched with it)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from gbpn.cli.options import NON_NEGATIVE, POSITIVE, add_checkpoint_args, add_option, add_threads, add_wait, given
from gbpn.cli.output import file_in, locked
from gbpn.errors import GBPNError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from gbpn import api


def add_parser(sub, common) -> None:
    p = sub.add_parser("predict", parents=common, help="per-node class probabilities from a trained checkpoint, as CSV")
    add_checkpoint_args(p)
    add_option(p, "num_steps", type=NON_NEGATIVE, default=None, help="BP steps (default: as trained)")
    p.add_argument("--node-chunk", type=POSITIVE, default=None, help="self-potentials this many nodes at a time "
                   "(default: all at once; graph encoders always read the whole graph)")
    add_option(p, "edge_chunk", help="BP messages this many edges (pairs) at a time (default: all at once; with "
                                     "--half-messages 2^20 pairs)")
    add_option(p, "device")
    p.add_argument("--half-messages", action="store_true",
                   help="large graphs: one bfloat16 message buffer per undirected edge, updated in place "
                        "(about a quarter of the default's message memory)")
    p.add_argument("--partitioner", default="auto",
                   help="under torchrun: how nodes are split into one part per process (auto, metis, refined or "
                        "ranges); refined: degree-balanced "
                        "ranges improved by balanced label propagation; auto: METIS (pymetis) up to 50 M directed "
                        "edges, else refined (default: auto)")
    p.add_argument("--parts-file", default=None,
                   help="under torchrun: read the node parts from this file when it exists (made by an earlier run "
                        "on the same graph with as many processes), else partition and save them there")
    p.add_argument("--per-rank", action="store_true",
                   help="under torchrun: no gather on rank 0; every rank writes its own nodes' rows (node = the "
                        "graph's node id) to the output name with .rankR-of-W before its suffix, for graphs whose "
                        "N x classes probabilities do not fit on one rank")
    p.add_argument("--output", default=None,
                   help="CSV to write (a folder: predictions.csv in it; default: predictions.csv beside the "
                        "checkpoint)")
    p.add_argument("--report", action="store_true",
                   help="also print the confusion matrix and each class's precision, recall and F1 on the test split "
                        "of the checkpoint (nodes clamped as evidence left out; scikit-learn)")
    add_wait(p)
    add_threads(p)


def loaded(args: argparse.Namespace) -> api.Loaded:
    """The checkpoint and its graph as the command's options name them."""
    from gbpn import api

    return api.load(args.checkpoint, args.dataset, args.data_dir, args.sample, args.header, args.known)


def run(args: argparse.Namespace) -> int:
    from gbpn import api
    from gbpn.distributed import rank_and_world
    from gbpn.distributed.partition import resolve_partitioner

    resolve_partitioner(args.partitioner, 0)  # a name it does not know: refused before anything loads
    partitioner = bool(given(args, ["predict"], ("partitioner",)))
    for flag, set_ in (("--per-rank", args.per_rank), ("--parts-file", args.parts_file),
                       ("--partitioner", partitioner)):
        if set_ and rank_and_world()[1] < 2:
            raise GBPNError(f"{flag} is for partitioned inference over the ranks of torchrun (2 or more): launch "
                            "with torchrun, or leave it out")
    if args.report and args.per_rank:
        raise GBPNError("--report needs every node's prediction on one rank: leave out --per-rank")
    run_ = loaded(args)
    output = file_in(args.output, "predictions.csv") or str(Path(args.checkpoint).with_name("predictions.csv"))
    with locked(Path(output).parent, args.wait):
        if rank_and_world()[1] > 1:
            return _partitioned_predict(args, run_, output)
        probs = api.predict(run_, args.num_steps, args.node_chunk, args.edge_chunk, args.half_messages, args.device)
        write_probabilities(output, probs, run_)
    if args.report:
        print_report(probs, run_)
    return 0


def print_report(probs: np.ndarray, run: api.Loaded) -> None:
    """``--report``: the confusion matrix and per-class scores on the test split (:mod:`gbpn.experiments.report`)."""
    import numpy as np

    from gbpn.experiments.report import format_report, score_report

    known = run.mask.numpy() if run.mask is not None else np.zeros(len(probs), dtype=bool)
    print(format_report(score_report(probs.argmax(1), run.data.y.numpy(), run.node_splits(), known, run.class_names)))


def write_probabilities(output: str, probs: np.ndarray, run: api.Loaded, nodes: Optional[torch.Tensor] = None) -> None:
    import numpy as np

    from gbpn.io import write_predictions

    mask, labels, split = run.mask, run.data.y, run.node_splits()
    if nodes is not None:
        mask = mask.index_select(0, nodes) if mask is not None else None
        labels, split = labels.index_select(0, nodes), split[nodes.numpy()]
    write_predictions(output, probs, run.class_names,
                      mask.numpy() if mask is not None else np.zeros(len(probs), dtype=bool),
                      nodes=None if nodes is None else nodes.numpy(), labels=labels.numpy(), split=split)
    print(f"wrote class probabilities of {len(probs)} nodes to {output} (evidence: {run.known})")


def rank_output(output: str, rank: int, world: int) -> str:
    """A rank's part of ``output``: ``p.csv`` -> ``p.rank0-of-2.csv`` (and ``p`` -> ``p.rank0-of-2.csv``)."""
    path = Path(output)
    return str(path.with_name(f"{path.stem}.rank{rank}-of-{world}{path.suffix or '.csv'}"))


def _partitioned_predict(args: argparse.Namespace, run: api.Loaded, output: str) -> int:
    """``gbpn predict`` under torchrun: partitioned BP on the CPU; rank 0 writes the CSV (or, with
    ``--per-rank``, every rank its own part) and a JSON report (partition, seconds per step, bytes
    per step, the CSV files, versions) beside it."""
    import torch

    from gbpn.distributed import rank_and_world
    from gbpn.distributed.inference import partitioned_beliefs, partitioned_predict
    from gbpn.io import versions, write_json

    if args.device != "cpu":
        raise GBPNError("partitioned inference under torchrun runs on the CPU: use --device cpu")
    kw = dict(num_steps=args.num_steps, message_dtype=torch.bfloat16 if args.half_messages else torch.float32,
              chunk=args.edge_chunk or 1 << 20, partitioner=args.partitioner, node_chunk=args.node_chunk or 1 << 16,
              parts_file=args.parts_file)
    rank, world = rank_and_world()
    if args.per_rank:
        nodes, log_b, report = partitioned_beliefs(run.model, run.data, run.mask, **kw)
        files = [rank_output(output, q, world) for q in range(world)]
        write_probabilities(files[rank], log_b.exp().numpy(), run, nodes=nodes)
    else:
        log_b, report = partitioned_predict(run.model, run.data, run.mask, **kw)
        files = [output]
        if log_b is not None:
            write_probabilities(output, log_b.exp().numpy(), run)
            if args.report:
                print_report(log_b.exp().numpy(), run)
    if rank == 0:
        write_json(Path(output).with_suffix(".json"),
                   {"checkpoint": str(Path(args.checkpoint).resolve()), "known": run.known,
                    "num_steps": args.num_steps, "half_messages": args.half_messages, "partitioner": args.partitioner,
                    "files": files, **report, "versions": versions()})
    return 0
