"""A property test over the command line (issue 62): random option values (huge, tiny, negative, NaN, inf,
text) for ``train``, ``benchmark``, ``predict``, ``coupling`` and ``analyze``, each run in-process through
:func:`gbpn.cli.main` on the generated default data set. Every run either succeeds or exits 2 with its error
as the last and only error line (argparse's usage lines before a usage error), no traceback and no "internal
error"; a run that fails leaves its folder as it found it; and none runs past a time bound.

A value within an option's bounds that sets how much work a run does (``--epochs 2000000000`` is a valid
request for a long run) is tamed to a small one (a chunk or batch size to a large one): what is tested is
how values are refused, not how long valid work takes.
"""
import os
import signal
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gbpn.cli import main
from gbpn.train.config import MAX_COUNT

EXAMPLES = 30  # runs per command
BOUND_S = 60  # one run's time bound: the slowest valid run here takes a few seconds

NUMBERS = ["0", "1", "2", "-1", "-0", "-1e-3", "1e-300", "5e-324", "1e300", "1e400", "-1e400", "nan", "-nan", "NaN",
           "inf", "-inf", "Infinity", "99999999999", str(MAX_COUNT), str(MAX_COUNT + 1), "-99999999999", "0.5", "1.5",
           "1e5", "0x10", "1_000", "2.0", " 3", "1e2"]
TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_.:+=@ ", max_size=8)
# numbers four times in five: most reach the options' own range checks, not only argparse's type check
VALUE = st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 3).map(str), st.integers(-2**70, 2**70).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr), TEXT)


def _count(text):
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 1 <= value <= MAX_COUNT else None


def work(most):
    """A count that sets the work: a valid one above ``most`` becomes ``most``."""
    return lambda v: str(most) if (_count(v) or 0) > most else v


def chunk(least):
    """A chunk or batch size: a valid one below ``least`` becomes ``least`` (chunks of 1 are valid and slow)."""
    return lambda v: str(least) if _count(v) is not None and _count(v) < least else v


# a valid thread count above 1 becomes 1: on a busy machine two threads can make a run 10x slower (sampling the
# synthetic grid in one took 70 s beside another job), which is the machine's state, not the option's check
THREADS = work(1)


def choices(*names):
    return st.one_of(st.sampled_from(names), TEXT)


def plain(v):
    return v


FLOAT = VALUE
# option -> (its values, what tames a valid one)
TRAIN = {
    "--epochs": (VALUE, work(2)), "--hidden": (VALUE, work(16)), "--trials": (VALUE, work(2)), "--steps": (VALUE, work(5)),
    "--mlp-layers": (VALUE, work(3)), "--max-steps": (VALUE, work(20)), "--fanout": (VALUE, work(5)),
    "--hops": (VALUE, work(3)), "--potential-hops": (VALUE, work(3)), "--potential-layers": (VALUE, work(3)),
    "--potential-blocks": (VALUE, work(3)), "--patience": (VALUE, plain), "--seed": (VALUE, plain),
    "--sample": (VALUE, plain), "--max-triangles-per-node": (VALUE, plain), "--batch-size": (VALUE, chunk(1024)),
    "--edge-chunk": (VALUE, chunk(4096)), "--dropout": (FLOAT, plain), "--damping": (FLOAT, plain),
    "--tol": (FLOAT, plain), "--lr": (FLOAT, plain), "--coupling-lr": (FLOAT, plain), "--weight-decay": (FLOAT, plain),
    "--warmup": (FLOAT, plain), "--exp3-gamma": (FLOAT, plain), "--budget": (FLOAT, plain),
    "--variant": (choices("gbpn", "gbpn-i"), plain), "--backward": (choices("unroll", "implicit"), plain),
    "--precision": (choices("fp32", "bf16"), plain), "--motifs": (choices("none", "triangle"), plain),
    "--potential": (choices("mlp", "sign", "gcn", "linkx"), plain), "--sampler": (choices("uniform", "exp3"), plain),
    "--metric": (choices("auto", "accuracy", "macro_f1", "roc_auc"), plain), "--device": (choices("cpu", "cuda"), plain),
    "--threads": (VALUE, THREADS), "--dataset": (TEXT, plain),
}
BENCHMARK = {
    "--epochs": (VALUE, work(2)), "--trials": (VALUE, work(2)), "--patience": (VALUE, plain), "--seed": (VALUE, plain),
    "--budget": (FLOAT, plain), "--dropout": (FLOAT, plain), "--batch-size": (VALUE, chunk(1024)),
    "--metric": (choices("auto", "accuracy", "roc_auc"), plain), "--threads": (VALUE, THREADS),
    "--models": (st.one_of(choices("mlp", "lp", "gbpn", "gcn:tuned"), VALUE.map(lambda v: "gbpn-triangle" + v)),
                 work(3)),
    "--datasets": (TEXT, plain), "--device": (choices("cpu", "cuda"), plain),
}
INFERENCE = {
    "--sample": (VALUE, plain), "--known": (choices("auto", "none", "train", "labeled"), plain),
    "--threads": (VALUE, THREADS), "--dataset": (TEXT, plain), "--checkpoint": (TEXT, plain),
}
PREDICT = {**INFERENCE, "--steps": (VALUE, work(20)), "--node-chunk": (VALUE, chunk(4096)),
           "--edge-chunk": (VALUE, chunk(4096)), "--device": (choices("cpu", "cuda"), plain),
           "--partitioner": (choices("auto", "ranges"), plain)}
CONVERGENCE = {**INFERENCE, "--steps": (VALUE, work(20))}
COUPLING = {"--threads": (VALUE, THREADS), "--checkpoint": (TEXT, plain)}


class Hung(BaseException):
    """A run past its time bound (a BaseException: no ``except Exception`` of the command swallows it)."""


def _options(table):
    """One to three options of ``table`` with a value each, tamed, as argv."""
    def pairs(names):
        return st.tuples(*(table[n][0].map(table[n][1]) for n in names)).map(
            lambda values: [x for n, v in zip(names, values) for x in (n, v)])
    return st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=3, unique=True).flatmap(pairs)


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


def _check(argv, capsys):
    """Run ``argv`` in a fresh folder (every output relative to it) within the time bound and check its ending."""
    def hung(signum, frame):
        raise Hung(f"gbpn {' '.join(argv)} ran past {BOUND_S} s")

    with tempfile.TemporaryDirectory() as work_dir:
        before, cwd = _listing(work_dir), os.getcwd()
        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(BOUND_S)
        os.chdir(work_dir)
        try:
            code = main(argv)
        except SystemExit as ex:  # argparse's usage errors
            code = ex.code
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(cwd)
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code in (0, 2), f"gbpn {argv}: exit {code}\n{err[-2000:]}"
        assert "Traceback" not in err and "internal error" not in err, f"gbpn {argv}\n{err[-2000:]}"
        if code == 2:
            errors = [line for line in lines if ": error:" in line]
            assert len(errors) == 1 and lines[-1] == errors[0] and lines[-1].startswith("gbpn"), f"gbpn {argv}\n{err}"
            assert _listing(work_dir) == before, f"gbpn {argv} wrote {_listing(work_dir)} and failed: {lines[-1]}"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--epochs", "1", "--hidden", "8", "-q", "--output", str(out)]) == 0
    return str(out / "model.pt")


COMMANDS = {
    "train": (["train", "--epochs", "1", "--hidden", "8", "-q", "--output", "run"], TRAIN),
    "benchmark": (["benchmark", "--models", "mlp", "--datasets", "synth-ising+", "--trials", "1", "--epochs", "1", "-q",
                   "--output", "grid"], BENCHMARK),
    "predict": (["predict", "--checkpoint", "CHECKPOINT", "-q", "--output", "out/p.csv"], PREDICT),
    "coupling": (["coupling", "--checkpoint", "CHECKPOINT", "-q", "--output", "out"], COUPLING),
    "analyze": (["analyze", "convergence", "--checkpoint", "CHECKPOINT", "--steps", "5", "--no-layout", "-q",
                 "--output", "out"], CONVERGENCE),
}


@pytest.mark.slow  # about a minute in all (five commands, 150 runs)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_random_option_values_end_in_a_result_or_one_clear_error(command, checkpoint, capsys):
    base, table = COMMANDS[command]
    base = [checkpoint if a == "CHECKPOINT" else a for a in base]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(options=_options(table))
    def run(options):
        _check(base + options, capsys)

    run()
