"""``gbpn analyze``: figures (PNG, SVG) and the numbers behind them (CSV) for a trained model, and the
studies that train their own (sampling, degree --fanouts, identifiability)."""
from __future__ import annotations

import argparse
import contextlib
import math
import shutil
from pathlib import Path
from typing import Callable

from gbpn.cli.options import (
    DEFAULT_DATASET,
    KNOWN_HELP,
    POSITIVE,
    add_checkpoint_args,
    add_data_args,
    add_header_args,
    add_option,
    add_study_args,
    add_threads,
    add_wait,
    count,
    given,
)
from gbpn.cli.output import locked, mean_std, ratio
from gbpn.cli.predict import loaded
from gbpn.errors import GBPNError

KINDS = ["ising+", "ising-", "mrf+", "mrf-"]
# `analyze convergence --steps`: each step continues from the last one's messages (T steps in all), and
# the study keeps T + 1 beliefs [N, c] in memory
MAX_STUDY_STEPS = 10_000


def add_parser(sub, common) -> None:
    a = sub.add_parser("analyze",
                       help="figures (PNG, SVG) and the numbers behind them (CSV) for a trained model; "
                            "--output is always a folder")
    asub = a.add_subparsers(dest="analysis", required=True)
    conv = asub.add_parser("convergence", parents=common,
                           help="residual and accuracy per BP step; when each node's prediction settles")
    add_checkpoint_args(conv)
    conv.add_argument("--steps", "-K", dest="num_steps", metavar="K",
                      type=count(1, MAX_STUDY_STEPS, " (the study keeps every step's beliefs in memory)"),
                      default=20, help=f"BP steps T to run (default: 20, at most {MAX_STUDY_STEPS})")
    conv.add_argument("--no-layout", action="store_true", help="skip the 2-D node layout (the slow part)")
    add_wait(conv)
    add_threads(conv)
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
    add_header_args(ad)
    ad.add_argument("--known", choices=["auto", "none", "train", "labeled"], default="auto", help=KNOWN_HELP)
    ad.add_argument("--fanouts", type=int, nargs="+", default=None,
                    help="maximum sampled neighbours to compare, 0 for all (e.g. 1 2 5 10 20 0)")
    add_study_args(ad, epochs=100, trials=3)
    ad.add_argument("--output", default=None, help="folder (default: analysis/ beside the checkpoint, "
                                                   "or runs/degree-<dataset> with --fanouts)")
    asa = asub.add_parser("sampling", parents=common,
                          help="Exp3 importance sampling against uniform and optimal sampling: "
                               "variance ratios per epoch and accuracy (paper appendix B, Figure 7)")
    add_data_args(asa)
    add_study_args(asa, epochs=100, trials=3)
    add_option(asa, "fanout", default=None, help="neighbours drawn per tree node (default: 5, or one less than the "
                                                 "largest degree where that is smaller, so that some node is sampled)")
    add_option(asa, "num_hops", dest="hops", default=2, help="tree depth (default: 2)")
    add_option(asa, "exp3_gamma", help="share of uniform exploration (default: 0.05)")
    asa.add_argument("--output", default=None, help="folder (default: runs/sampling-<dataset>)")
    ai = asub.add_parser("identifiability", parents=common,
                         help="learn H on grids sampled with a known H and compare (Figure 3)")
    ai.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS,
                    help="grid kinds to sample and learn (default: ising+ ising- mrf+ mrf-)")
    add_option(ai, "epochs", help="training epochs per grid (default: 500)")
    ai.add_argument("--seed", type=int, default=0,
                    help="seed of the split and the training; the grids are the fixed synth-<kind> data sets "
                         "(default: 0)")
    add_wait(ai)
    add_threads(ai)
    ai.add_argument("--output", default="runs/identifiability", help="folder (default: runs/identifiability)")


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:  # the output folder's lock, from where the analysis knows it to the end
        return _analysis(args, lambda out: stack.enter_context(locked(out, args.wait)))


def _analysis(args: argparse.Namespace, hold: Callable[[Path], None]) -> int:
    from gbpn.io import write_json

    if args.analysis == "identifiability":
        from gbpn.experiments.coupling import identifiability

        hold(Path(args.output))
        results = identifiability(args.kinds, args.output, epochs=args.epochs, seed=args.seed,
                                  progress=not args.quiet)
        write_json(Path(args.output) / "identifiability.json", {**_record(args), "results": results})
        print(f"figures, identifiability.csv and identifiability.json in {args.output}")
        return 0
    if args.analysis == "degree":
        _check_degree_mode(args)
    if args.analysis == "sampling" or (args.analysis == "degree" and args.fanouts):
        return _sampling_study(args, hold)
    if args.analysis == "degree" and not args.checkpoint:
        raise GBPNError("gbpn analyze degree needs --checkpoint (confidence by degree) or --fanouts (sub-sampling study)")
    from gbpn.experiments.convergence import convergence, node_layout, save_convergence, steps_to_tolerance

    run_ = loaded(args)
    model, meta, data, masks, mask, known = run_.model, run_.meta, run_.data, run_.masks, run_.mask, run_.known
    if masks is None:
        raise GBPNError(f"the {args.analysis} analysis needs labels to score predictions")
    if args.analysis == "degree":
        from gbpn.experiments.degree import confidence_by_degree, save_degree

        res = confidence_by_degree(model, data, masks[2], mask)
        out = Path(args.output or Path(args.checkpoint).with_name("analysis"))
        hold(out)
        save_degree(res, out, title=f"on {data.name} ({meta.get('variant')}), test nodes")
        for i in range(len(res["count"])):
            print(f"degree {res['degree_low'][i]:>4}-{res['degree_high'][i]:<4} n={res['count'][i]:>5}  "
                  f"confidence {res['confidence'][i]:.3f}  accuracy {100 * res['accuracy'][i]:.1f}%  "
                  f"log-likelihood {res['log_likelihood'][i]:.3f}")
        write_json(out / "degree.json", {**_record(args), "evidence": known, "bins": res})
        print(f"wrote degree.png/.svg/.csv/.json to {out}")
        return 0
    result = convergence(model, data, masks, mask, num_steps=args.num_steps)
    layout, method = (None, "") if args.no_layout else node_layout(data)
    out = Path(args.output or Path(args.checkpoint).with_name("analysis"))
    hold(out)
    save_convergence(result, layout, method, out, title=f"on {data.name} ({meta.get('variant')}, evidence: {known})")
    tol_step = steps_to_tolerance(result["step_change_max"])
    per_step = {k: v for k, v in result.items() if k != "settle_step"}  # per node: settle_steps.csv
    write_json(out / "convergence.json", {**_record(args), "evidence": known,
                                          "steps_to_tolerance_1e-4": tol_step, "per_step": per_step})
    print(f"{data.name}: test accuracy by step {', '.join(f'{100 * a:.1f}' for a in result['test_accuracy'][:8])} ...")
    print(f"largest belief change below 1e-4 after {tol_step} steps" if tol_step is not None
          else f"largest belief change still {result['step_change_max'][-1]:.2e} at step {args.num_steps}")
    print(f"wrote convergence.png/.svg/.csv/.json and settle_steps.csv to {out}"
          + (f" (layout: {method})" if method else ""))
    return 0


def _record(args: argparse.Namespace) -> dict:
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
        typed = given(args, ["analyze", "degree"], ("variant", "epochs", "trials", "batch_size", "seed"))
        if typed:
            raise GBPNError(f"{', '.join(typed.values())}: only for the --fanouts study, which trains its own "
                            "models; leave out with --checkpoint")
    elif args.fanouts and given(args, ["analyze", "degree"], ("known",)):
        raise GBPNError("--known: only with --checkpoint (the evidence a trained model is read with); the --fanouts "
                        "study conditions on each trial's training labels as it trains")


def _sampling_study(args: argparse.Namespace, hold: Callable[[Path], None]) -> int:
    """``analyze sampling`` and ``analyze degree --fanouts``: studies that train their own models."""
    from gbpn.data.datasets import dataset_name, load_dataset
    from gbpn.experiments import sampling
    from gbpn.io import write_json
    from gbpn.train.config import TrainConfig

    if args.trials < 1 or args.epochs < 1 or args.batch_size < 1:
        raise GBPNError("--trials, --epochs and --batch-size must be positive")
    args.dataset, args.sample = args.dataset or DEFAULT_DATASET, args.sample or 0  # recorded as used
    if "known" in args:  # these studies clamp the training labels for gbpn, none for gbpn-i
        args.known = "train" if args.variant == "gbpn" else "none"
    data = load_dataset(args.dataset, args.data_dir, sample=args.sample, header=args.header)
    name = dataset_name(args.dataset)
    kind = "sampling" if args.analysis == "sampling" else "degree"
    out = Path(args.output or f"runs/{kind}-{name}")
    hold(out)
    record = {**_record(args), "dataset": name}
    if kind == "sampling":
        if args.fanout is None:
            args.fanout = max(1, min(5, sampling.largest_degree(data) - 1))
        if args.fanout < 1 or args.hops < 1:
            raise GBPNError("--fanout and --hops must be positive")
        config = TrainConfig(variant=args.variant, epochs=args.epochs, batch_size=args.batch_size, fanout=args.fanout,
                             num_hops=args.hops, num_steps=args.hops, exp3_gamma=args.exp3_gamma)
        result = sampling.variance_study(data, config, args.trials, args.seed, progress=not args.quiet,
                                         keep=out / "units")  # an interrupted study resumes at its next training
        summary = sampling.save_variance_study(result, out, title=f"on {name}")
        shutil.rmtree(out / "units", ignore_errors=True)
        write_json(out / "summary.json", {**record, "summary": summary})
        print(f"{name}, fanout {args.fanout}, second half of training, variance summed over nodes (median node): "
              + ", ".join(f"{a}/{b} {ratio(summary[f'total_{a}_vs_{b}_second_half'])} "
                          f"({ratio(summary[f'median_{a}_vs_{b}_second_half'])})"
                          for a, b in (("importance", "uniform"), ("importance", "optimal"), ("uniform", "optimal"))))
        if any(not math.isfinite(summary[f"{k}_second_half"]) for k in sampling.RATIOS):
            print("undefined: the denominator had no variance (optimal sampling has none where a node's messages "
                  "all point the same way, as on two-class graphs)")
        n = {"num_trials": args.trials}
        print(f"test accuracy: exp3 {mean_std({**summary, **n}, 'exp3_test_accuracy')}, "
              f"uniform {mean_std({**summary, **n}, 'uniform_test_accuracy')}")
        print(f"wrote variance.png/.svg/.csv, sampler_accuracy.csv and summary.json to {out}")
        return 0
    if any(f < 0 for f in args.fanouts):
        raise GBPNError("--fanouts must be non-negative (0 keeps every neighbour)")
    fanouts = [f or None for f in args.fanouts]
    config = TrainConfig(variant=args.variant, epochs=args.epochs, batch_size=args.batch_size)
    rows = sampling.subsampling_study(data, fanouts, config, args.trials, args.seed, progress=not args.quiet,
                                      keep=out / "units")  # an interrupted study resumes at its next row
    sampling.save_subsampling_study(rows, out, title=f"on {name}")
    shutil.rmtree(out / "units", ignore_errors=True)
    write_json(out / "summary.json", {**record, "rows": rows})
    for r in rows:
        print(f"max neighbours {r['max_neighbours']!s:>4} trial {r['trial']}: " + "  ".join(
            f"{g} ll {r[f'{g}_log_likelihood']:.3f} acc {100 * r[f'{g}_accuracy']:.1f}%" for g in ("all", "low30", "high70")))
    print(f"wrote subsampling.png/.svg/.csv and summary.json to {out}")
    return 0
