"""``gbpn plot``: a run folder's learning curves (every trial's training loss and validation score) as PNG and SVG."""
from __future__ import annotations

import argparse
import logging

from gbpn.cli.output import file_in

logger = logging.getLogger("gbpn")


def add_parser(sub, common) -> None:
    p = sub.add_parser("plot", parents=common,
                       help="draw a run's learning curves: each trial's training loss and validation score per epoch, "
                            "the epoch kept marked (PNG and SVG; needs matplotlib)")
    p.add_argument("run", metavar="RUN", help="run folder written by gbpn train (it reads history.csv and "
                                              "metrics.json; a run still training draws the trials finished so far)")
    p.add_argument("--output", default=None,
                   help="where to write: a file name without extension, or a folder for curves.png/.svg in it "
                        "(default: RUN/curves.png and RUN/curves.svg)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gbpn.experiments.curves import plot_run

    output = file_in(args.output, "curves")
    if output and Path(output).suffix in (".png", ".svg"):  # both are written whichever is named
        output = str(Path(output).with_suffix(""))
    stem = plot_run(args.run, output)
    print(f"learning curves of {args.run} saved to {stem}.png and {stem}.svg")
    return 0
