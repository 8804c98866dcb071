"""Bring-your-own folders that used to slip through (a silent wrong result or a traceback): each is
now one clear error line from the CLI, exit code 2, naming the file and what to fix."""
import os

import numpy as np
import pytest

from gbpn.cli import main

N = 6


def _folder(path, features=None, labels=None, edges=None):
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 2)) if features is None else features
    if isinstance(x, str):
        (path / "features.csv").write_text(x)
    else:
        np.save(path / "features.npy", x)
    ring = np.stack([np.arange(N), (np.arange(N) + 1) % N], 1)
    if isinstance(edges, str):
        (path / "edges.csv").write_text(edges)
    else:
        np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    (path / "labels.csv").write_text(labels if labels is not None else "\n".join(str(i % 2) for i in range(N)) + "\n")
    return path


def _train_error(folder, tmp_path, capsys):
    code = main(["train", "--dataset", str(folder), "--epochs", "1", "--trials", "1", "--hidden", "8",
                 "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_complex_features_are_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g", features=np.ones((N, 2)) + 1j)
    assert "complex128" in _train_error(g, tmp_path, capsys)


def test_timedelta_features_are_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g", features=np.ones((N, 2)).astype("timedelta64[s]"))
    assert "timedelta64" in _train_error(g, tmp_path, capsys)


def test_a_duplicate_class_name_is_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g")
    (g / "class_names.txt").write_text("cat\ncat\n")
    assert "names 'cat' twice (lines 1 and 2)" in _train_error(g, tmp_path, capsys)


def test_a_blank_line_among_class_names_is_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g")
    (g / "class_names.txt").write_text("cat\n\ndog\n")
    assert "class_names.txt line 2 is empty" in _train_error(g, tmp_path, capsys)


def test_splits_that_is_a_folder_is_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g")
    (g / "splits.npz").mkdir()
    assert "splits.npz is a folder" in _train_error(g, tmp_path, capsys)


@pytest.mark.parametrize("edges, labels, said", [
    ("source,target\n0,1\ninf,3\n", None, "edge 2 (inf, 3) is not a pair of whole-number node ids"),
    (None, "0\n1\ninf\n0\n1\n0\n", "node 2 (row 3 of the data) has label inf"),
    (None, "0\n1\n1e19\n0\n1\n0\n", "has label 10000000000000000000, beyond the 1024 classes allowed"),
    (None, "0\n1\n1000000\n0\n1\n0\n", "node 2 (row 3 of the data) has label 1000000, beyond the 1024 classes"),
])
def test_infinite_and_huge_ids_are_named(tmp_path, capsys, edges, labels, said):
    g = _folder(tmp_path / "g", edges=edges, labels=labels)
    assert said in _train_error(g, tmp_path, capsys)


def _write_splits(path, kind):
    if kind == "no split":
        np.savez(path, train=np.zeros((0, N), bool), val=np.zeros((0, N), bool), test=np.zeros((0, N), bool))
    elif kind == "npy":
        with open(path, "wb") as fh:
            np.save(fh, np.zeros(N, bool))
    elif kind == "empty":
        path.write_bytes(b"")
    else:  # a zip cut short
        np.savez(path, train=np.ones(N, bool), val=np.ones(N, bool), test=np.ones(N, bool))
        path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize("kind, said", [("no split", "holds no split"), ("npy", "a single .npy array"),
                                        ("empty", "as an .npz archive"), ("damaged", "as an .npz archive")])
def test_unreadable_splits_are_named(tmp_path, capsys, kind, said):
    g = _folder(tmp_path / "g")
    _write_splits(g / "splits.npz", kind)
    assert said in _train_error(g, tmp_path, capsys)


def test_a_feature_beyond_float32_is_named_as_such(tmp_path, capsys):
    g = _folder(tmp_path / "g", features="1,2\n3,1e39\n" + "1,2\n" * (N - 2))
    line = _train_error(g, tmp_path, capsys)
    assert "1e+39" in line and "float32" in line and "NaN" not in line


def test_a_broken_link_and_an_empty_features_file_are_named(tmp_path, capsys):
    g = _folder(tmp_path / "g")
    (g / "edges.csv").unlink()
    os.symlink(tmp_path / "nowhere.csv", g / "edges.csv")
    assert "edges.csv is a broken link" in _train_error(g, tmp_path, capsys)
    h = _folder(tmp_path / "h", features="")
    (h / "features.npy").unlink(missing_ok=True)
    assert "features.csv holds no rows" in _train_error(h, tmp_path, capsys)
