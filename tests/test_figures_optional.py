"""matplotlib is an optional extra: what needs no figure works without it, and the hint installs it as gbpn was."""
import sys

import numpy as np

from gbpn.cli import main


def test_coupling_without_matplotlib_prints_h_and_writes_its_csv(tmp_path, capsys, monkeypatch):
    n, rng = 40, np.random.default_rng(0)
    y = np.arange(n) % 2
    np.savetxt(tmp_path / "edges.csv", np.stack([np.arange(n), (np.arange(n) + 1) % n], 1), fmt="%d", delimiter=",")
    np.savetxt(tmp_path / "features.csv", y[:, None] + rng.normal(0, 1, (n, 2)), delimiter=",")
    np.savetxt(tmp_path / "labels.csv", y, fmt="%d")
    assert main(["train", "--dataset", str(tmp_path), "--epochs", "2", "--hidden", "8", "--output",
                 str(tmp_path / "run"), "-q"]) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert main(["coupling", "--checkpoint", str(tmp_path / "run" / "model.pt"), "--output", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("coupling H of ") and len(lines[2].split()) == 3  # a row: class and its 2 values
    H = np.loadtxt(tmp_path / "h" / "coupling.csv", delimiter=",", skiprows=1, usecols=(1, 2))
    np.testing.assert_allclose(H, [[float(v) for v in line.split()[1:]] for line in lines[2:4]], atol=1e-3)
    assert not (tmp_path / "h" / "coupling.png").exists()
    assert "no heatmap: drawing figures needs matplotlib" in out and "[analysis]'" in out


def test_the_install_hint_follows_how_gbpn_was_installed(monkeypatch, tmp_path):
    import importlib.metadata

    from gbpn import io

    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            return self.text

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist(
        '{"dir_info": {"editable": true}, "url": "file://%s"}' % tmp_path))
    assert io.install_hint("analysis") == "pip install -e '.[analysis]'"  # from the clone, as the README installs
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist(None))
    assert io.install_hint("analysis") == "pip install 'gbpn[analysis]'"
