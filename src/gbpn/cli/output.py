"""What several commands write: a file option that may name a folder, and a mean with its spread."""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Iterator, Optional, Union

from gbpn.errors import GBPNError


def file_in(path: Optional[str], name: str) -> Optional[str]:
    """A file option's value, or ``name`` inside it when it names a folder (an existing one, or one
    written with a trailing slash)."""
    if path and (path.endswith(("/", os.sep)) or os.path.isdir(path)):
        return os.path.join(path, name)
    return path


@contextlib.contextmanager
def locked(folder: Union[str, Path], wait: bool = False, what: str = "--output") -> Iterator[None]:
    """Hold ``folder``'s lock (the one ``gbpn train`` holds on its run folder) while a command writes
    into it: a second command into the same folder stops at once naming the holder, or with ``wait``
    waits for it. Only the first process of a ``torchrun`` group takes it."""
    from gbpn.experiments.lock import folder_busy, lock_folder, release

    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    folder = Path(folder)
    new = not folder.exists()
    lock = lock_folder(folder, what, wait)
    if lock is None:
        raise GBPNError(folder_busy(folder, what))
    failed = True
    try:
        yield
        failed = False
    finally:
        release(lock)  # no empty lock file left behind (one waiting on it locks the path anew)
        if failed and new:
            with contextlib.suppress(OSError):
                folder.rmdir()


# control characters (a newline or an escape sequence in a folder's name) as Python writes them in a string
_ESCAPES = {c: ascii(chr(c))[1:-1] for c in [*range(0x20), 0x7F]}


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\r``, ``\\x1b``): a path holding a newline
    stays inside its message's line, and cannot move the terminal's cursor."""
    return str(text).translate(_ESCAPES)


def mean_std(summary: dict, key: str) -> str:
    """``85.70 ± 1.40`` in per cent; no ± for one trial, where there is no spread to report."""
    mean = f"{100 * summary[f'{key}_mean']:.2f}"
    return mean if summary["num_trials"] < 2 else f"{mean} ± {100 * summary[f'{key}_std']:.2f}"


def ratio(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "undefined"
