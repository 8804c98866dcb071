"""Command-line options: ``gbpn train``'s flags generated from the config dataclasses, the options several
commands share, and which options a command line wrote.

A config option's flag, type, choices, default and help come from its field
(:data:`gbpn.train.config.OPTIONS`): ``--name`` with dashes unless the field's metadata names another
flag, ``--no-name`` for a switch that is on by default, its annotation's type, the metadata's
``choices``, ``metavar`` and ``least`` (a whole number at least this, refused as the command is
parsed). A command that gives an option another meaning (a study's default epochs, a benchmark's
"free grid" help) overrides what differs and keeps the rest.
"""
from __future__ import annotations

import argparse
import functools
import re
from typing import Dict, Iterable, List, Optional, Tuple

from gbpn.train.config import OPTIONS, PARTS

DEFAULT_DATASET = "synth-ising+"
DATA_DIR_HELP = "folder with the raw data (default: $GBPN_DATA, else ~/.cache/gbpn/data)"
THREADS_HELP = "torch CPU threads (default: 1, measured faster than 2 on a busy 2-core machine; see docs/usage.md)"
KNOWN_HELP = ("labels clamped as evidence: none (inductive), train (the checkpoint's training split), labeled "
              "(every node with a label >= 0: test labels leak into the output if you then score it); "
              "auto (default): train for gbpn, none for gbpn-i")
# the argument groups of `gbpn train --help`, one per config part
PART_TITLES = {"model": "model and BP", "encoder": "potential encoder", "optim": "objective and optimiser",
               "sampling": "mini-batch training on sampled trees", "evaluation": "evaluation"}


def count(low: int, high: Optional[int] = None, why: str = ""):
    """An argparse type: a whole number >= ``low`` and, given ``high``, <= ``high`` (``why`` says why that bound),
    a clear usage error before anything runs."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}{why}, got {value}")
        return value
    return parse


POSITIVE, NON_NEGATIVE = count(1), count(0)


def add_option(parser, name: str, **override) -> argparse.Action:
    """The flag of the config option ``name`` (its flat name, e.g. ``num_steps``), its destination that
    name; ``override``: ``add_argument`` keywords that differ for this command (``default``, ``help``,
    ``type``, ``dest``)."""
    opt = OPTIONS[name]
    meta = opt.field.metadata
    default = opt.field.default
    field_name = opt.path[-1].replace("_", "-")
    kw: Dict = {"dest": name, "default": default, "help": meta["help"]}
    if opt.base is bool:
        flags = [meta.get("flag", f"--no-{field_name}" if default else f"--{field_name}")]
        kw["action"] = "store_false" if default else "store_true"
    else:
        flags = [meta.get("flag", f"--{field_name}")] + ([meta["short"]] if "short" in meta else [])
        if "least" in meta:
            kw["type"] = count(meta["least"])
        elif opt.base is not str:
            kw["type"] = opt.base
        for key in ("choices", "metavar"):
            if key in meta:
                kw[key] = list(meta[key]) if key == "choices" else meta[key]
    kw.update(override)
    kw["help"] = kw["help"].replace("%", "%%")  # help texts are plain text; argparse formats them
    return parser.add_argument(*flags, **kw)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """Every option of the parts of :class:`~gbpn.train.config.TrainConfig` that has a flag, a group per part
    (``device``, the config's own field, is the caller's to place)."""
    for part in PARTS:
        group = parser.add_argument_group(PART_TITLES[part])
        for opt in OPTIONS.values():
            if opt.path[0] == part and opt.field.metadata.get("cli", True):
                add_option(group, opt.name)


def add_data_args(p: argparse.ArgumentParser, from_checkpoint: bool = False) -> None:
    default = "the checkpoint's own" if from_checkpoint else f"{DEFAULT_DATASET}, generated here, no download"
    p.add_argument("--dataset", default=None if from_checkpoint else DEFAULT_DATASET,
                   help=f"dataset name or a folder with edges.csv/features.csv[/labels.csv] (default: {default})")
    p.add_argument("--data-dir", default=None,
                   help=DATA_DIR_HELP if not from_checkpoint else "folder with the raw data (default: the "
                        "checkpoint's, else $GBPN_DATA, else ~/.cache/gbpn/data)")
    p.add_argument("--sample", type=int, default=None if from_checkpoint else 0,
                   help="label sample of a synthetic grid, 0..9 (default: " + ("the checkpoint's)" if from_checkpoint else "0)"))
    add_header_args(p)


def add_header_args(p: argparse.ArgumentParser) -> None:
    h = p.add_mutually_exclusive_group()
    h.add_argument("--header", dest="header", action="store_true", default=None,
                   help="your own folder: the first line of every CSV file is a header")
    h.add_argument("--no-header", dest="header", action="store_false",
                   help="your own folder: a first line of numbers is data, not a header (default: told from "
                        "the files)")


def add_checkpoint_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--checkpoint", required=required, default=None, help="model.pt written by gbpn train")
    add_data_args(p, from_checkpoint=True)
    p.add_argument("--known", choices=["auto", "none", "train", "labeled"], default="auto", help=KNOWN_HELP)


def add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help="when another run is writing into the same output folder, "
                                                       "wait for it to finish instead of stopping with an error")


def add_threads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=POSITIVE, default=1, help=THREADS_HELP)


def add_study_args(p: argparse.ArgumentParser, epochs: int, trials: int) -> None:
    """Options of the analyses that train models themselves."""
    add_option(p, "variant", help="gbpn: transductive (conditions on training labels); gbpn-i: inductive "
                                  "(default: gbpn)")
    add_option(p, "epochs", default=epochs, help=f"training epochs per model (default: {epochs})")
    p.add_argument("--trials", type=POSITIVE, default=trials, help=f"seeded trials (default: {trials})")
    add_option(p, "batch_size", default=256, help="target nodes per mini-batch (default: 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first trial (default: 0)")
    add_wait(p)
    add_threads(p)


class Parser(argparse.ArgumentParser):
    """argparse's parser, taking ``-1e-3``, ``-1E5`` and ``-inf`` as values, as it takes ``-0.001``: a
    negative number in scientific notation then reaches the option's range check, which names the
    option and its range, instead of argparse's "expected one argument" (subcommands inherit it)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # the attribute argparse itself reads to tell a negative number from an option
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$",
                                                   re.IGNORECASE)


def common() -> argparse.ArgumentParser:
    """-v/-q, accepted by every command."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="debug messages too")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only, no progress bars or lines")
    return parser


def subparsers(parser: argparse.ArgumentParser) -> Iterable[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from subparsers(sub)


def command_parser(parser: argparse.ArgumentParser, command: Tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser of a subcommand (e.g. ``("analyze", "degree")``) under ``parser``."""
    for word in command:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return parser


def flags(parser: argparse.ArgumentParser) -> Dict[str, str]:
    """dest -> the longest flag of ``parser``'s options."""
    return {a.dest: max(a.option_strings, key=len) for a in parser._actions if a.option_strings}


@functools.lru_cache(maxsize=8)
def _typed(argv: tuple) -> frozenset:
    """The argparse dests of the options written on the command line ``argv``, whatever their values
    (one typed with its default value included): the command parsed with every default suppressed."""
    from gbpn.cli import build_parser

    parser = build_parser()
    for p in subparsers(parser):
        for action in p._actions:
            if action.option_strings:
                action.default = argparse.SUPPRESS
    return frozenset(vars(parser.parse_args(list(argv))))


@functools.lru_cache(maxsize=8)
def _flags(command: tuple) -> dict:
    from gbpn.cli import build_parser

    return flags(command_parser(build_parser(), command))


def given(args: argparse.Namespace, command: List[str], names: Iterable[str]) -> Dict[str, str]:
    """dest -> flag of the options among ``names`` (argparse dests) written on the command line of
    ``command`` (e.g. ``["analyze", "degree"]``), to any value, in the order of their dests."""
    flag, typed = _flags(tuple(command)), _typed(tuple(args.argv))
    return {k: flag.get(k, k) for k in sorted(names) if k in typed}
