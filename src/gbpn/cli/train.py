"""``gbpn train``: seeded trials of GBPN / GBPN-I into a run folder."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Mapping

from gbpn.cli.options import POSITIVE, add_config_options, add_data_args, add_option, add_threads, add_wait, given
from gbpn.cli.output import mean_std, one_line
from gbpn.data.names import check_dataset_name
from gbpn.errors import GBPNError
from gbpn.models.encoders.registry import option_users
from gbpn.train.config import OPTIONS, TrainConfig

# what a rerun of a recorded config leaves to its caller: where to write and read, threads, what to keep
RERUN_KEEPS = {"command", "argv", "config", "output", "threads", "data_dir", "header", "save_trials", "quiet",
               "verbose", "wait", "tensorboard"}


def check_rerun(written: Mapping[str, str]) -> None:
    """A recorded run reruns as it was: ``written`` (option name -> how it was written, e.g. its flag) may
    hold only what :data:`RERUN_KEEPS` leaves to the caller; anything else is an error, not silence."""
    flags = [flag for name, flag in written.items() if name not in RERUN_KEEPS]
    if flags:
        raise GBPNError(f"--config reruns the recorded run with its own settings, so {', '.join(flags)} would be "
                        "ignored: leave them out, or train without --config to change them")


def _encoder_rules(potential: str):
    """The options of each encoder options group, applying where ``potential`` is one that reads them."""
    for group, users in option_users().items():
        names = tuple(o.name for o in OPTIONS.values() if o.path[:2] == ("encoder", group))
        what = ", ".join(users[:-1]) + " or " + users[-1] if len(users) > 1 else users[0]
        yield names, potential == "auto" or potential in users, f"--potential {what}"


def check_applicable(config: TrainConfig, written: Mapping[str, str]) -> None:
    """Options that only act with another option or potential, set (``written``: option name -> how it
    was written) without it: an error that says what they need, not silence."""
    rules = ((("fanout", "num_hops", "sampler", "exp3_gamma"), config.batch_size is not None,
              "mini-batch training (--batch-size)"),
             (("tol", "max_steps"), config.backward == "implicit", "--backward implicit"),
             (("max_triangles_per_node",), config.motifs == "triangle", "--motifs triangle"),
             *_encoder_rules(config.potential))
    for names, applies, what in rules:
        set_ = [flag for name, flag in written.items() if name in names]
        if set_ and not applies:
            raise GBPNError(f"{', '.join(set_)}: only for {what}, so {'they' if len(set_) > 1 else 'it'} would "
                            "be ignored; leave it out or add what it needs")


def add_parser(sub, common) -> None:
    t = sub.add_parser("train", parents=common, help="train and evaluate GBPN / GBPN-I over several seeded trials")
    t.add_argument("--config", default=None,
                   help="rerun a recorded run: its config.json (data set, sample, seed, trials and every "
                        "hyper-parameter come from it; of the options below only --output, --threads, "
                        "--data-dir, --header, --save-trials, --tensorboard and --wait may be given with it; "
                        "without --output, a run folder's config.json resumes that folder, any other file runs into "
                        "the default folder)")
    add_data_args(t.add_argument_group("data"))
    add_config_options(t)
    r = t.add_argument_group("run")
    add_option(r, "device")
    r.add_argument("--trials", type=POSITIVE, default=1, help="trials, each with its own seed and split (default: 1)")
    r.add_argument("--seed", type=int, default=0, help="seed of the first trial (default: 0)")
    add_wait(r)
    add_threads(r)
    r.add_argument("--output", default=None,
                   help="run folder (default: runs/<dataset>-<variant>-seed<seed>, with -<potential> after the "
                        "variant for a potential other than mlp and -budget<B> after it for --budget)")
    r.add_argument("--save-trials", action="store_true",
                   help="keep every trial's checkpoint (checkpoints/trial_K.pt) and class probabilities of every "
                        "node (predictions/trial_K.csv), not only the best trial's model.pt")
    r.add_argument("--tensorboard", metavar="DIR", default=None,
                   help="also log every epoch's training loss and training and validation scores to TensorBoard in "
                        "DIR/trial_K as it ends (needs the tensorboard package; the run folder's history.csv holds "
                        "the same numbers in any case)")


def run(args: argparse.Namespace) -> int:
    if args.config is None:  # the options' own checks first: a value out of range answers before PyTorch loads
        config = TrainConfig(**{name: getattr(args, name) for name in OPTIONS if name in args})
        config.validate()
        check_dataset_name(args.dataset)
    from gbpn import api
    from gbpn.data.datasets import dataset_name
    from gbpn.distributed import rank_and_world

    output = args.output
    if args.config is not None:
        check_rerun(given(args, ["train"], vars(args)))
        rec = api.recorded_run(args.config)
        dataset, sample, seed, trials, config = rec.dataset, rec.sample, rec.seed, rec.trials, rec.config
        data_dir = args.data_dir or rec.data_dir
        header = args.header if args.header is not None else rec.header
        if output is None and Path(args.config).name == "config.json":  # the recorded run: resumed where it is
            output = str(Path(args.config).parent)
    else:
        dataset, data_dir, sample, seed, trials = args.dataset, args.data_dir, args.sample, args.seed, args.trials
        header = args.header
        check_applicable(config, given(args, ["train"], OPTIONS))
    result, output = api.train(dataset, config, trials, seed, output, data_dir, sample, header=header,
                               save_trials=args.save_trials, progress=not args.quiet, wait=args.wait,
                               tensorboard=args.tensorboard)
    if rank_and_world()[0] != 0:  # every rank trained; rank 0 reports
        return 0
    s = result["summary"]
    print(f"{dataset_name(dataset)} {config.variant}: test accuracy {mean_std(s, 'test_accuracy')}"
          + (f", illicit-class F1 {mean_std(s, 'test_f1')}" if "test_f1_mean" in s else "")
          + (f", ROC AUC {mean_std(s, 'test_roc_auc')}" if "test_roc_auc_mean" in s else "")
          + (f" (mean ± std over {s['num_trials']} trials)" if s["num_trials"] > 1 else " (1 trial)")
          + _kept(result["trials"], config.potential) + f"; run saved in {one_line(output)}")
    return 0


def _kept(trials, potential: str) -> str:
    """``--potential auto``: which encoder each trial kept (``"; kept sage in 2 trials, gcn in 1"``); with
    ``--budget``, which configuration (``"; kept sage --hidden 256 --lr 0.01 in trials 0, 2"``)."""
    if potential != "auto":
        return ""
    if all("auto_search" in t for t in trials):  # --budget: the configuration each trial's search kept, as flags
        from gbpn.train.search import describe

        kept: dict = {}
        for t in trials:
            kept.setdefault(describe(t["auto_search"]["chosen"]["params"]), []).append(str(t["trial"]))
        return "; kept " + ", ".join(f"{c} in trial{'s' if len(ts) > 1 else ''} {', '.join(ts)}" for c, ts in kept.items())
    names = [t.get("potential", "?") for t in trials]
    counts = sorted(((names.count(n), n) for n in set(names)), key=lambda cn: (-cn[0], cn[1]))
    return "; kept " + ", ".join(f"{n} in {c} trial{'s' if c > 1 else ''}" for c, n in counts)
