"""The ``gbpn`` command line: a thin layer over the library."""
from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import math
import os
import sys
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

import gbpn
from gbpn import distributed
from gbpn.distributed import rank_and_world
from gbpn.distributed.partition import PARTITIONERS
from gbpn.errors import GBPNError
from gbpn.train.metrics import METRICS
from gbpn.models.encoders import ENCODERS

DEFAULT_DATASET = "synth-ising+"
DATA_DIR_HELP = "folder with the raw data (default: $GBPN_DATA, else ~/.cache/gbpn/data)"
THREADS_HELP = "torch CPU threads (default: 1, measured faster than 2 on a busy 2-core machine; see the README)"
KNOWN_HELP = ("labels clamped as evidence: none (inductive), train (the checkpoint's training split), labeled "
              "(every node with a label >= 0: test labels leak into the output if you then score it); "
              "auto (default): train for gbpn, none for gbpn-i")
logger = logging.getLogger("gbpn")


def _count(low: int):
    """An argparse type: a whole number >= ``low`` (a clear usage error, before anything runs)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


POSITIVE, NON_NEGATIVE = _count(1), _count(0)


def _add_data_args(p: argparse.ArgumentParser, from_checkpoint: bool = False) -> None:
    default = "the checkpoint's own" if from_checkpoint else f"{DEFAULT_DATASET}, generated here, no download"
    p.add_argument("--dataset", default=None if from_checkpoint else DEFAULT_DATASET,
                   help=f"dataset name or a folder with edges.csv/features.csv[/labels.csv] (default: {default})")
    p.add_argument("--data-dir", default=None,
                   help=DATA_DIR_HELP if not from_checkpoint else "folder with the raw data (default: the "
                        "checkpoint's, else $GBPN_DATA, else ~/.cache/gbpn/data)")
    p.add_argument("--sample", type=int, default=None if from_checkpoint else 0,
                   help="label sample of a synthetic grid, 0..9 (default: " + ("the checkpoint's)" if from_checkpoint else "0)"))
    _add_header_args(p)


def _add_header_args(p: argparse.ArgumentParser) -> None:
    h = p.add_mutually_exclusive_group()
    h.add_argument("--header", dest="header", action="store_true", default=None,
                   help="your own folder: the first line of every CSV file is a header")
    h.add_argument("--no-header", dest="header", action="store_false",
                   help="your own folder: a first line of numbers is data, not a header (default: told from "
                        "the files)")


def _add_checkpoint_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--checkpoint", required=required, default=None, help="model.pt written by gbpn train")
    _add_data_args(p, from_checkpoint=True)
    p.add_argument("--known", choices=["auto", "none", "train", "labeled"], default="auto", help=KNOWN_HELP)


def _add_study_args(p: argparse.ArgumentParser, epochs: int, trials: int) -> None:
    """Options of the analyses that train models themselves."""
    p.add_argument("--variant", choices=["gbpn", "gbpn-i"], default="gbpn",
                   help="gbpn: transductive (conditions on training labels); gbpn-i: inductive (default: gbpn)")
    p.add_argument("--epochs", type=int, default=epochs, help=f"training epochs per model (default: {epochs})")
    p.add_argument("--trials", type=POSITIVE, default=trials, help=f"seeded trials (default: {trials})")
    p.add_argument("--batch-size", type=int, default=256, help="target nodes per mini-batch (default: 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first trial (default: 0)")
    p.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)


def _common() -> argparse.ArgumentParser:
    """-v/-q, accepted by every command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help="debug messages too")
    common.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only, no progress bars")
    return common


def _add_potential_args(p: argparse.ArgumentParser) -> None:
    """The self-potential's encoder (gbpn.models.encoders) and the model-selection metric."""
    p.add_argument("--potential", default="mlp", choices=[*ENCODERS, "auto"],
                   help="encoder of the self-potential: mlp (the paper's, own features only), sign (precomputed "
                        "neighbourhood features [x, Ax, A^2x]), gcn/sage/gat (PyG layers, full batch only), dagnn (an MLP's "
                        "outputs propagated 10 hops with learned retention; full batch), linkx (a node's features and "
                        "adjacency row mapped apart; full batch, tied to the training graph), or auto (train mlp, "
                        "sign, sage, gcn --no-separate, dagnn and linkx; keep the best on validation) "
                        "(default: mlp)")
    p.add_argument("--potential-hops", type=int, default=2, help="sign: propagation hops (default: 2)")
    p.add_argument("--potential-layers", type=int, default=2, help="gcn/sage/gat: message-passing layers (default: 2)")
    p.add_argument("--residual", action="store_true", help="gcn/sage/gat: residual connections")
    p.add_argument("--layer-norm", action="store_true", help="gcn/sage/gat: LayerNorm before each layer")
    p.add_argument("--no-separate", action="store_true",
                   help="sign/gcn/gat: mix a node's own channel into its neighbourhood (GCN-style self-loops) "
                        "instead of keeping it apart")
    p.add_argument("--metric", default="auto", choices=["auto", *METRICS],
                   help="model selection on validation (epochs, --potential auto) and the reported score; auto: "
                        "roc_auc for binary labels with a minority class under 30%% (of trial 0's training and "
                        "validation labels), accuracy otherwise (default: auto)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gbpn", description="Graph Belief Propagation Networks for node classification.",
                                     epilog="Progress bars show on a terminal only; messages go to stderr through "
                                            "logging, results to stdout.")
    parser.add_argument("--version", action="version", version=f"gbpn {gbpn.__version__}")
    common = [_common()]
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", parents=common, help="train and evaluate GBPN / GBPN-I over several seeded trials")
    t.add_argument("--config", default=None,
                   help="rerun a recorded run: its config.json (data set, sample, seed, trials and every "
                        "hyper-parameter come from it; of the options below only --output, --threads, "
                        "--data-dir, --header and --save-trials may be given with it; --output defaults as "
                        "without --config, so give it unless the recorded run's folder should be resumed)")
    _add_data_args(t)
    t.add_argument("--variant", choices=["gbpn", "gbpn-i"], default="gbpn",
                   help="gbpn: transductive, conditions on training labels; gbpn-i: inductive, features only "
                        "(default: gbpn)")
    t.add_argument("--steps", "-K", dest="num_steps", metavar="K", type=int, default=5, help="BP steps K (default: 5)")
    t.add_argument("--hidden", type=int, default=256, help="encoder hidden units (default: 256)")
    t.add_argument("--mlp-layers", dest="num_hidden", metavar="L", type=int, default=2,
                   help="hidden layers of the mlp potential: 2 is F-256-256-c, 1 is F-256-c (default: 2)")
    _add_potential_args(t)
    t.add_argument("--dropout", type=float, default=None,
                   help="encoder dropout (default: the paper's rule by features per training node: 0.6 above "
                        "1.5, 0.3 above 0.05, else 0.1; config.json records the value used)")
    t.add_argument("--epochs", type=int, default=500, help="full-batch training steps (default: 500)")
    t.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (CUDA when available; default: cpu)")
    t.add_argument("--patience", type=int, default=None,
                   help="stop after this many epochs without a better validation score (of --metric; default: run "
                        "all epochs)")
    t.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: 1e-3)")
    t.add_argument("--coupling-lr", type=float, default=1e-2, help="learning rate of the coupling H (default: 1e-2)")
    t.add_argument("--weight-decay", type=float, default=2.5e-4, help="AdamW weight decay (default: 2.5e-4)")
    t.add_argument("--no-degree-weight", action="store_true", help="plain NLL instead of the d^-1/2 re-weighted one")
    t.add_argument("--warmup", type=float, default=0.0, help="fraction of epochs trained without BP first (default: 0)")
    t.add_argument("--damping", type=float, default=0.0, help="BP message damping in [0, 1) (default: 0)")
    t.add_argument("--backward", choices=["unroll", "implicit"], default="unroll",
                   help="unroll: back-propagate through the K steps; implicit: run BP to convergence and "
                        "differentiate its fixed point (memory of one step; --tol, --max-steps) (default: unroll)")
    t.add_argument("--tol", type=float, default=1e-4,
                   help="implicit: stop BP once no belief changes by more than this in a step (default: 1e-4)")
    t.add_argument("--max-steps", type=int, default=100, help="implicit: most BP steps per pass (default: 100)")
    t.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="MLP hidden layers in float32 or bfloat16 (BP is always float32; default: fp32)")
    t.add_argument("--batch-size", type=int, default=None,
                   help="mini-batch training on sampled computation trees with this many targets per step "
                        "(default: full batch)")
    t.add_argument("--fanout", type=int, default=5, help="mini-batch: neighbours kept per tree node (default: 5)")
    t.add_argument("--hops", type=int, default=None, help="mini-batch: tree depth (default: --steps)")
    t.add_argument("--sampler", choices=["uniform", "exp3"], default="uniform",
                   help="mini-batch: how tree neighbours are drawn; exp3 learns importance-sampling "
                        "distributions online (paper appendix B) (default: uniform)")
    t.add_argument("--exp3-gamma", type=float, default=0.05, help="share of uniform exploration in exp3 (default: 0.05)")
    t.add_argument("--edge-chunk", type=POSITIVE, default=None,
                   help="evaluate BP this many edges at a time (bounded memory on large graphs)")
    t.add_argument("--class-weight", action="store_true", help="weight the loss by inverse class frequency")
    t.add_argument("--trials", type=POSITIVE, default=1, help="trials, each with its own seed and split (default: 1)")
    t.add_argument("--seed", type=int, default=0, help="seed of the first trial (default: 0)")
    t.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)
    t.add_argument("--output", default=None,
                   help="run folder (default: runs/<dataset>-<variant>-seed<seed>, with -<potential> after the "
                        "variant for a potential other than mlp)")
    t.add_argument("--save-trials", action="store_true",
                   help="keep every trial's checkpoint (checkpoints/trial_K.pt) and class probabilities of every "
                        "node (predictions/trial_K.csv), not only the best trial's model.pt")

    p = sub.add_parser("predict", parents=common, help="per-node class probabilities from a trained checkpoint, as CSV")
    _add_checkpoint_args(p)
    p.add_argument("--steps", "-K", dest="num_steps", metavar="K", type=NON_NEGATIVE, default=None,
                   help="BP steps (default: as trained)")
    p.add_argument("--node-chunk", type=POSITIVE, default=None, help="self-potentials this many nodes at a time (default: all at once; graph encoders always "
                        "read the whole graph)")
    p.add_argument("--edge-chunk", type=POSITIVE, default=None, help="BP messages this many edges (pairs) at a time (default: all at once; with "
                        "--half-messages 2^20 pairs)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (CUDA when available; default: cpu)")
    p.add_argument("--half-messages", action="store_true",
                   help="large graphs: one bfloat16 message buffer per undirected edge, updated in place "
                        "(about a quarter of the default's message memory)")
    p.add_argument("--partitioner", choices=list(PARTITIONERS), default="auto",
                   help="under torchrun: how nodes are split into one part per process; refined: degree-balanced "
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

    b = sub.add_parser("benchmark", parents=common, help="grid of models x datasets x trials, resumable, with a Markdown table")
    b.add_argument("--preset", choices=["table2", "table3", "heterophily"], default=None,
                   help="the paper's Table 2 (synthetic) or Table 3 (real) grid, or heterophilous graphs")
    b.add_argument("--quick", action="store_true",
                   help="smoke run: 2 trials of 100 epochs, without gbpn:auto (table2: the 4 reference grids "
                        "only); see the README for what it costs")
    b.add_argument("--models", nargs="+", default=None,
                   help="free grid: models (gbpn gbpn-i mlp gcn sage gat gmnn dagnn lp cs; mini-batch: sage-sampled "
                        "gat-sampled cluster-gcn); a GBPN per potential encoder as gbpn:<potential> or "
                        "gbpn-i:<potential> with mlp, sign, sign-mixed, gcn, gcn-mixed, sage, gat, gat-mixed, dagnn, linkx or auto")
    b.add_argument("--datasets", nargs="+", default=None, help="free grid: datasets")
    b.add_argument("--trials", type=POSITIVE, default=10, help="free grid: trials per cell (default: 10)")
    b.add_argument("--epochs", type=POSITIVE, default=500, help="free grid: training steps (default: 500)")
    b.add_argument("--patience", type=POSITIVE, default=None,
                   help="free grid: stop a run after this many epochs without a better validation score (of "
                        "--metric)")
    b.add_argument("--seed", type=int, default=0, help="seed of trial 0 (default: 0)")
    b.add_argument("--dropout", type=float, default=None,
                   help="free grid: dropout of every model (default: the paper's rule by features per training "
                        "node; the heterophily preset uses 0.1)")
    b.add_argument("--batch-size", type=int, default=None,
                   help="free grid, large graphs: GBPN on sampled trees (T=2, d=5) and the mini-batch "
                        "baselines with this many target nodes per batch")
    b.add_argument("--metric", default="auto", choices=["auto", *METRICS],
                   help="model selection on validation for GBPN and the full-batch baselines (LP and C&S: their "
                        "alphas), reported beside accuracy; auto: roc_auc for binary labels with a minority class "
                        "under 30%% (of trial 0's training and validation labels), accuracy otherwise (default: "
                        "auto)")
    b.add_argument("--save-predictions", action="store_true",
                   help="also write every run's class probabilities on every node (predictions/<dataset>__<model>"
                        "__<trial>.csv) and each GBPN run's checkpoint (checkpoints/...pt); not for the mini-batch "
                        "baselines")
    b.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    b.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)
    b.add_argument("--output", default=None,
                   help="output folder (default: runs/benchmark-<preset>, with -quick for --quick; a free grid: "
                        "runs/benchmark)")
    b.add_argument("--table-only", action="store_true",
                   help="rebuild results.csv and table.md from the finished runs in --output, training nothing; "
                        "the grid (models, data sets, trials, options) is read from its config.json unless "
                        "--preset or --models and --datasets name it")

    m = sub.add_parser("sample-mrf", parents=common, help="sample a synthetic grid MRF data set into the bring-your-own format")
    m.add_argument("--kind", choices=["ising+", "ising-", "mrf+", "mrf-"], default="ising+",
                   help="Ising (2 classes) or Potts-like MRF (3), homophilous (+) or heterophilous (-) (default: ising+)")
    m.add_argument("--size", type=int, default=51, help="grid side n (n x n nodes; default: 51)")
    m.add_argument("--coupling", type=float, nargs="+", default=None,
                   help="coupling H row by row (c*c positive numbers; default: the kind's documented default)")
    m.add_argument("--samples", type=POSITIVE, default=10, help="label samples to draw (default: 10)")
    m.add_argument("--sample", type=int, default=0, help="which sample becomes labels.csv (default: 0)")
    m.add_argument("--burn-in", type=NON_NEGATIVE, default=1000, help="sweeps discarded first (default: 1000)")
    m.add_argument("--thin", type=POSITIVE, default=100, help="sweeps between samples (default: 100)")
    m.add_argument("--seed", type=int, default=0, help="seed of the sampler and the features (default: 0)")
    m.add_argument("--output", required=True,
                   help="folder to write edges.csv, features.csv, labels.csv (the chosen sample), "
                        "label_samples.csv (every sample) and mrf.json (the coupling and settings) into")

    a = sub.add_parser("analyze",
                       help="figures (PNG, SVG) and the numbers behind them (CSV) for a trained model; "
                            "--output is always a folder")
    asub = a.add_subparsers(dest="analysis", required=True)
    conv = asub.add_parser("convergence", parents=common,
                           help="residual and accuracy per BP step; when each node's prediction settles")
    _add_checkpoint_args(conv)
    conv.add_argument("--steps", type=POSITIVE, default=20, help="BP steps T to run (default: 20)")
    conv.add_argument("--no-layout", action="store_true", help="skip the 2-D node layout (the slow part)")
    conv.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)
    conv.add_argument("--output", default=None, help="folder (default: analysis/ beside the checkpoint)")
    ad = asub.add_parser("degree", parents=common,
                         help="with --checkpoint: confidence, accuracy and log-likelihood against node "
                              "degree; with --fanouts: train 1-hop GBPNs with at most d sampled "
                              "neighbours and score them by degree group (paper Figure 5)")
    ad.add_argument("--checkpoint", default=None, help="model.pt written by gbpn train (confidence by degree)")
    ad.add_argument("--dataset", default=None,
                    help=f"dataset name or folder (default: the checkpoint's; with --fanouts: {DEFAULT_DATASET})")
    ad.add_argument("--data-dir", default=None,
                    help="folder with the raw data (default: the checkpoint's, else $GBPN_DATA, else "
                         "~/.cache/gbpn/data)")
    ad.add_argument("--sample", type=int, default=None,
                    help="label sample of a synthetic grid, 0..9 (default: the checkpoint's; with --fanouts: 0)")
    _add_header_args(ad)
    ad.add_argument("--known", choices=["auto", "none", "train", "labeled"], default="auto", help=KNOWN_HELP)
    ad.add_argument("--fanouts", type=int, nargs="+", default=None,
                    help="maximum sampled neighbours to compare, 0 for all (e.g. 1 2 5 10 20 0)")
    _add_study_args(ad, epochs=100, trials=3)
    ad.add_argument("--output", default=None, help="folder (default: analysis/ beside the checkpoint, "
                                                   "or runs/degree-<dataset> with --fanouts)")
    asa = asub.add_parser("sampling", parents=common,
                          help="Exp3 importance sampling against uniform and optimal sampling: "
                               "variance ratios per epoch and accuracy (paper appendix B, Figure 7)")
    _add_data_args(asa)
    _add_study_args(asa, epochs=100, trials=3)
    asa.add_argument("--fanout", type=int, default=None,
                     help="neighbours drawn per tree node (default: 5, or one less than the largest degree "
                          "where that is smaller, so that some node is sampled)")
    asa.add_argument("--hops", type=int, default=2, help="tree depth (default: 2)")
    asa.add_argument("--exp3-gamma", type=float, default=0.05, help="share of uniform exploration (default: 0.05)")
    asa.add_argument("--output", default=None, help="folder (default: runs/sampling-<dataset>)")
    ai = asub.add_parser("identifiability", parents=common,
                         help="learn H on grids sampled with a known H and compare (Figure 3)")
    ai.add_argument("--kinds", nargs="+", default=["ising+", "ising-", "mrf+", "mrf-"],
                    choices=["ising+", "ising-", "mrf+", "mrf-"],
                    help="grid kinds to sample and learn (default: ising+ ising- mrf+ mrf-)")
    ai.add_argument("--epochs", type=int, default=500, help="training epochs per grid (default: 500)")
    ai.add_argument("--seed", type=int, default=0,
                    help="seed of the split and the training; the grids are the fixed synth-<kind> data sets "
                         "(default: 0)")
    ai.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)
    ai.add_argument("--output", default="runs/identifiability", help="folder (default: runs/identifiability)")

    e = sub.add_parser("explain", parents=common,
                       help="why one node got its prediction: own evidence and each neighbour's message")
    _add_checkpoint_args(e)
    e.add_argument("--node", type=NON_NEGATIVE, required=True, help="node id (0-based)")
    e.add_argument("--top", type=POSITIVE, default=10, help="neighbours to list (default: 10)")
    e.add_argument("--json", default=None, help="also write the full explanation as JSON to this file (a folder: "
                                                "explain-node<N>.json in it)")

    c = sub.add_parser("coupling", parents=common, help="print the learned coupling H; heatmap (PNG, SVG) and CSV")
    c.add_argument("--checkpoint", required=True, help="model.pt written by gbpn train")
    c.add_argument("--output", default=None, help="folder for coupling.png/.svg/.csv (default: the checkpoint's)")
    for cmd in (p, m, e, c):  # every command that computes runs at the measured default
        cmd.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)
    return parser


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    with contextlib.suppress(AttributeError, OSError):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _set_threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None) is None:  # argparse checked it is positive
        return
    cap = _usable_cpus()
    if args.threads > cap:  # the fused kernels' per-thread buffers and thread pool grow with it
        logger.warning(f"--threads {args.threads} is more than the {cap} CPU(s) this process may use; using {cap}")
        args.threads = cap
    torch.set_num_threads(args.threads)


def _recorded_run(path: str) -> tuple:
    """``(dataset, data_dir, sample, seed, trials, TrainConfig, header)`` of a run's ``config.json``."""
    from gbpn.train.config import TrainConfig
    from gbpn.io import read_json

    if not Path(path).is_file():
        raise GBPNError(f"--config {path}: no such file (give the config.json of an earlier run folder)")
    rec = read_json(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("train"), dict):
        raise GBPNError(f"{path} is not a run's config.json (no \"train\" options): give the config.json of a "
                        "gbpn train run folder")
    config = TrainConfig.from_dict(rec["train"], str(path))
    for key, least in (("seed", 0), ("trials", 1), ("sample", 0)):
        value = rec.get(key, least)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise GBPNError(f"{path}: {key} must be a whole number >= {least}, got {value!r}")
    if rec.get("seed", 0) + rec.get("trials", 1) - 1 > MAX_SEED:
        raise GBPNError(f"{path}: seed + trials must stay within {MAX_SEED} (torch and NumPy read seeds modulo 2^32)")
    try:
        source = rec.get("source") or {"dataset": rec["dataset"], "data_dir": None}
        recorded, (rank, world) = rec.get("world_size"), rank_and_world()
        if recorded is not None and int(recorded) != world and rank == 0:
            logger.warning(f"{path} was run by {recorded} process(es) and this rerun has {world}: data-parallel "
                           f"mini-batches differ, so will the results (torchrun --nproc_per_node {recorded} reruns it "
                           "exactly)")
        return (source["dataset"], source["data_dir"], rec.get("sample", 0), rec["seed"], rec["trials"], config,
                source.get("header"))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise GBPNError(f"{path} is not a run's config.json ({type(err).__name__}: {err})") from None


# what --config leaves to the command line: where to write and read, how many threads, what to keep
_CONFIG_KEEPS = {"command", "argv", "config", "output", "threads", "data_dir", "header", "save_trials", "quiet", "verbose"}


def _parsers(parser: argparse.ArgumentParser):
    """``parser`` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


@functools.lru_cache(maxsize=8)
def _typed(argv: tuple) -> frozenset:
    parser = build_parser()
    for p in _parsers(parser):
        for action in p._actions:
            if action.option_strings:
                action.default = argparse.SUPPRESS
    return frozenset(vars(parser.parse_args(list(argv))))


def typed_options(argv: List[str]) -> set:
    """The argparse dests of the options written on the command line ``argv``, whatever their values
    (one typed with its default value included): the command parsed with every default suppressed."""
    return set(_typed(tuple(argv)))


@functools.lru_cache(maxsize=8)
def _flags(command: tuple) -> dict:
    """dest -> the longest flag, from the subcommand's own parser (e.g. ``("analyze", "degree")``)."""
    sub = build_parser()
    for word in command:
        sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {a.dest: max(a.option_strings, key=len) for a in sub._actions if a.option_strings}


def _given_options(args: argparse.Namespace, command: List[str], names) -> List[str]:
    """The flags among ``names`` (argparse dests) written on the command line of ``command`` (e.g.
    ``["analyze", "degree"]``): the options a user set, to any value."""
    flag, typed = _flags(tuple(command)), _typed(tuple(args.argv))
    return [flag.get(k, k) for k in sorted(names) if k in typed]


def _refuse_overrides(args: argparse.Namespace) -> None:
    """``--config`` reruns a recorded run as it was: an option it would ignore is an error, not silence."""
    flags = _given_options(args, ["train"], set(vars(args)) - _CONFIG_KEEPS)
    if flags:
        raise GBPNError(f"--config reruns the recorded run with its own settings, so {', '.join(flags)} would be "
                        "ignored: leave them out, or train without --config to change them")


def _refuse_inapplicable(args: argparse.Namespace) -> None:
    """``train`` options that only act with another option or potential: given without it, an error
    that says what they need, not silence."""
    graph_gnn, auto = ("gcn", "sage", "gat"), args.potential == "auto"
    rules = ((("fanout", "hops", "sampler", "exp3_gamma"), args.batch_size is not None,
              "mini-batch training (--batch-size)"),
             (("tol", "max_steps"), args.backward == "implicit", "--backward implicit"),
             (("potential_hops",), auto or args.potential == "sign", "--potential sign"),
             (("potential_layers", "residual", "layer_norm"), auto or args.potential in graph_gnn,
              "--potential gcn, sage or gat"))
    for dests, applies, what in rules:
        given = _given_options(args, ["train"], dests)
        if given and not applies:
            raise GBPNError(f"{', '.join(given)}: only for {what}, so {'they' if len(given) > 1 else 'it'} would "
                            "be ignored; leave it out or add what it needs")


def _cmd_train(args: argparse.Namespace) -> int:
    from gbpn.train.config import TrainConfig
    from gbpn.data.datasets import dataset_name
    from gbpn.experiments.runner import run_trials

    if args.config is not None:
        _refuse_overrides(args)
        dataset, data_dir, sample, seed, trials, config, header = _recorded_run(args.config)
        data_dir = args.data_dir or data_dir
        header = args.header if args.header is not None else header
    else:
        _refuse_inapplicable(args)
        dataset, data_dir, sample, seed, trials = args.dataset, args.data_dir, args.sample, args.seed, args.trials
        header = args.header
        config = TrainConfig(
            variant=args.variant, num_steps=args.num_steps, hidden=args.hidden, num_hidden=args.num_hidden,
            dropout=args.dropout, epochs=args.epochs, lr=args.lr, coupling_lr=args.coupling_lr,
            weight_decay=args.weight_decay, degree_weight=not args.no_degree_weight, warmup=args.warmup,
            damping=args.damping, precision=args.precision, batch_size=args.batch_size, fanout=args.fanout,
            num_hops=args.hops, edge_chunk=args.edge_chunk, class_weight=args.class_weight, sampler=args.sampler,
            exp3_gamma=args.exp3_gamma, patience=args.patience, device=args.device, potential=args.potential,
            potential_hops=args.potential_hops, potential_layers=args.potential_layers, residual=args.residual,
            layer_norm=args.layer_norm, separate=not args.no_separate, metric=args.metric,
            backward=args.backward, tol=args.tol, max_steps=args.max_steps,
        )
    if rank_and_world()[1] > 1:
        from gbpn.train.minibatch import check_data_parallel

        check_data_parallel(config)
    name = dataset_name(dataset)
    potential = "" if config.potential == "mlp" else f"-{config.potential}"
    output = args.output or f"runs/{name}-{config.variant}{potential}-seed{seed}"
    result = run_trials(dataset, config, trials, seed, output, data_dir, sample, progress=not args.quiet,
                        header=header, save_trials=args.save_trials)
    if rank_and_world()[0] != 0:  # every rank trained; rank 0 reports
        return 0
    s = result["summary"]
    print(f"{name} {config.variant}: test accuracy {_mean_std(s, 'test_accuracy')}"
          + (f", illicit-class F1 {_mean_std(s, 'test_f1')}" if "test_f1_mean" in s else "")
          + (f", ROC AUC {_mean_std(s, 'test_roc_auc')}" if "test_roc_auc_mean" in s else "")
          + f" over {s['num_trials']} trial(s); run saved in {output}")
    return 0


def _mean_std(summary: dict, key: str) -> str:
    """``85.70 ± 1.40`` in per cent; no ± for one trial, where there is no spread to report."""
    mean = f"{100 * summary[f'{key}_mean']:.2f}"
    return mean if summary["num_trials"] < 2 else f"{mean} ± {100 * summary[f'{key}_std']:.2f}"


def _checkpoint_and_data(args: argparse.Namespace):
    """The checkpoint's model, its metadata, the graph checked against it, the split and the evidence mask.

    The graph is the one the checkpoint was trained on unless ``--dataset`` names another."""
    from gbpn.data.datasets import load_dataset
    from gbpn.experiments.runner import labels_fingerprint
    from gbpn.train.checkpoint import load_checkpoint

    model, meta = load_checkpoint(args.checkpoint)
    source = meta.get("source") or {}
    dataset = args.dataset or source.get("dataset") or meta.get("dataset")
    if dataset is None:
        raise GBPNError(f"{args.checkpoint} does not record its data set: give --dataset")
    data_dir = args.data_dir or source.get("data_dir")
    same = not args.dataset or _same_source(args.dataset, source, meta)
    recorded_sample = meta.get("sample", 0)
    sample = args.sample if args.sample is not None else (recorded_sample if same else 0)
    header = args.header if args.header is not None or args.dataset else source.get("header")
    data = load_dataset(dataset, data_dir, sample=sample, header=header)
    if data.num_features != model.in_channels:
        raise GBPNError(f"the graph has {data.num_features} features per node but the checkpoint expects "
                        f"{model.in_channels}")
    if int(data.y.max()) >= model.num_classes:
        raise GBPNError(f"the graph has {int(data.y.max()) + 1} classes (labels up to {int(data.y.max())}) but the "
                        f"checkpoint knows {model.num_classes}")
    own_graph = same and sample == recorded_sample
    recorded_model = meta.get("model_args") or {}
    trained_nodes = (recorded_model.get("potential_options") or {}).get("num_nodes", data.num_nodes)
    if recorded_model.get("potential") == "linkx" and (not own_graph or data.num_nodes != trained_nodes):
        # W_A has a row per node of the training graph: on another graph (or the same folder since
        # edited) its rows belong to other nodes
        trained_on = source.get("dataset") or meta.get("dataset")
        raise GBPNError("this checkpoint's linkx potential has a weight row per node of the graph it was trained on "
                        f"({trained_on}" + (f", sample {recorded_sample}" if recorded_sample else "") + "), so it "
                        "predicts on that graph, unchanged, only: leave out --dataset and --sample, or train on this graph")
    if not same and bool((data.y >= 0).any()) and int(data.y.max()) + 1 < model.num_classes:
        logger.warning(f"the checkpoint knows {model.num_classes} classes but {dataset}'s labels go up to class "
                       f"{int(data.y.max())}: the predictions can name classes this graph does not have")
    known = args.known if args.known != "auto" else ("train" if meta.get("variant") == "gbpn" else "none")
    masks = _split_of(data, meta, own_graph, known == "train")
    # another graph than the checkpoint's has no training split of its own: one is drawn as in training
    whose = "the checkpoint's split" if same else "a split drawn as in training"
    mask = None
    if known == "train":
        if masks is None:
            raise GBPNError("--known train needs labels in the graph to rebuild the training split (a graph "
                            "without labels: --known none)")
        recorded = meta.get("labels_sha1")
        public = (meta.get("split") or {}).get("kind") == "public"  # read from the data set, not drawn from labels
        if same and sample != recorded_sample:
            raise GBPNError(f"--sample {sample} differs from the checkpoint's sample {recorded_sample}, whose training "
                            "split it would clamp: use --known none or --known labeled, or leave --sample out")
        if same and not public and recorded and recorded != labels_fingerprint(data.y):
            raise GBPNError(f"the labels of {dataset} changed since the checkpoint was trained, so its training split "
                            "cannot be rebuilt: use --known none (features only) or --known labeled (every labelled "
                            "node), or train again")
        mask = masks[0]
        if not same:
            logger.warning(f"{dataset} is not the graph the checkpoint was trained on: --known train clamps the "
                           f"training nodes of {whose} on it ({int(mask.sum())} nodes); --known labeled clamps "
                           "every labelled node")
    elif known == "labeled":
        mask = data.y >= 0
        if not bool(mask.any()):
            logger.warning(f"--known labeled: {dataset} has no labelled node, so nothing is clamped")
        if masks is not None and bool((mask & masks[2]).any()):
            logger.warning(f"--known labeled clamps the labels of {int((mask & masks[2]).sum())} test node(s) of "
                           f"{whose}: scoring this output on them measures nothing (--known train clamps the training split only)")
    return model, meta, data, masks, mask, known


def _split_of(data, meta: dict, own: bool, needed: bool):
    """The checkpoint's split rebuilt on ``data`` (``own``: the graph and sample it was trained on), or on
    another graph without the public split it recorded, one drawn as in training; ``None`` without 3
    labelled nodes, or where the evidence does not need it and it cannot be had."""
    from gbpn.data.splits import random_split, split_from_record

    if int((data.y >= 0).sum()) < 3:
        return None
    record = meta.get("split")
    try:
        if not isinstance(record, dict):
            raise KeyError("split")
        return split_from_record(data, record)
    except (KeyError, TypeError, ValueError) as err:
        if needed:
            raise GBPNError(f"the checkpoint's split record is damaged ({type(err).__name__}: {err}): use --known "
                            "none or --known labeled") from None
    except GBPNError:  # a public split this graph does not have
        if own and needed:
            raise
        if not own:
            return random_split(data.y, seed=int(meta.get("seed", 0) or 0))
    return None


def _same_source(dataset: str, source: dict, meta: dict) -> bool:
    """Whether ``dataset`` (a name or a folder) is the graph the checkpoint records."""
    recorded = source.get("dataset") or meta.get("dataset")
    if recorded is None:
        return False
    if os.path.isdir(os.path.expanduser(dataset)) or os.path.isdir(os.path.expanduser(recorded)):
        return Path(dataset).expanduser().resolve() == Path(recorded).expanduser().resolve()
    return dataset.lower() == recorded.lower()


def _file_in(path: Optional[str], name: str) -> Optional[str]:
    """A file option's value, or ``name`` inside it when it names a folder (an existing one, or one
    written with a trailing slash)."""
    if path and (path.endswith(("/", os.sep)) or os.path.isdir(path)):
        return os.path.join(path, name)
    return path


def _cmd_predict(args: argparse.Namespace) -> int:
    from gbpn.train.config import resolve_device
    from gbpn.train.fit import predict

    partitioner = bool(_given_options(args, ["predict"], ("partitioner",)))
    for flag, given in (("--per-rank", args.per_rank), ("--parts-file", args.parts_file),
                        ("--partitioner", partitioner)):
        if given and rank_and_world()[1] < 2:
            raise GBPNError(f"{flag} is for partitioned inference over the ranks of torchrun (2 or more): launch "
                            "with torchrun, or leave it out")
    model, meta, data, _, mask, known = _checkpoint_and_data(args)
    output = _file_in(args.output, "predictions.csv") or str(Path(args.checkpoint).with_name("predictions.csv"))
    if rank_and_world()[1] > 1:
        return _partitioned_predict(args, model, meta, data, mask, known, output)
    model.to(resolve_device(args.device))
    probs = predict(model, data, mask, num_steps=args.num_steps, node_chunk=args.node_chunk, edge_chunk=args.edge_chunk,
                    message_dtype=torch.bfloat16 if args.half_messages else None).exp().cpu().numpy()
    _write_probabilities(output, probs, meta, model, mask, known)
    return 0


def _write_probabilities(output: str, probs: np.ndarray, meta: dict, model, mask, known: str,
                         nodes: Optional[torch.Tensor] = None) -> None:
    from gbpn.io import write_predictions

    names = meta.get("class_names") or [str(k) for k in range(model.num_classes)]
    if mask is not None and nodes is not None:
        mask = mask.index_select(0, nodes)
    write_predictions(output, probs, names, mask.numpy() if mask is not None else np.zeros(len(probs), dtype=bool),
                      nodes=None if nodes is None else nodes.numpy())
    print(f"wrote class probabilities of {len(probs)} nodes to {output} (evidence: {known})")


def _rank_output(output: str, rank: int, world: int) -> str:
    """A rank's part of ``output``: ``p.csv`` -> ``p.rank0-of-2.csv`` (and ``p`` -> ``p.rank0-of-2.csv``)."""
    path = Path(output)
    return str(path.with_name(f"{path.stem}.rank{rank}-of-{world}{path.suffix or '.csv'}"))


def _partitioned_predict(args: argparse.Namespace, model, meta: dict, data, mask, known: str, output: str) -> int:
    """``gbpn predict`` under torchrun: partitioned BP on the CPU; rank 0 writes the CSV (or, with
    ``--per-rank``, every rank its own part) and a JSON report (partition, seconds per step, bytes
    per step, the CSV files, versions) beside it."""
    from gbpn.distributed.inference import partitioned_beliefs, partitioned_predict
    from gbpn.io import versions, write_json

    if args.device != "cpu":
        raise GBPNError("partitioned inference under torchrun runs on the CPU: use --device cpu")
    kw = dict(num_steps=args.num_steps, message_dtype=torch.bfloat16 if args.half_messages else torch.float32,
              chunk=args.edge_chunk or 1 << 20, partitioner=args.partitioner, node_chunk=args.node_chunk or 1 << 16,
              parts_file=args.parts_file)
    rank, world = rank_and_world()
    if args.per_rank:
        nodes, log_b, report = partitioned_beliefs(model, data, mask, **kw)
        files = [_rank_output(output, q, world) for q in range(world)]
        _write_probabilities(files[rank], log_b.exp().numpy(), meta, model, mask, known, nodes=nodes)
    else:
        log_b, report = partitioned_predict(model, data, mask, **kw)
        files = [output]
        if log_b is not None:
            _write_probabilities(output, log_b.exp().numpy(), meta, model, mask, known)
    if rank == 0:
        write_json(Path(output).with_suffix(".json"),
                   {"checkpoint": str(Path(args.checkpoint).resolve()), "known": known, "num_steps": args.num_steps,
                    "half_messages": args.half_messages, "partitioner": args.partitioner, "files": files, **report,
                    "versions": versions()})
    return 0


def _cmd_coupling(args: argparse.Namespace) -> int:
    from gbpn.experiments.coupling import (
        compare_couplings,
        plot_couplings,
        save_coupling_csv,
    )
    from gbpn.train.checkpoint import load_checkpoint

    model, meta = load_checkpoint(args.checkpoint)
    H = model.bp.coupling.normalized().numpy()
    names = meta.get("class_names") or [str(k) for k in range(model.num_classes)]
    out = Path(args.output or Path(args.checkpoint).parent) / "coupling.png"
    panels = {f"learned ({meta.get('variant', '')})": H}
    true_H = meta.get("true_coupling")
    if true_H is not None:
        true_H = np.asarray(true_H)
        panels = {"true": true_H, **panels}
    # the files first: an unwritable --output fails before anything is printed
    save_coupling_csv(out.with_suffix(".csv"), H, names)
    plot_couplings(panels, out, names, suptitle=f"coupling H: {meta.get('dataset', '')}")
    plot_couplings(panels, out.with_suffix(".svg"), names, suptitle=f"coupling H: {meta.get('dataset', '')}")
    width = max(8, max(len(n) for n in names) + 1)
    print(f"coupling H of {meta.get('dataset', '?')} ({meta.get('variant', '?')}), scaled so mean(log H) = 0:")
    print(" " * width + "".join(f"{n:>{width}}" for n in names))
    for n, row in zip(names, H):
        print(f"{n:>{width}}" + "".join(f"{v:>{width}.3f}" for v in row))
    if true_H is not None:
        cmp = compare_couplings(H, true_H)
        print(f"against the true coupling (scale removed): relative error {cmp['relative_error']:.3f}, "
              f"correlation {cmp['correlation']:.3f}")
    print(f"heatmap saved to {out} (and .svg), values to {out.with_suffix('.csv')}")
    return 0


def _recorded_grid(args: argparse.Namespace, output: Path) -> None:
    """``benchmark --table-only`` without a named grid: take the one recorded in ``output``."""
    from gbpn.io import read_json

    if not (output / "config.json").is_file():
        raise GBPNError(f"{output} holds no benchmark grid (no config.json): give the --output folder of a grid "
                        "that has run, or name it with --preset or --models and --datasets")
    grid = read_json(output / "config.json")
    if not isinstance(grid, dict) or not {"models", "datasets"} <= set(grid):
        raise GBPNError(f"{output / 'config.json'} is not a benchmark grid's (no models and datasets): give the "
                        "--output folder of a gbpn benchmark run")
    given = _given_options(args, ["benchmark"], ("trials", "epochs", "seed", "batch_size", "patience", "metric",
                                                 "dropout"))
    if given:
        raise GBPNError(f"--table-only reads the grid's settings from {output / 'config.json'}, so {', '.join(given)} "
                        "would be ignored: leave them out")
    args.models, args.datasets = args.models or grid["models"], args.datasets or grid["datasets"]
    args.quick = False
    for key in ("trials", "epochs", "seed", "batch_size", "patience", "metric", "dropout"):
        if key in grid:
            setattr(args, key, grid[key])


def _cmd_benchmark(args: argparse.Namespace) -> int:
    from gbpn.experiments.benchmark import run_grid, run_preset

    log = logger.info
    free = ("models", "datasets", "trials", "epochs", "patience", "dropout", "batch_size")
    if args.preset and (given := _given_options(args, ["benchmark"], free)):
        raise GBPNError(f"--preset {args.preset} runs its own grid, so {', '.join(given)} would be ignored: leave "
                        "them out, or name the grid with --models and --datasets instead of a preset")
    if args.quick and (given := _given_options(args, ["benchmark"], ("trials", "epochs"))):
        raise GBPNError(f"--quick runs 2 trials of 100 epochs, so {', '.join(given)} would be ignored: leave "
                        "them out, or drop --quick")
    if args.preset:
        output = args.output or f"runs/benchmark-{args.preset}{'-quick' if args.quick else ''}"
        table = run_preset(args.preset, output, quick=args.quick, seed=args.seed, data_dir=args.data_dir,
                           progress=not args.quiet, log=log, table_only=args.table_only, metric=args.metric,
                           save_predictions=args.save_predictions)
    else:
        output = args.output or "runs/benchmark"
        if args.table_only and not (args.models and args.datasets):
            _recorded_grid(args, Path(output))
        if not args.models or not args.datasets:
            raise GBPNError("give --preset, or both --models and --datasets for a free grid")
        trials, epochs = (2, 100) if args.quick else (args.trials, args.epochs)
        if args.batch_size is not None and args.batch_size < 1:
            raise GBPNError("--batch-size must be positive")
        if args.dropout is not None and not 0 <= args.dropout < 1:
            raise GBPNError(f"--dropout must be in [0, 1), got {args.dropout}")
        table = run_grid(args.models, args.datasets, trials, output, epochs=epochs, seed=args.seed,
                         data_dir=args.data_dir, progress=not args.quiet, log=log, table_only=args.table_only,
                         batch_size=args.batch_size, patience=args.patience, metric=args.metric,
                         save_predictions=args.save_predictions, dropout=args.dropout)
    print(table, end="")
    print(f"rows, results.csv and table.md in {output}")
    return 0


def _cmd_sample_mrf(args: argparse.Namespace) -> int:
    from gbpn.data.mrf import make_synthetic
    from gbpn.io import atomic_write, write_json

    coupling = None
    if args.coupling is not None:
        c = int(round(len(args.coupling) ** 0.5))
        if c * c != len(args.coupling) or not all(0 < v < float("inf") for v in args.coupling):  # NaN fails too
            raise GBPNError("--coupling needs c*c positive finite numbers (the matrix row by row)")
        spread = math.log(max(args.coupling)) - math.log(min(args.coupling))
        if spread > 80:  # what gbpn's float32 BP computes exactly (and what mrf.json can record)
            raise GBPNError(f"--coupling spans a ratio of e^{spread:.0f} between its largest and smallest entries; at "
                            "most e^80 (float32 BP): keep the coupling milder")
        coupling = torch.tensor(args.coupling, dtype=torch.float64).view(c, c)
        want = 2 if args.kind.startswith("ising") else 3
        if c != want or not torch.allclose(coupling, coupling.T):
            raise GBPNError(f"--coupling for {args.kind} must be a symmetric {want}x{want} matrix")
    data = make_synthetic(args.kind, n=args.size, coupling=coupling, num_samples=args.samples, sample=args.sample,
                          burn_in=args.burn_in, thin=args.thin, seed=args.seed, progress=not args.quiet)
    out = Path(args.output)
    und = data.edge_index[:, data.edge_index[0] < data.edge_index[1]].T.numpy()

    def table(arr, fmt, header):
        buf = io.StringIO()
        np.savetxt(buf, arr, fmt=fmt, delimiter=",", header=header, comments="")
        return buf.getvalue()

    atomic_write(out / "edges.csv", lambda fh: fh.write(table(und, "%d", "source,target")))
    atomic_write(out / "features.csv", lambda fh: fh.write(table(data.x.numpy(), "%.6f", "r1,r2")))
    atomic_write(out / "labels.csv", lambda fh: fh.write(table(data.y.numpy(), "%d", "label")))
    atomic_write(out / "label_samples.csv", lambda fh: fh.write(
        table(data.y_samples.T.numpy(), "%d", ",".join(f"sample_{k}" for k in range(args.samples)))))
    write_json(out / "mrf.json", {"kind": args.kind, "size": args.size, "coupling": data.true_H.tolist(),
                                   "samples": args.samples, "sample": args.sample, "burn_in": args.burn_in,
                                   "thin": args.thin, "seed": args.seed})
    print(f"wrote a {args.size}x{args.size} {args.kind} grid ({data.num_nodes} nodes) to {out}")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from gbpn.io import write_json

    if args.analysis == "identifiability":
        from gbpn.experiments.coupling import identifiability

        results = identifiability(args.kinds, args.output, epochs=args.epochs, seed=args.seed)
        write_json(Path(args.output) / "identifiability.json", {**_analysis_record(args), "results": results})
        print(f"figures, identifiability.csv and identifiability.json in {args.output}")
        return 0
    if args.analysis == "degree":
        _check_degree_mode(args)
    if args.analysis == "sampling" or (args.analysis == "degree" and args.fanouts):
        return _cmd_sampling_study(args)
    if args.analysis == "degree" and not args.checkpoint:
        raise GBPNError("gbpn analyze degree needs --checkpoint (confidence by degree) or --fanouts (sub-sampling study)")
    from gbpn.experiments.convergence import (
        convergence,
        node_layout,
        save_convergence,
        steps_to_tolerance,
    )

    model, meta, data, masks, mask, known = _checkpoint_and_data(args)
    if masks is None:
        raise GBPNError(f"the {args.analysis} analysis needs labels to score predictions")
    if args.analysis == "degree":
        from gbpn.experiments.degree import confidence_by_degree, save_degree

        res = confidence_by_degree(model, data, masks[2], mask)
        out = Path(args.output or Path(args.checkpoint).with_name("analysis"))
        save_degree(res, out, title=f"on {data.name} ({meta.get('variant')}), test nodes")
        for i in range(len(res["count"])):
            print(f"degree {res['degree_low'][i]:>4}-{res['degree_high'][i]:<4} n={res['count'][i]:>5}  "
                  f"confidence {res['confidence'][i]:.3f}  accuracy {res['accuracy'][i]:.3f}  "
                  f"log-likelihood {res['log_likelihood'][i]:.3f}")
        write_json(out / "degree.json", {**_analysis_record(args), "evidence": known, "bins": res})
        print(f"wrote degree.png/.svg/.csv/.json to {out}")
        return 0
    result = convergence(model, data, masks, mask, max_steps=args.steps)
    layout, method = (None, "") if args.no_layout else node_layout(data)
    out = Path(args.output or Path(args.checkpoint).with_name("analysis"))
    save_convergence(result, layout, method, out, title=f"on {data.name} ({meta.get('variant')}, evidence: {known})")
    tol_step = steps_to_tolerance(result["step_change_max"])
    per_step = {k: v for k, v in result.items() if k != "settle_step"}  # per node: settle_steps.csv
    write_json(out / "convergence.json", {**_analysis_record(args), "evidence": known,
                                          "steps_to_tolerance_1e-4": tol_step, "per_step": per_step})
    print(f"{data.name}: test accuracy by step {', '.join(f'{100 * a:.1f}' for a in result['test_accuracy'][:8])} ...")
    print(f"largest belief change below 1e-4 after {tol_step} steps" if tol_step is not None
          else f"largest belief change still {result['step_change_max'][-1]:.2e} at step {args.steps}")
    print(f"wrote convergence.png/.svg/.csv/.json and settle_steps.csv to {out}"
          + (f" (layout: {method})" if method else ""))
    return 0


def _analysis_record(args: argparse.Namespace) -> dict:
    """What an analysis's JSON record starts with: the command, its options as used, the library versions."""
    from gbpn.io import versions

    return {"command": f"analyze {args.analysis}", "args": vars(args), "versions": versions()}


def _check_degree_mode(args: argparse.Namespace) -> None:
    """``analyze degree`` is either a trained model's confidence by degree (--checkpoint) or a study
    that trains its own models (--fanouts): options of the other mode are refused, not ignored."""
    if args.checkpoint and args.fanouts:
        raise GBPNError("gbpn analyze degree takes --checkpoint (confidence by degree of a trained model) or "
                        "--fanouts (a sub-sampling study that trains its own models), not both")
    if args.checkpoint:
        given = _given_options(args, ["analyze", "degree"], ("variant", "epochs", "trials", "batch_size", "seed"))
        if given:
            raise GBPNError(f"{', '.join(given)}: only for the --fanouts study, which trains its own models; leave "
                            "out with --checkpoint")
    elif args.fanouts and _given_options(args, ["analyze", "degree"], ("known",)):
        raise GBPNError("--known: only with --checkpoint (the evidence a trained model is read with); the --fanouts "
                        "study conditions on each trial's training labels as it trains")


def _ratio(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "undefined"


def _cmd_sampling_study(args: argparse.Namespace) -> int:
    """``analyze sampling`` and ``analyze degree --fanouts``: studies that train their own models."""
    from gbpn.train.config import TrainConfig
    from gbpn.data.datasets import dataset_name, load_dataset
    from gbpn.experiments import sampling
    from gbpn.io import write_json

    if args.trials < 1 or args.epochs < 1 or args.batch_size < 1:
        raise GBPNError("--trials, --epochs and --batch-size must be positive")
    args.dataset, args.sample = args.dataset or DEFAULT_DATASET, args.sample or 0  # recorded as used
    if "known" in args:  # these studies clamp the training labels for gbpn, none for gbpn-i
        args.known = "train" if args.variant == "gbpn" else "none"
    data = load_dataset(args.dataset, args.data_dir, sample=args.sample, header=args.header)
    name = dataset_name(args.dataset)
    kind = "sampling" if args.analysis == "sampling" else "degree"
    out = Path(args.output or f"runs/{kind}-{name}")
    record = {**_analysis_record(args), "dataset": name}
    if kind == "sampling":
        if args.fanout is None:
            args.fanout = max(1, min(5, sampling.largest_degree(data) - 1))
        if args.fanout < 1 or args.hops < 1:
            raise GBPNError("--fanout and --hops must be positive")
        config = TrainConfig(variant=args.variant, epochs=args.epochs, batch_size=args.batch_size, fanout=args.fanout,
                             num_hops=args.hops, num_steps=args.hops, exp3_gamma=args.exp3_gamma)
        result = sampling.variance_study(data, config, args.trials, args.seed)
        summary = sampling.save_variance_study(result, out, title=f"on {name}")
        write_json(out / "summary.json", {**record, "summary": summary})
        print(f"{name}, fanout {args.fanout}, second half of training, variance summed over nodes (median node): "
              + ", ".join(f"{a}/{b} {_ratio(summary[f'total_{a}_vs_{b}_second_half'])} "
                          f"({_ratio(summary[f'median_{a}_vs_{b}_second_half'])})"
                          for a, b in (("importance", "uniform"), ("importance", "optimal"), ("uniform", "optimal"))))
        if any(not math.isfinite(summary[f"{k}_second_half"]) for k in sampling.RATIOS):
            print("undefined: the denominator had no variance (optimal sampling has none where a node's messages "
                  "all point the same way, as on two-class graphs)")
        n = {"num_trials": args.trials}
        print(f"test accuracy: exp3 {_mean_std({**summary, **n}, 'exp3_test_accuracy')}, "
              f"uniform {_mean_std({**summary, **n}, 'uniform_test_accuracy')}")
        print(f"wrote variance.png/.svg/.csv, sampler_accuracy.csv and summary.json to {out}")
        return 0
    if any(f < 0 for f in args.fanouts):
        raise GBPNError("--fanouts must be non-negative (0 keeps every neighbour)")
    fanouts = [f or None for f in args.fanouts]
    config = TrainConfig(variant=args.variant, epochs=args.epochs, batch_size=args.batch_size)
    rows = sampling.subsampling_study(data, fanouts, config, args.trials, args.seed)
    sampling.save_subsampling_study(rows, out, title=f"on {name}")
    write_json(out / "summary.json", {**record, "rows": rows})
    for r in rows:
        print(f"max neighbours {r['max_neighbours']!s:>4} trial {r['trial']}: " + "  ".join(
            f"{g} ll {r[f'{g}_log_likelihood']:.3f} acc {r[f'{g}_accuracy']:.3f}" for g in ("all", "low30", "high70")))
    print(f"wrote subsampling.png/.svg/.csv and summary.json to {out}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from gbpn.experiments.explain import explain_node, format_explanation
    from gbpn.io import write_json

    model, meta, data, _, mask, _ = _checkpoint_and_data(args)
    ex = explain_node(model, data, args.node, mask, meta.get("class_names"))
    if args.json:  # first: an unwritable path fails before anything is printed
        args.json = _file_in(args.json, f"explain-node{args.node}.json")
        write_json(args.json, ex)
        logger.info(f"wrote the explanation to {args.json}")
    print(format_explanation(ex, args.top))
    return 0


COMMANDS = {"train": _cmd_train, "analyze": _cmd_analyze, "explain": _cmd_explain, "predict": _cmd_predict, "coupling": _cmd_coupling,
            "benchmark": _cmd_benchmark, "sample-mrf": _cmd_sample_mrf}


@contextlib.contextmanager
def _logging_to_stderr(verbose: int, quiet: bool):
    """Messages of the ``gbpn`` loggers to stderr for one command: warnings with -q, info by
    default, debug with -v. The loggers are left as they were afterwards (the library used from
    Python logs through the application's own configuration)."""
    handler = logging.StreamHandler(sys.stderr)  # the stderr of this call (tests swap it)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


DISTRIBUTED_COMMANDS = ("train", "predict")


# seeds go to torch.manual_seed and numpy, which read them modulo 2^32 (or overflow beyond 2^64)
MAX_SEED = 2**32 - 1
# a count beyond this is a typo, not a request (and overflows the int32 of numba's and NumPy's indices)
MAX_COUNT = 2**31 - 1


def _check_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse's types leave: an empty string, a seed outside 0..2^32-1 (or one whose
    trials run past it), a count too large to mean anything."""
    for name, value in vars(args).items():
        flag = "--" + name.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if v == "":
                parser.error(f"argument {flag}: is empty; give a value or leave the option out")
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            if name == "seed":
                last = v + max(getattr(args, "trials", None) or 1, 1) - 1
                if not 0 <= v or last > MAX_SEED:
                    parser.error(f"argument --seed: must lie in 0..{MAX_SEED} with every trial's seed (seed + trial), "
                                 f"got {v}")
            elif abs(v) > MAX_COUNT:
                parser.error(f"argument {flag}: {v} is beyond any size this can run (at most {MAX_COUNT})")


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_values(parser, args)
    args.argv = argv  # what was typed: some checks ask which options were given, whatever their values
    if distributed.launched():
        return _main_distributed(args)
    return _run(args)


def _main_distributed(args: argparse.Namespace) -> int:
    """Under ``torchrun``: join the process group, let only rank 0 speak, leave the group at the end."""
    if args.command not in DISTRIBUTED_COMMANDS:
        with _logging_to_stderr(0, False):
            logger.error(f"gbpn {args.command}: does not run under torchrun (only {' and '.join(DISTRIBUTED_COMMANDS)} "
                         "do); run it as a single process")
        return 2
    if getattr(args, "device", None):
        from gbpn.train.config import resolve_device

        args.device = distributed.local_device(args.device)
        try:
            resolve_device(args.device)  # no CUDA device: say so, not that NCCL is missing
        except GBPNError as err:
            with _logging_to_stderr(0, False):
                logger.error(f"gbpn {args.command}: error: {err}")
            return 2
    try:
        rank, _ = distributed.init_from_env(getattr(args, "device", "cpu"))
    except (RuntimeError, ValueError) as err:
        with _logging_to_stderr(0, False):
            logger.error(f"gbpn {args.command}: could not join the torchrun process group: {err}")
        return 2
    if rank != 0:
        args.quiet = True
    try:
        return _run(args)
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed (CPU or CUDA), not a bug."""
    cuda_oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)  # torch.OutOfMemoryError: 2.5+
    return isinstance(err, (MemoryError, cuda_oom)) or "can't allocate memory" in str(err)


def _run(args: argparse.Namespace) -> int:
    with _logging_to_stderr(args.verbose, args.quiet):
        _set_threads(args)
        logger.debug(f"gbpn {gbpn.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
                     f"{vars(args)}")
        try:
            return COMMANDS[args.command](args)
        except GBPNError as err:
            logger.error(f"gbpn {args.command}: error: {err}")
            return 2
        except KeyboardInterrupt:
            logger.error(f"gbpn {args.command}: interrupted; rerun the same command to resume")
            return 130
        except BrokenPipeError:  # stdout's reader left (`| head`): what it read is what it wanted
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
            return 141
        except Exception as err:  # a bug, not a user error: one line, full trace on request
            if os.environ.get("GBPN_DEBUG"):
                raise
            if _out_of_memory(err):  # sizes asked for beyond the machine: say which options set them
                first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                logger.error(f"gbpn {args.command}: error: out of memory ({first}); lower --hidden, --batch-size "
                             "or --size, or set --edge-chunk / --node-chunk where the command has them")
                return 2
            logger.error(f"gbpn {args.command}: internal error: {type(err).__name__}: {err} "
                         "(set GBPN_DEBUG=1 for the traceback)")
            return 1


if __name__ == "__main__":
    sys.exit(main())
