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
    from gbpn import GBPN

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
from gbpn import GBPN
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

    # "-1" is a number to a spreadsheet, not a formula: binary labels written as -1/+1 stay readable
    names = ["=cmd|' /C calc'!A0", "+1+1", "-x", "@sum", "plain", "-1"]
    probs = np.eye(6)
    write_predictions(tmp_path / "p.csv", probs, names, np.zeros(6, bool))
    with open(tmp_path / "p.csv") as fh:
        rows = list(csv.reader(fh))
    assert [r[1] for r in rows[1:]] == ["'=cmd|' /C calc'!A0", "'+1+1", "'-x", "'@sum", "plain", "-1"]


def test_csv_cell_neutralises_formulas_and_keeps_numbers():
    from gbpn.io import csv_cell

    for cell in ("=1+1", "+cmd", "-x", "@SUM(A1)", "\tx", "\rx", "-1+1", '=HYPERLINK("http://x","a")'):
        assert csv_cell(cell) == "'" + cell
    for cell in ("-0.5", "+1e-05", "-inf", "12", "plain", "", -3, 2.5, None):
        assert csv_cell(cell) == cell


FORMULAS = ['=HYPERLINK("http://x","a")', "@SUM(A1)"]


def test_coupling_and_triangle_csv_neutralise_formula_class_names(tmp_path):
    """OWASP CSV injection: class names land in coupling.csv's header and first column, triangle.csv's rows."""
    import csv

    import numpy as np

    from gbpn.experiments.coupling import save_coupling_csv, save_triangle_csv

    save_coupling_csv(tmp_path / "c.csv", np.array([[2.0, 0.5], [0.5, 2.0]]), FORMULAS)
    rows = list(csv.reader(open(tmp_path / "c.csv")))
    quoted = ["'" + n for n in FORMULAS]
    assert rows[0] == ["class", *quoted] and [r[0] for r in rows[1:]] == quoted and rows[1][1:] == ["2", "0.5"]
    save_triangle_csv(tmp_path / "t.csv", np.ones((2, 2, 2)), FORMULAS)
    rows = list(csv.reader(open(tmp_path / "t.csv")))
    assert {c for r in rows[1:] for c in r[:3]} == set(quoted) and {r[3] for r in rows[1:]} == {"1"}


def test_only_gbpn_io_writes_csv_so_no_file_forgets_the_formula_guard():
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "gbpn"
    writers = re.compile(r"csv\.writer\(|DictWriter\(|\.to_csv\(|\.write\(\",\"\.join")
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.name != "io.py" and writers.search(p.read_text())]
    assert offenders == [], "write CSV through gbpn.io.write_table / write_csv"
