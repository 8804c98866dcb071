"""The ``gbpn`` command line: a thin layer over :mod:`gbpn.api` and the experiments.

One module per command (``train``, ``predict``, ``benchmark``, ``sample-mrf``, ``analyze``, ``explain``,
``coupling``, ``plot``), each with ``add_parser(sub, common)`` and ``run(args)``; :mod:`gbpn.cli.options` generates
the flags of config options from their dataclass fields. This module builds the parser, runs a command
with its logging, threads and error handling, and joins the process group under ``torchrun``.

The parser loads without PyTorch or PyG (seconds to import): ``--help`` and usage errors answer at
once, and a command imports what it runs only once its arguments are known.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import warnings
from typing import List, Optional

from gbpn._version import __version__
from gbpn.cli import analyze, benchmark, coupling, explain, plot, predict, sample_mrf, threads, train
from gbpn.cli.options import Parser, command_parser, common, flags
from gbpn.cli.output import one_line
from gbpn.cli.predict import rank_output as _rank_output  # noqa: F401  (tests import it from here)
from gbpn.errors import GBPNError
from gbpn.lazy import defer_import
from gbpn.train.config import MAX_COUNT, MAX_SEED

__all__ = ["COMMANDS", "build_parser", "main"]
logger = logging.getLogger("gbpn")

# command -> its module, in the order of `gbpn --help`
COMMANDS = {"train": train, "predict": predict, "benchmark": benchmark, "sample-mrf": sample_mrf, "analyze": analyze,
            "explain": explain, "coupling": coupling, "plot": plot}
DISTRIBUTED_COMMANDS = ("train", "predict")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gbpn", description="Graph Belief Propagation Networks for node classification.",
                                     epilog="Progress: bars on a terminal; in a file or a pipe, a line per finished "
                                            "trial, run or study point with the time elapsed and left. Messages go to "
                                            "stderr through logging, results to stdout.")
    parser.add_argument("--version", action="version", version=f"gbpn {__version__}")
    parents = [common()]
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub, parents)
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
    if note := threads.busy_note(args.threads, cap):  # the CPUs exist, but other work holds them
        logger.warning(note)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(args.threads)
    else:  # PyTorch takes its thread count from here when the command loads it (not before: it takes seconds)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)


class _OneLine(logging.Formatter):
    """A message is one line: a newline in a path it names is written ``\\n`` (a -v traceback keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))


@contextlib.contextmanager
def _logging_to_stderr(verbose: int, quiet: bool):
    """Messages of the ``gbpn`` loggers to stderr for one command: warnings with -q, info by
    default, debug with -v. The loggers are left as they were afterwards (the library used from
    Python logs through the application's own configuration)."""
    handler = logging.StreamHandler(sys.stderr)  # the stderr of this call (tests swap it)
    handler.setFormatter(_OneLine("%(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    with warnings.catch_warnings():
        warnings.showwarning = _warning_to_log
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(saved[0])
            logger.propagate = saved[1]


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _warning_to_log(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning during a command: gbpn's own (a setting it ignores, a kernel it cannot use) is
    one line of the log; a dependency's (NumPy, PyTorch, PyG) is for -v only, never a raw warning a
    user cannot act on."""
    if os.path.abspath(filename).startswith(_PACKAGE + os.sep):
        logger.warning(f"warning: {message}")
    else:
        logger.debug(f"{category.__name__} from {filename}:{lineno}: {message}")


def _check_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse's types leave: an empty string, a seed outside 0..2^32-1 (or one whose
    trials run past it), a count too large to mean anything."""
    words = (args.command,) + ((args.analysis,) if getattr(args, "analysis", None) else ())
    parser = command_parser(parser, words)  # its usage, not the top-level one, comes with the error
    flag_of = flags(parser)
    for name, value in vars(args).items():
        flag = flag_of.get(name, "--" + name.replace("_", "-"))
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
    defer_import("torch._dynamo")  # PyG imports it (seconds); a command loads it only where something reads it
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started by torchrun (gbpn.distributed.launched, without torch)
        return _main_distributed(args)
    return _run(args)


def _main_distributed(args: argparse.Namespace) -> int:
    """Under ``torchrun``: join the process group, let only rank 0 speak, leave the group at the end."""
    from gbpn import distributed

    if args.command not in DISTRIBUTED_COMMANDS:
        with _logging_to_stderr(0, False):
            return _clear_error(f"gbpn {args.command}: does not run under torchrun (only "
                                f"{' and '.join(DISTRIBUTED_COMMANDS)} do); run it as a single process")
    if getattr(args, "device", None):
        from gbpn.train.config import resolve_device

        args.device = distributed.local_device(args.device)
        try:
            resolve_device(args.device)  # no CUDA device: say so, not that NCCL is missing
        except GBPNError as err:
            with _logging_to_stderr(0, False):
                return _clear_error(f"gbpn {args.command}: error: {err}")
    try:
        rank, _ = distributed.init_from_env(getattr(args, "device", "cpu"))
    except (RuntimeError, ValueError) as err:
        with _logging_to_stderr(0, False):
            return _clear_error(f"gbpn {args.command}: could not join the torchrun process group: {err}")
    if rank != 0:
        args.quiet = True
    code = 1
    try:
        code = _run(args)
        return code
    finally:
        import torch.distributed as dist

        if code == 0:  # leave together: no rank closes its connections while a peer still sends or receives on them
            try:
                dist.barrier()
            except RuntimeError:  # a peer failed and left; its own message says why
                pass
        dist.destroy_process_group()


def _clear_error(message: str) -> int:
    """A user's error: its one line, and exit code 2. Under ``torchrun`` the ranks run the same checks on the same
    arguments and data, so rank 0 alone says it (the others with -v); every rank also leaves it in the error file
    torchrun gives it, whose message torchrun's failure summary shows for the rank in place of a pointer to its docs,
    so that an error of one rank alone reaches the user too. (torchrun itself exits 1 whatever its ranks' codes.)"""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        with contextlib.suppress(OSError), open(error_file, "w") as fh:
            line = one_line(message)  # as torch's own ErrorHandler.record_exception writes it, the line for a traceback
            json.dump({"message": {"message": line, "extraInfo": {"py_callstack": line,
                                                                  "timestamp": str(int(time.time()))}}}, fh)
    if int(os.environ.get("RANK", "0")) == 0:
        logger.error(message)
    else:
        logger.debug(message)
    return 2


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed (CPU or CUDA), not a bug."""
    import torch

    cuda_oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)  # torch.OutOfMemoryError: 2.5+
    return isinstance(err, (MemoryError, cuda_oom)) or "can't allocate memory" in str(err)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``kill``, systemd, Slurm and Kubernetes send) raised as an interrupt, so that a run stops
    as at Ctrl-C: its lock released, its finished trials kept, resumed by the same command."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    with _logging_to_stderr(args.verbose, args.quiet), _sigterm_as_interrupt():
        _set_threads(args)
        if args.verbose:  # PyTorch loads here only when asked: a command's own checks answer before it does
            import torch

            logger.debug(f"gbpn {__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
                         f"{vars(args)}")
        try:
            return COMMANDS[args.command].run(args)
        except GBPNError as err:
            return _clear_error(f"gbpn {args.command}: error: {err}")
        except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM: 128 + the signal's number, as a shell reports it
            terminated = isinstance(err, Terminated)
            how = "terminated (SIGTERM)" if terminated else "interrupted"
            if terminated and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun stops the others when a rank stops
                how = "terminated (SIGTERM: torchrun stops every rank once one stops; its error is in torchrun's summary)"
            logger.error(f"gbpn {args.command}: {how}; rerun the same command to resume")
            return 143 if terminated else 130
        except BrokenPipeError:  # stdout's reader left (`| head`): what it read is what it wanted
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
            return 141
        except Exception as err:  # a bug, not a user error: one line, full trace on request
            if os.environ.get("GBPN_DEBUG"):
                raise
            if _out_of_memory(err):  # sizes asked for beyond the machine: say which options set them
                first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                return _clear_error(f"gbpn {args.command}: error: out of memory ({first}); lower --hidden, "
                                    "--batch-size or --size, or set --edge-chunk / --node-chunk where the command has them")
            logger.error(f"gbpn {args.command}: internal error: {type(err).__name__}: {err} "
                         "(set GBPN_DEBUG=1 for the traceback)")
            return 1
