"""Exclusive locks on the folders and files a run writes, through ``filelock`` (the kernel's ``flock``).

A lock is a file, ``<name>.lock``, that one process holds open and locked; the kernel drops the lock
when that process ends, however it ends (an error, Ctrl-C, ``kill -9``), so a lock is never left
stale. Beside it, ``<name>.lock.holder`` says who holds it (pid, host, start time, command) for the
error another process gets; it is removed on release. The ``.lock`` file itself stays (unless the
work it guards is done, see :func:`release`): removing a lock file while another process may be
opening it would let two processes hold "the same" lock.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout

from gbpn.io import cannot_write

FOLDER_LOCK = ".gbpn.lock"  # the lock of a whole output folder (a training run)


def _holder_file(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".holder")


def holder(lock_path: Path) -> str:
    """Who holds ``lock_path``, as its holder file says, or why that is unknown."""
    try:
        text = _holder_file(lock_path).read_text().strip()
    except OSError:
        text = ""
    return text or "a process that has not yet said who it is"


def try_lock(lock_path: Path, wait: bool = False) -> Optional[FileLock]:
    """``lock_path``'s lock, held, with its holder file written; ``None`` while another process (or
    another call in this one) holds it. ``wait``: wait for it instead."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    try:
        argv = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
        _holder_file(lock_path).write_text(f"pid {os.getpid()} on {socket.gethostname()}, since "
                                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {argv}\n")
    except OSError:  # the lock holds without its note
        pass
    return lock


def release(lock: FileLock, remove: bool = False) -> None:
    """Remove the holder file of a lock from :func:`try_lock` (while still holding it), then release it.
    ``remove`` removes the lock file too, which is safe only where whoever locks it next, through the
    old file or a new one, finds the work done (a grid's run checks for its row once it holds the lock)."""
    path = Path(lock.lock_file)
    _holder_file(path).unlink(missing_ok=True)
    if remove:
        path.unlink(missing_ok=True)
    lock.release()


def is_held(lock_path: Path) -> bool:
    """Whether another process (or call) holds ``lock_path`` now."""
    lock = try_lock(lock_path)
    if lock is None:
        return True
    release(lock)
    return False


def folder_busy(folder: Path, what: str) -> str:
    """The error for a ``folder`` whose lock another run holds."""
    return (f"{folder} is in use by another run ({holder(folder / FOLDER_LOCK)}): two runs into one folder would "
            f"overwrite each other's files; wait for it to finish, or choose another {what}")


def lock_folder(folder: Path, what: str = "--output folder", wait: bool = False) -> Optional[FileLock]:
    """:func:`try_lock` on ``folder``'s lock (creating the folder): the held lock, or ``None`` while another
    run holds it (:func:`folder_busy` says so); :class:`~gbpn.errors.GBPNError` where the folder cannot be
    written. Release it with :func:`release`."""
    try:
        return try_lock(folder / FOLDER_LOCK, wait)
    except OSError as err:
        raise cannot_write(folder / FOLDER_LOCK, err, what) from None


__all__ = ["FOLDER_LOCK", "folder_busy", "holder", "is_held", "lock_folder", "release", "try_lock"]
