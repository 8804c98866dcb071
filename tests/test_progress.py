"""gbpn.progress: a bar on a terminal, a line per finished unit (and a heartbeat) in a log."""
import logging
import sys
import time

import pytest

from gbpn import progress
from gbpn.progress import Progress, duration, step


def test_a_log_gets_one_line_per_unit_with_elapsed_and_left():
    lines = []  # under pytest stderr is no terminal: tqdm turns its bar off, Progress writes lines
    with Progress(3, "grid", unit="run", log=lines.append, heartbeat=0) as bar:
        for name in ("a", "b", "c"):
            bar.start(name)
            bar.done("test accuracy 71.0%")
    assert len(lines) == 3
    assert lines[0].startswith("grid: run 1/3 done (a, test accuracy 71.0%) in ")
    assert "elapsed, about" in lines[0] and "left (from the first run)" in lines[0]
    assert "run 2/3 done (b" in lines[1] and "left" in lines[1] and "first" not in lines[1]
    assert lines[2].endswith("elapsed, all done")


def test_a_plan_is_said_before_the_first_unit():
    lines = []
    with Progress(6, "sampling study", unit="training", log=lines.append, heartbeat=0,
                  plan="3 trial(s) x 2 samplers") as bar:
        assert lines == ["sampling study: 6 training(s) to do (3 trial(s) x 2 samplers)"]
        bar.start("a")
    with Progress(6, "quiet", enabled=False, log=lines.append, plan="anything"):
        assert len(lines) == 1


def test_disabled_progress_says_nothing_and_a_terminal_gets_the_bar(monkeypatch):
    lines = []
    with Progress(2, "grid", enabled=False, log=lines.append) as bar:
        bar.start("a")
        assert bar.done().startswith("in ")  # the timing is still there for a caller's own line
    assert lines == []

    class Terminal:
        def write(self, text):
            return len(text)

        def flush(self):
            pass

        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    console = logging.StreamHandler(sys.stderr)  # as the command line logs
    gbpn_logger = logging.getLogger("gbpn")
    monkeypatch.setattr(gbpn_logger, "handlers", [console])
    with Progress(2, "grid", log=lines.append) as bar:
        assert not bar.lines and not bar.bar.disable  # tqdm's own test found a terminal: a bar, no lines
        assert console not in gbpn_logger.handlers  # messages meanwhile go through tqdm.write, above the bar
        bar.start("a")
        bar.done()
    assert lines == [] and gbpn_logger.handlers == [console]


def _wait_for(lines, text, seconds=10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if any(text in line for line in lines):
            return True
        time.sleep(0.02)
    return False


def test_a_long_unit_gets_heartbeat_lines_saying_its_epoch():
    lines = []
    with Progress(2, "grid", log=lines.append, heartbeat=0.1) as bar:
        bar.start("cora gcn trial 0")
        step(7, 500)  # what the training loop reports every epoch
        assert _wait_for(lines, "epoch 7 of 500")
        bar.done()
        count = len(lines)
        time.sleep(0.3)  # between units (none running) no heartbeat
        assert len(lines) == count
    beat = next(line for line in lines if "epoch 7 of 500" in line)
    assert beat.startswith("grid: cora gcn trial 0 running for ") and beat.endswith(", epoch 7 of 500")


def test_a_nested_progress_speaks_for_the_running_unit():
    outer_lines, inner_lines = [], []
    with Progress(1, "grid", log=outer_lines.append, heartbeat=0.1) as outer:
        outer.start("chameleon gbpn:auto trial 0")
        with Progress(2, "auto", unit="candidate", log=inner_lines.append, heartbeat=0.1) as inner:
            inner.start("sign")
            step(3, 100)
            assert _wait_for(inner_lines, "epoch 3 of 100")
            assert not any("running for" in line for line in outer_lines)
            inner.done()
    assert progress._active == []  # closed ones no longer receive epochs


def test_durations_read_at_a_glance():
    assert duration(4.24) == "4.2 s" and duration(45) == "45 s"
    assert duration(192) == "3.2 min" and duration(5400) == "1.5 h"


@pytest.mark.parametrize("total", [0, 1])
def test_small_totals(total):
    lines = []
    with Progress(total, "grid", log=lines.append, heartbeat=0) as bar:
        for _ in range(total):
            bar.start("a")
            bar.done()
    assert len(lines) == total and all("all done" in line for line in lines)
