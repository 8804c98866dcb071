"""The exclusive locks on run folders and grid runs (gbpn.experiments.lock, through filelock)."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gbpn.experiments.lock import FOLDER_LOCK, folder_busy, is_held, lock_folder, release

HOLD = ("import sys, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
        "sys.stdin.read()")


def _holder_process(path):
    """A process that holds ``path``'s lock (plain filelock, no holder note) until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_folder_is_refused_naming_its_holder_and_free_again_once_released(tmp_path):
    out = tmp_path / "run"
    lock = lock_folder(out)
    assert lock is not None and out.is_dir()
    assert lock_folder(out) is None and is_held(out / FOLDER_LOCK)  # another call, even in this process
    message = folder_busy(out, "--output folder")
    assert f"{out} is in use by another run (pid {os.getpid()} on " in message and "--output folder" in message
    release(lock)
    assert not (out / (FOLDER_LOCK + ".holder")).exists() and not is_held(out / FOLDER_LOCK)
    again = lock_folder(out)
    assert again is not None
    release(again)


def test_another_process_holding_it_is_seen_and_its_death_frees_it(tmp_path):
    path = tmp_path / FOLDER_LOCK
    proc = _holder_process(path)
    try:
        assert lock_folder(tmp_path) is None
    finally:
        proc.kill()  # kill -9: no chance to clean up
        proc.wait()
    lock = lock_folder(tmp_path)  # the operating system dropped the dead holder's lock
    assert lock is not None
    release(lock)


def test_wait_takes_the_lock_once_the_holder_lets_go(tmp_path):
    proc = _holder_process(tmp_path / FOLDER_LOCK)
    threading.Timer(0.5, proc.stdin.close).start()  # the holder then ends
    start = time.monotonic()
    lock = lock_folder(tmp_path, wait=True)
    assert lock is not None and time.monotonic() - start >= 0.4 and proc.wait(10) == 0
    release(lock)


def test_an_output_folder_that_cannot_be_made_is_a_clear_error(tmp_path):
    from gbpn.errors import GBPNError

    (tmp_path / "file").write_text("")
    with pytest.raises(GBPNError, match=f"{tmp_path / 'file'} is a file, not a folder; choose another --output"):
        lock_folder(tmp_path / "file" / "run")


@pytest.mark.slow
def test_a_second_training_into_a_running_ones_folder_fails_at_once(tmp_path):
    """Two real `gbpn train` processes into one --output: the second exits 2 before writing anything,
    naming the first; the first's files are untouched; the folder is free once the first is gone."""
    out = tmp_path / "run"
    train = [sys.executable, "-m", "gbpn", "train", "--dataset", "synth-ising+", "--hidden", "8", "-q",
             "--output", str(out)]
    first = subprocess.Popen([*train, "--epochs", "100000", "--lr", "0.01"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "config.json").is_file():  # written once the first run holds the folder
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run never started"
            time.sleep(0.2)
        config = (out / "config.json").read_bytes()
        second = subprocess.run([*train, "--epochs", "2", "--lr", "0.02"], capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr[-3000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "is in use by another run" in lines[0], second.stderr[-3000:]
        assert f"pid {first.pid} on " in lines[0]
        assert (out / "config.json").read_bytes() == config and first.poll() is None  # the first run's, still
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    lock = lock_folder(out)
    assert lock is not None
    release(lock)


WAIT = ("import sys; from gbpn.experiments.lock import try_lock; lock = try_lock(__import__('pathlib').Path(sys.argv[1]), "
        "wait=True); print('held', flush=True); sys.stdin.read()")


def test_removing_a_released_lock_file_never_gives_two_holders(tmp_path):
    """A process waiting on the lock file that its holder removes on release gets the lock; then no one
    else does, through a new file at the same path."""
    lock = lock_folder(tmp_path)
    waiter = subprocess.Popen([sys.executable, "-c", WAIT, str(tmp_path / FOLDER_LOCK)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # the waiter has opened the file and waits on it
        release(lock)
        assert waiter.stdout.readline().strip() == "held"
        assert lock_folder(tmp_path) is None and (tmp_path / FOLDER_LOCK).exists()
    finally:
        waiter.stdin.close()
        waiter.wait(30)


def test_finished_commands_leave_no_lock_file(tmp_path, capsys):
    import numpy as np

    from gbpn.cli import main

    n, rng = 30, np.random.default_rng(0)
    y = np.arange(n) % 2
    np.savetxt(tmp_path / "edges.csv", np.stack([np.arange(n), (np.arange(n) + 1) % n], 1), fmt="%d", delimiter=",")
    np.savetxt(tmp_path / "features.csv", y[:, None] + rng.normal(0, 1, (n, 2)), delimiter=",")
    np.savetxt(tmp_path / "labels.csv", y, fmt="%d")
    run = tmp_path / "run"
    assert main(["train", "--dataset", str(tmp_path), "--epochs", "2", "--hidden", "8", "--output", str(run), "-q"]) == 0
    assert main(["predict", "--checkpoint", str(run / "model.pt"), "-q"]) == 0
    assert main(["coupling", "--checkpoint", str(run / "model.pt"), "-q"]) == 0
    assert not [p.name for p in run.iterdir() if p.name.startswith(FOLDER_LOCK)]
