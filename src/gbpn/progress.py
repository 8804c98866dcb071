"""Progress of long work that reads on a terminal and in a log.

:class:`Progress` counts finished units (a grid's runs, a study's points, ``auto``'s candidates).
On a terminal it is a ``tqdm`` bar. Where stderr is a file or a pipe (``nohup``, CI, ``tee``),
``tqdm`` turns its bar off (its own ``disable=None`` test) and each finished unit becomes one log
line with the time spent and an estimate of the time left (from the mean of the units finished
here); while one unit runs longer than ``heartbeat`` seconds a line says where it is, every
``heartbeat`` seconds (``epoch k of n``, reported by the training loops through :func:`step`).
The lines go through the ``gbpn`` logger at INFO, so ``-q`` silences them.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ["HEARTBEAT", "Progress", "duration", "epoch_done", "listen", "step"]

HEARTBEAT = 30.0  # seconds between "still running" lines of one unit
logger = logging.getLogger("gbpn")
_active: List["Progress"] = []  # the open Progress objects, innermost last: step() reports to it


def duration(seconds: float) -> str:
    """``"4.5 s"``, ``"45 s"``, ``"3.2 min"``, ``"1.5 h"``: a span a person reads at a glance."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def step(k: int, n: int, what: str = "epoch") -> None:
    """Say that the running unit is at ``what`` ``k`` of ``n`` (1-based), for its heartbeat line.
    Costs an attribute write: training loops call it every epoch."""
    if _active:
        _active[-1].at = f"{what} {k} of {n}"


_listeners: List[Callable[[str, Dict[str, float]], None]] = []  # what listen() registered, innermost last


def epoch_done(desc: str, row: Dict[str, float]) -> None:
    """A training loop finished an epoch: its ``desc`` and history row (``epoch``, ``loss``, scores, ``seconds``)
    go to whatever :func:`listen` registered (TensorBoard, :mod:`gbpn.experiments.curves`). Nothing when none is."""
    for listener in tuple(_listeners):
        listener(desc, row)


@contextlib.contextmanager
def listen(listener: Callable[[str, Dict[str, float]], None]) -> Iterator[None]:
    """Call ``listener(desc, row)`` after every training epoch (:func:`epoch_done`) while in this block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


class Progress:
    """Progress over ``total`` units: :meth:`start` before each unit, :meth:`done` after it, and
    :meth:`close` at the end (or use it as a context manager).

    Args:
        total: units to run (those already finished elsewhere are not counted).
        desc: what the units make up (``"benchmark"``), the start of every line.
        unit: a unit's name in the lines (``"run"``, ``"candidate"``).
        enabled: ``False`` shows nothing (``-q``).
        log: where the lines go (default: the ``gbpn`` logger at INFO).
        heartbeat: seconds between the lines of a unit still running (0: none; default :data:`HEARTBEAT`).
        plan: what the units are (``"3 trials x 2 samplers, 100 epochs each"``); given, a first line
            says ``"<desc>: <total> <unit>(s) to do (<plan>)"``, on a terminal too.
    """

    def __init__(self, total: int, desc: str, unit: str = "run", enabled: bool = True,
                 log: Optional[Callable[[str], None]] = None, heartbeat: Optional[float] = None,
                 plan: str = "") -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.log = log or logger.info
        self.bar = tqdm(total=total, desc=desc, unit=unit, disable=None if enabled and total > 0 else True,
                        dynamic_ncols=True)
        self.lines = enabled and total > 0 and self.bar.disable  # tqdm found no terminal: lines instead of a bar
        self._redirect = contextlib.ExitStack()
        if not self.bar.disable and any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr)
                                        for h in logger.handlers):
            # messages printed while the bar shows go above it (tqdm.write), not through it
            self._redirect.enter_context(logging_redirect_tqdm(loggers=[logger]))
        self.heartbeat = HEARTBEAT if heartbeat is None else heartbeat
        self.finished, self.spent = 0, 0.0
        self.what, self.at, self.unit_start = "", "", None  # the unit running, where it is, since when
        self.start_time = self.last_line = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if enabled and plan:  # before the first unit's silent minutes
            self.log(f"{desc}: {total} {unit}(s) to do ({plan})")
        _active.append(self)
        if self.lines and self.heartbeat > 0:
            self._thread = threading.Thread(target=self._beat, name="gbpn-progress", daemon=True)
            self._thread.start()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self in _active:
            _active.remove(self)
        self.bar.close()
        self._redirect.close()

    def start(self, what: str) -> None:
        """Unit ``what`` (``"cora gcn trial 1"``) begins."""
        self.what, self.at, self.unit_start = what, "", time.monotonic()
        self.bar.set_postfix_str(what, refresh=False)

    def done(self, note: str = "", say: bool = True) -> str:
        """The unit begun last has finished; ``note`` (a score, say) joins its line. Returns the
        timing (``"in 12 s; 1.2 min elapsed, about 3.6 min left"``) for a caller that writes its own
        line (``say=False``: no line from here)."""
        now = time.monotonic()
        took = now - (self.unit_start if self.unit_start is not None else now)
        self.finished += 1
        self.spent += took
        self.unit_start = None
        self.bar.update(1)
        left = self.total - self.finished
        eta = (f"about {duration(left * self.spent / self.finished)} left"
               + (f" (from the first {self.unit})" if self.finished == 1 else "")) if left > 0 else "all done"
        timing = f"in {duration(took)}; {duration(now - self.start_time)} elapsed, {eta}"
        if self.lines and say:
            self._say(f"{self.desc}: {self.unit} {self.finished}/{self.total} done ({self.what}"
                      + (f", {note}" if note else "") + f") {timing}")
        return timing

    def _say(self, line: str) -> None:
        now = time.monotonic()
        for p in _active:  # an outer Progress waits a whole heartbeat after an inner one's line
            p.last_line = now
        self.last_line = now
        self.log(line)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.heartbeat, 1.0)):
            now = time.monotonic()
            since = self.unit_start
            inner = _active and _active[-1] is not self  # a nested Progress speaks for the unit
            if since is None or inner or now - max(self.last_line, since) < self.heartbeat:
                continue
            self._say(f"{self.desc}: {self.what} running for {duration(now - since)}" + (f", {self.at}" if self.at else ""))
