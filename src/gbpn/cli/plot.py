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
                                              "metrics.json; a run still training draws the trials finished so far); "
                                              "where gbpn predict has written RUN/predictions.csv, the test split's "
                                              "confusion matrix too (confusion.png/.svg)")
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
    predictions = Path(args.run) / "predictions.csv"  # gbpn predict's default output for RUN/model.pt
    if predictions.is_file():
        from gbpn.experiments.report import plot_confusion, read_predictions, score_report

        table = read_predictions(predictions)
        report = score_report(table["predicted"], table["labels"], table["split"], table["known"], table["classes"])
        confusion = stem.with_name("confusion" if stem.name == "curves" else f"{stem.name}-confusion")
        plot_confusion(report, confusion)
        print(f"confusion matrix of {predictions} on the test split saved to {confusion}.png and {confusion}.svg")
    else:
        print(f"no confusion matrix: {predictions} is absent (gbpn predict --checkpoint {Path(args.run) / 'model.pt'} "
              "writes it)")
    return 0
