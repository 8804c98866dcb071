"""Exclusive locks on the folders and files a run writes, through ``filelock`` (the kernel's ``flock``).

A lock is a file, ``<name>.lock``, that one process holds open and locked; the kernel drops the lock
when that process ends, however it ends (an error, Ctrl-C, ``kill -9``), so a lock is never left
stale. Beside it, ``<name>.lock.holder`` says who holds it (pid, host, start time, command) for the
error another process gets; it is removed on release. A run that ends, finished or interrupted, removes
the ``.lock`` file too (:func:`release`): a process that was waiting on the removed file, and so holds a
lock no one else can see, finds on acquiring that the path no longer names its file and locks it anew
(:func:`try_lock`), so two processes never hold "the same" lock.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout

from gbpn.io import cannot_write

FOLDER_LOCK = ".gbpn.lock"  # the lock of a whole output folder (a training run)
logger = logging.getLogger(__name__)


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
    while True:
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except Timeout:
            return None
        if _still_at(lock):
            break
        lock.release()  # its file was removed (its holder finished) while this one waited on it: lock the path's
    try:
        argv = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
        _holder_file(lock_path).write_text(f"pid {os.getpid()} on {socket.gethostname()}, since "
                                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {argv}\n")
    except OSError:  # the lock holds without its note
        pass
    return lock


def _still_at(lock: FileLock) -> bool:
    """Whether the file ``lock`` holds is still the one its path names (not removed, nor replaced)."""
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)  # filelock's descriptor of the held file
    if fd is None:
        return True  # cannot tell: as filelock has it
    try:
        return os.path.samestat(os.fstat(fd), os.stat(lock.lock_file))
    except OSError:
        return False


def release(lock: FileLock) -> None:
    """Remove the holder file and the lock file of a lock from :func:`try_lock` (while still holding it: no empty
    lock file is left behind), then release it; a process waiting on the removed file locks the path anew
    (:func:`try_lock`)."""
    path = Path(lock.lock_file)
    _holder_file(path).unlink(missing_ok=True)
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
        lock = try_lock(folder / FOLDER_LOCK)
        if lock is None and wait:  # one line saying what it waits for, not a silent pause of unknown length
            logger.info(f"waiting for {folder} to be free: in use by {holder(folder / FOLDER_LOCK)}")
            lock = try_lock(folder / FOLDER_LOCK, wait=True)
        return lock
    except OSError as err:
        raise cannot_write(folder / FOLDER_LOCK, err, what) from None


__all__ = ["FOLDER_LOCK", "folder_busy", "holder", "is_held", "lock_folder", "release", "try_lock"]
