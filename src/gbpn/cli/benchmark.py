"""``gbpn benchmark``: a grid of models x data sets x trials, resumable, with a Markdown table."""
from __future__ import annotations

import argparse
import hashlib
import logging
import re
from pathlib import Path

from gbpn.cli.options import DATA_DIR_HELP, POSITIVE, add_option, add_threads, given
from gbpn.cli.output import one_line
from gbpn.errors import GBPNError

logger = logging.getLogger("gbpn")
# the options of a free grid that --table-only reads from the grid's config.json
# the options that make a free grid another grid (a folder holds one): in its default folder's name
GRID_NAME_OPTIONS = ("trials", "epochs", "seed", "batch_size", "patience", "metric", "dropout", "budget")
GRID_OPTIONS = ("trials", "epochs", "seed", "batch_size", "patience", "metric", "dropout", "budget")


def add_parser(sub, common) -> None:
    b = sub.add_parser("benchmark", parents=common, help="grid of models x datasets x trials, resumable, with a Markdown table")
    b.add_argument("--preset", choices=["table2", "table3", "heterophily", "motifs", "motifs-real"], default=None,
                   help="the paper's Table 2 (synthetic) or Table 3 (real) grid, or heterophilous graphs; motifs: "
                        "pairwise against triangle GBPN on the triangle MRF (with BP on the true factors), "
                        "motifs-real: the same on real graphs")
    b.add_argument("--quick", action="store_true",
                   help="smoke run: 2 trials of 100 epochs, without gbpn:auto (table2: the 4 reference grids "
                        "only); docs/usage.md (gbpn benchmark) says what it costs")
    b.add_argument("--models", nargs="+", default=None,
                   help="free grid: models (gbpn gbpn-i mlp gcn sage gat gmnn dagnn lp cs; mini-batch: sage-sampled "
                        "gat-sampled cluster-gcn); a GBPN per potential encoder as gbpn:<potential> or "
                        "gbpn-i:<potential> with mlp, sign, sign-mixed, gcn, gcn-mixed, sage, gat, gat-mixed, "
                        "classic-gcn, classic-sage, classic-gat, resnet, res-gcn, res-sage, res-gat, res-gat-sep, "
                        "res-gt, res-gt-sep, dagnn, linkx or auto; with triangle factors gbpn-triangle, "
                        "gbpn-i-triangle (gbpn-triangleN: at most N triangles per node); BP with a synthetic MRF's "
                        "true factors: exact-bp, exact-bp-i; models as published: resnet:published, gcn:published, "
                        "sage:published, gat:published, gat-sep:published, gt:published, gt-sep:published (Platonov "
                        "et al.: depth 1-5 picked on validation, 1000 steps each), gcn:classic, sage:classic, "
                        "gat:classic (Luo et al.'s setting for the data set); see docs/benchmarks.md")
    b.add_argument("--datasets", nargs="+", default=None, help="free grid: datasets")
    b.add_argument("--budget", type=float, default=2.0, metavar="B",
                   help="free grid: plain runs of the configuration kept that each :tuned model's search "
                        "spends, at counted costs (a run counts --epochs, or 2 x --patience where fewer): gbpn:tuned "
                        "(GBPN, --potential auto --budget B), gcn:tuned, gcn-sep:tuned, sage:tuned, gat:tuned, "
                        "gat-sep:tuned (one of whose runs trains the untuned model, kept unless the search beats it "
                        "on validation) (default: 2)")
    b.add_argument("--trials", type=POSITIVE, default=10, help="free grid: trials per cell (default: 10)")
    add_option(b, "epochs", type=POSITIVE, help="free grid: training steps (default: 500)")
    add_option(b, "patience", type=POSITIVE, help="free grid: stop a run after this many epochs without a better "
                                                  "validation score (of --metric)")
    b.add_argument("--seed", type=int, default=0, help="seed of trial 0 (default: 0)")
    add_option(b, "dropout", help="free grid: dropout of every model (default: the paper's rule by features per "
                                  "training node; the heterophily preset uses 0.1)")
    add_option(b, "batch_size", help="free grid, large graphs: GBPN on sampled trees (T=2, d=5) and the mini-batch "
                                     "baselines with this many target nodes per batch")
    add_option(b, "metric", help="model selection on validation for GBPN and the full-batch baselines (LP and C&S: "
                                 "their alphas), reported beside accuracy; auto: roc_auc for binary labels with a "
                                 "minority class under 30% (of trial 0's training and validation labels), accuracy "
                                 "otherwise (default: auto)")
    b.add_argument("--save-predictions", action="store_true",
                   help="also write every run's class probabilities on every node (predictions/<dataset>__<model>"
                        "__<trial>.csv) and each GBPN run's checkpoint (checkpoints/...pt); not for the mini-batch "
                        "baselines")
    b.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    b.add_argument("--skip-missing", action="store_true",
                   help="run the grid without the data sets whose files are absent (each named in a warning); "
                        "by default an absent data set stops the grid before it starts")
    add_option(b, "device", help="where GBPN and the :tuned, :published and :classic models train: cpu, cuda, "
                                 "cuda:N or auto (CUDA when available); the other baselines train on the CPU "
                                 "(default: cpu)")
    add_threads(b)
    b.add_argument("--output", default=None,
                   help="output folder (default: runs/benchmark-<preset>, with -quick for --quick; a free grid: "
                        "runs/benchmark-<models>-on-<datasets>, with the options that differ from their defaults, "
                        "e.g. runs/benchmark-gbpn+gcn-on-cora-epochs100)")
    b.add_argument("--table-only", action="store_true",
                   help="rebuild results.csv and table.md from the finished runs in --output, training nothing; "
                        "the grid (models, data sets, trials, options) is read from its config.json unless "
                        "--preset or --models and --datasets name it")


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
    typed = given(args, ["benchmark"], GRID_OPTIONS)
    if typed:
        raise GBPNError(f"--table-only reads the grid's settings from {output / 'config.json'}, so "
                        f"{', '.join(typed.values())} would be ignored: leave them out")
    args.models, args.datasets = args.models or grid["models"], args.datasets or grid["datasets"]
    args.quick = False
    for key in GRID_OPTIONS:
        if key in grid:
            setattr(args, key, grid[key])


def default_output(args: argparse.Namespace) -> str:
    """A free grid's folder, named from what it runs (as ``gbpn train`` names its runs): its models and
    data sets, then every option of a grid's identity given another value than its default, so that two
    grids with other settings never share a folder (a grid refuses a folder holding another's); trials too,
    so that the name says what the grid holds (more trials extend a grid in place given its ``--output``).
    Names beyond 120 characters end in a digest."""
    if not args.models or not args.datasets:
        return "runs/benchmark"  # --table-only without a grid: the folder it reads must be named anyway
    from gbpn.cli import build_parser
    from gbpn.cli.options import command_parser
    from gbpn.data.datasets import dataset_name

    defaults = command_parser(build_parser(), ("benchmark",))
    safe = lambda v: re.sub(r"[^A-Za-z0-9.+-]+", "_", str(v))  # noqa: E731  (gbpn:sign -> gbpn_sign)
    name = f"benchmark-{'+'.join(map(safe, args.models))}-on-{'+'.join(safe(dataset_name(d)) for d in args.datasets)}"
    for key in GRID_NAME_OPTIONS:
        value = getattr(args, key, None)
        if args.quick and key == "epochs":  # --quick sets it
            continue
        if value != defaults.get_default(key):
            name += f"-{key.replace('_', '')}{safe(value)}"
    if args.quick:
        name += "-quick"
    if len(name) > 120:
        name = f"{name[:100]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
    return f"runs/{name}"


def run(args: argparse.Namespace) -> int:
    from gbpn.experiments.benchmark import Grid, run_grid, run_preset

    log = logger.info
    free = ("models", "datasets", "trials", "epochs", "patience", "dropout", "batch_size", "budget")
    if args.preset and (typed := given(args, ["benchmark"], free)):
        raise GBPNError(f"--preset {args.preset} runs its own grid, so {', '.join(typed.values())} would be ignored: "
                        "leave them out, or name the grid with --models and --datasets instead of a preset")
    if args.quick and (typed := given(args, ["benchmark"], ("trials", "epochs"))):
        raise GBPNError(f"--quick runs 2 trials of 100 epochs, so {', '.join(typed.values())} would be ignored: leave "
                        "them out, or drop --quick")
    if args.preset:
        output = args.output or f"runs/benchmark-{args.preset}{'-quick' if args.quick else ''}"
        table = run_preset(args.preset, output, quick=args.quick, seed=args.seed, data_dir=args.data_dir,
                           progress=not args.quiet, log=log, table_only=args.table_only, metric=args.metric,
                           skip_missing=args.skip_missing,
                           save_predictions=args.save_predictions, device=args.device)
    else:
        output = args.output or default_output(args)
        if args.table_only and not (args.models and args.datasets):
            _recorded_grid(args, Path(output))
        if not args.models or not args.datasets:
            raise GBPNError("give --preset, or both --models and --datasets for a free grid")
        trials, epochs = (2, 100) if args.quick else (args.trials, args.epochs)
        if args.batch_size is not None and args.batch_size < 1:
            raise GBPNError("--batch-size must be positive")
        if args.dropout is not None and not 0 <= args.dropout < 1:
            raise GBPNError(f"--dropout must be in [0, 1), got {args.dropout}")
        grid = Grid(args.models, args.datasets, trials, output, epochs=epochs, seed=args.seed,
                    batch_size=args.batch_size, patience=args.patience, metric=args.metric, dropout=args.dropout,
                    budget=args.budget, device=args.device, data_dir=args.data_dir, skip_missing=args.skip_missing,
                    save_predictions=args.save_predictions)
        table = run_grid(grid, progress=not args.quiet, log=log, table_only=args.table_only)
    print(table, end="")
    print(f"rows, results.csv and table.md in {one_line(output)}")
    return 0
