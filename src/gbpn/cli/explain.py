"""``gbpn explain``: why one node got its prediction, its own evidence and each neighbour's message."""
from __future__ import annotations

import argparse
import logging

from gbpn.cli.options import NON_NEGATIVE, POSITIVE, add_checkpoint_args, add_threads
from gbpn.cli.output import file_in
from gbpn.cli.predict import loaded

logger = logging.getLogger("gbpn")


def add_parser(sub, common) -> None:
    e = sub.add_parser("explain", parents=common,
                       help="why one node got its prediction: own evidence and each neighbour's message")
    add_checkpoint_args(e)
    e.add_argument("--node", type=NON_NEGATIVE, required=True, help="node id (0-based)")
    e.add_argument("--top", type=POSITIVE, default=10, help="neighbours to list (default: 10)")
    e.add_argument("--json", default=None, help="also write the full explanation as JSON to this file (a folder: "
                                                "explain-node<N>.json in it)")
    add_threads(e)


def run(args: argparse.Namespace) -> int:
    from gbpn import api
    from gbpn.experiments.explain import format_explanation
    from gbpn.io import write_json

    ex = api.explain(loaded(args), args.node)
    if args.json:  # first: an unwritable path fails before anything is printed
        args.json = file_in(args.json, f"explain-node{args.node}.json")
        write_json(args.json, ex)
        logger.info(f"wrote the explanation to {args.json}")
    print(format_explanation(ex, args.top))
    return 0
