"""The ``gbpn`` command line: a thin layer over the library."""
from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

from gbpn.errors import GBPNError

DEFAULT_DATASET = "synth-ising+"


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=DEFAULT_DATASET,
                   help=f"dataset name or a folder with edges.csv/features.csv[/labels.csv] (default: {DEFAULT_DATASET}, "
                        "generated here, no download)")
    p.add_argument("--data-dir", default=None, help="folder with the raw data (default: $GBPN_DATA or ~/.cache/gbpn/data)")
    p.add_argument("--sample", type=int, default=0, help="label sample of a synthetic grid, 0..9 (default: 0)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gbpn", description="Graph Belief Propagation Networks for node classification.")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train and evaluate GBPN / GBPN-I over several seeded trials")
    _add_data_args(t)
    t.add_argument("--variant", choices=["gbpn", "gbpn-i"], default="gbpn",
                   help="gbpn: transductive, conditions on training labels; gbpn-i: inductive, features only")
    t.add_argument("--steps", "-K", dest="num_steps", type=int, default=5, help="BP steps K (default: 5)")
    t.add_argument("--hidden", type=int, default=256, help="MLP hidden units (default: 256)")
    t.add_argument("--dropout", type=float, default=None, help="MLP dropout (default: per dataset, as in the paper)")
    t.add_argument("--epochs", type=int, default=500, help="full-batch training steps (default: 500)")
    t.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: 1e-3)")
    t.add_argument("--coupling-lr", type=float, default=1e-2, help="learning rate of the coupling H (default: 1e-2)")
    t.add_argument("--weight-decay", type=float, default=2.5e-4, help="AdamW weight decay (default: 2.5e-4)")
    t.add_argument("--no-degree-weight", action="store_true", help="plain NLL instead of the d^-1/2 re-weighted one")
    t.add_argument("--warmup", type=float, default=0.0, help="fraction of epochs trained without BP first (default: 0)")
    t.add_argument("--damping", type=float, default=0.0, help="BP message damping in [0, 1) (default: 0)")
    t.add_argument("--trials", type=int, default=1, help="trials, each with its own seed and split (default: 1)")
    t.add_argument("--seed", type=int, default=0, help="seed of the first trial (default: 0)")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    t.add_argument("--output", default=None, help="run folder (default: runs/<dataset>-<variant>-seed<seed>)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("predict", help="per-node class probabilities from a trained checkpoint, as CSV")
    p.add_argument("--checkpoint", required=True, help="model.pt written by gbpn train")
    _add_data_args(p)
    p.add_argument("--known", choices=["auto", "none", "train", "labeled"], default="auto",
                   help="evidence to clamp: none (inductive), train (the checkpoint's training split), labeled "
                        "(every node with a label >= 0, e.g. your own labels.csv); auto: train for gbpn, none for gbpn-i")
    p.add_argument("--steps", "-K", dest="num_steps", type=int, default=None, help="BP steps (default: as trained)")
    p.add_argument("--output", default="predictions.csv", help="CSV to write (default: predictions.csv)")

    c = sub.add_parser("coupling", help="print the learned coupling H and save it as a heatmap")
    c.add_argument("--checkpoint", required=True, help="model.pt written by gbpn train")
    c.add_argument("--output", default=None, help="PNG path (default: coupling.png beside the checkpoint)")
    return parser


def _cmd_train(args: argparse.Namespace) -> int:
    from gbpn.experiments.runner import run_trials
    from gbpn.training import TrainConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    config = TrainConfig(
        variant=args.variant, num_steps=args.num_steps, hidden=args.hidden, dropout=args.dropout,
        epochs=args.epochs, lr=args.lr, coupling_lr=args.coupling_lr, weight_decay=args.weight_decay,
        degree_weight=not args.no_degree_weight, warmup=args.warmup, damping=args.damping,
    )
    name = Path(args.dataset).name if os.path.isdir(args.dataset) else args.dataset
    output = args.output or f"runs/{name}-{args.variant}-seed{args.seed}"
    result = run_trials(args.dataset, config, args.trials, args.seed, output, args.data_dir, args.sample,
                        progress=not args.quiet, log=lambda m: print(m, file=sys.stderr))
    s = result["summary"]
    print(f"{name} {args.variant}: test accuracy {100 * s['test_accuracy_mean']:.2f} ± "
          f"{100 * s['test_accuracy_std']:.2f} over {s['num_trials']} trial(s); run saved in {output}")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from gbpn.data.datasets import load_dataset
    from gbpn.data.splits import random_split
    from gbpn.io import atomic_write, load_checkpoint
    from gbpn.training import predict

    model, meta = load_checkpoint(args.checkpoint)
    data = load_dataset(args.dataset, args.data_dir, sample=args.sample)
    if data.num_features != model.in_channels:
        raise GBPNError(f"the graph has {data.num_features} features per node but the checkpoint expects "
                        f"{model.in_channels}")
    if int(data.y.max()) >= model.num_classes:
        raise GBPNError(f"labels go up to {int(data.y.max())} but the checkpoint knows {model.num_classes} classes")
    known = args.known if args.known != "auto" else ("train" if meta.get("variant") == "gbpn" else "none")
    mask = None
    if known == "train":
        split = meta["split"]
        mask = random_split(data.y, split["train"], split["val"], split["seed"])[0]
    elif known == "labeled":
        mask = data.y >= 0
    probs = predict(model, data, mask, num_steps=args.num_steps).exp().numpy()
    names = meta.get("class_names") or [str(k) for k in range(model.num_classes)]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["node", "prediction", "known"] + [f"p_{n}" for n in names])
    pred = probs.argmax(1)
    is_known = mask.numpy() if mask is not None else np.zeros(len(pred), dtype=bool)
    for i in range(len(pred)):
        w.writerow([i, names[pred[i]], int(is_known[i])] + [f"{v:.6g}" for v in probs[i]])
    atomic_write(args.output, lambda fh: fh.write(buf.getvalue()))
    print(f"wrote class probabilities of {len(pred)} nodes to {args.output} (evidence: {known})")
    return 0


def _cmd_coupling(args: argparse.Namespace) -> int:
    from gbpn.io import load_checkpoint
    from gbpn.plots import plot_coupling

    model, meta = load_checkpoint(args.checkpoint)
    H = model.bp.coupling.normalized().numpy()
    names = meta.get("class_names") or [str(k) for k in range(model.num_classes)]
    width = max(8, max(len(n) for n in names) + 1)
    print(f"coupling H of {meta.get('dataset', '?')} ({meta.get('variant', '?')}), scaled so mean(log H) = 0:")
    print(" " * width + "".join(f"{n:>{width}}" for n in names))
    for n, row in zip(names, H):
        print(f"{n:>{width}}" + "".join(f"{v:>{width}.3f}" for v in row))
    out = args.output or str(Path(args.checkpoint).with_name("coupling.png"))
    plot_coupling(H, out, names, title=f"coupling H: {meta.get('dataset', '')}")
    print(f"heatmap saved to {out}")
    return 0


COMMANDS = {"train": _cmd_train, "predict": _cmd_predict, "coupling": _cmd_coupling}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except GBPNError as err:
        print(f"gbpn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gbpn {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as err:  # a bug, not a user error: one line, full trace on request
        if os.environ.get("GBPN_DEBUG"):
            raise
        print(f"gbpn {args.command}: internal error: {type(err).__name__}: {err} "
              "(set GBPN_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
