import os
import stat

import pytest
import torch

from gbpn.io import atomic_write, read_json, write_json
from gbpn.train.checkpoint import load_checkpoint


def test_atomic_write_replaces_whole_file_with_normal_permissions(tmp_path):
    p = tmp_path / "a.json"
    write_json(p, {"x": 1})
    write_json(p, {"x": 2})
    assert read_json(p) == {"x": 2}
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask
    assert [f.name for f in tmp_path.iterdir()] == ["a.json"]  # no temporary left behind


def test_failed_write_keeps_the_old_file(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write(p, lambda fh: fh.write("old"))

    def boom(fh):
        fh.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(p, boom)
    assert p.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_truncated_checkpoint_is_reported_as_corrupt(tmp_path):
    from gbpn.errors import GBPNError
    from gbpn.train.checkpoint import save_checkpoint
    from gbpn.nn import GBPN

    model = GBPN(3, 2, hidden_channels=4)
    args = {"in_channels": 3, "num_classes": 2, "hidden_channels": 4}
    save_checkpoint(tmp_path / "m.pt", model, {"model_args": args})
    loaded, meta = load_checkpoint(tmp_path / "m.pt")
    assert torch.equal(loaded.H, model.H) and meta["model_args"] == args
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "m.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(GBPNError, match="corrupt"):
        load_checkpoint(tmp_path / "m.pt")


@pytest.mark.slow
def test_a_full_disk_while_saving_a_checkpoint_is_named(tmp_path):
    """torch.save's zip writer reports a failed write as a RuntimeError ("unexpected pos"); the
    file's OSError is kept and raised instead. A file-size limit stands in for a full disk."""
    import subprocess
    import sys

    script = f"""
import resource, signal
from gbpn.errors import GBPNError
from gbpn.train.checkpoint import save_checkpoint
from gbpn.nn import GBPN
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
model = GBPN(300, 2, hidden_channels=256)
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
try:
    save_checkpoint({str(tmp_path / 'model.pt')!r}, model, {{}})
except GBPNError as err:
    print("GBPNError", err)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "GBPNError cannot write" in out.stdout and "File too large" in out.stdout, out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []  # no half-written file left behind


def test_class_names_a_spreadsheet_would_run_are_written_quoted(tmp_path):
    """OWASP CSV injection: a cell starting with = + - @ is a formula to a spreadsheet."""
    import csv

    import numpy as np

    from gbpn.io import write_predictions

    names = ["=cmd|' /C calc'!A0", "+1", "-x", "@sum", "plain"]
    probs = np.eye(5)
    write_predictions(tmp_path / "p.csv", probs, names, np.zeros(5, bool))
    with open(tmp_path / "p.csv") as fh:
        rows = list(csv.reader(fh))
    assert [r[1] for r in rows[1:]] == ["'=cmd|' /C calc'!A0", "'+1", "'-x", "'@sum", "plain"]
