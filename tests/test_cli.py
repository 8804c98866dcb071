import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gbpn.cli import main


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small transductive run on the generated grid, shared by the tests below."""
    out = tmp_path_factory.mktemp("run")
    code = main(["train", "--dataset", "synth-ising+", "--epochs", "15", "--trials", "2", "--hidden", "16",
                 "--seed", "3", "--output", str(out), "--quiet"])
    assert code == 0
    return out


def test_train_writes_config_metrics_splits_and_checkpoint(trained):
    cfg = json.loads((trained / "config.json").read_text())
    metrics = json.loads((trained / "metrics.json").read_text())
    assert cfg["dataset"] == "synth-ising+" and cfg["train"]["epochs"] == 15 and "torch" in cfg["versions"]
    assert [t["seed"] for t in metrics["trials"]] == [3, 4]
    assert all(0.0 <= t["test_accuracy"] <= 1.0 for t in metrics["trials"])
    split = np.load(trained / metrics["trials"][0]["split"])
    assert split["train"].sum() + split["val"].sum() + split["test"].sum() == 2601
    assert (trained / "model.pt").is_file()


def test_rerun_resumes_and_skips_finished_trials(trained, capsys):
    before = json.loads((trained / "metrics.json").read_text())
    code, out, err = run(["train", "--dataset", "synth-ising+", "--epochs", "15", "--trials", "3", "--hidden", "16",
                          "--seed", "3", "--output", str(trained), "--quiet"], capsys)
    assert code == 0 and "2 of 3 trials already finished" in err
    after = json.loads((trained / "metrics.json").read_text())
    assert after["trials"][:2] == before["trials"] and len(after["trials"]) == 3


def test_rerun_with_another_config_refuses(trained, capsys):
    code, _, err = run(["train", "--epochs", "16", "--hidden", "16", "--seed", "3", "--output", str(trained)], capsys)
    assert code == 2 and "another configuration" in err


def test_predict_writes_probabilities_and_keeps_training_labels(trained, tmp_path, capsys):
    csv = tmp_path / "p.csv"
    code, out, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", "synth-ising+",
                        "--output", str(csv)], capsys)
    assert code == 0 and "evidence: train" in out
    rows = np.genfromtxt(csv, delimiter=",", names=True, dtype=None, encoding=None)
    assert len(rows) == 2601
    probs = np.stack([rows["p_0"], rows["p_1"]], 1)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    known = rows["known"] == 1
    assert known.sum() == round(0.3 * 2601)
    from gbpn.data import load_dataset
    y = load_dataset("synth-ising+").y.numpy()
    assert (probs[known].argmax(1) == y[known]).all()  # clamped labels stay clamped
    # the low-memory path (bfloat16 messages, in place, chunked) gives the same predictions
    half = tmp_path / "half.csv"
    code, _, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", "synth-ising+",
                      "--half-messages", "--edge-chunk", "1000", "--node-chunk", "500", "--output", str(half)], capsys)
    rows_h = np.genfromtxt(half, delimiter=",", names=True, dtype=None, encoding=None)
    assert code == 0 and np.abs(rows_h["p_0"] - rows["p_0"]).max() < 0.02
    assert (rows_h["prediction"] == rows["prediction"]).mean() > 0.99


def test_coupling_prints_matrix_and_saves_png(trained, tmp_path, capsys):
    png = tmp_path / "h.png"
    code, out, _ = run(["coupling", "--checkpoint", str(trained / "model.pt"), "--output", str(png)], capsys)
    assert code == 0 and "coupling H" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_predict_on_your_own_graph_inductive(trained, tmp_path, capsys):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1], [1, 2], [2, 3]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.random.rand(4, 2), delimiter=",")
    code, out, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g), "--known", "none",
                        "--output", str(tmp_path / "o.csv")], capsys)
    assert code == 0 and (tmp_path / "o.csv").read_text().count("\n") == 5


@pytest.mark.parametrize(
    "args,match",
    [
        (["train", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["train", "--dataset", "election", "--data-dir", "/nonexistent/dir"], "/nonexistent/dir"),
        (["train", "--epochs", "0"], "epochs"),
        (["train", "--device", "tpu"], "device 'tpu'"),
        (["train", "--device", "cuda:7"], "no such CUDA device"),
        (["predict", "--checkpoint", "/nonexistent.pt"], "does not exist"),
        (["coupling", "--checkpoint", "/nonexistent.pt"], "does not exist"),
    ],
)
def test_user_errors_are_one_line_and_non_zero(args, match, capsys):
    code, _, err = run(args, capsys)
    assert code == 2
    assert match in err and "Traceback" not in err and err.count("\n") == 1


def test_corrupt_checkpoint(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    code, _, err = run(["coupling", "--checkpoint", str(bad)], capsys)
    assert code == 2 and "corrupt" in err
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    code, _, err = run(["predict", "--checkpoint", str(other)], capsys)
    assert code == 2 and "not a gbpn checkpoint" in err


def test_mismatched_features_and_labels(trained, tmp_path, capsys):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.random.rand(2, 5), delimiter=",")
    code, _, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g)], capsys)
    assert code == 2 and "5 features" in err
    np.savetxt(g / "features.csv", np.random.rand(2, 2), delimiter=",")
    np.savetxt(g / "labels.csv", np.array([0, 7]), fmt="%d")
    code, _, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g)], capsys)
    assert code == 2 and "2 classes" in err


def test_console_script_runs_as_a_process(tmp_path):
    exe = Path(sys.executable).with_name("gbpn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gbpn.cli"]
    proc = subprocess.run(cmd + ["train", "--dataset", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "features,labels,match",
    [
        ([[1.0], [float("nan")], [0.0]], [0, 1, 0], "NaN"),
        ([[1.0], [2.0], [0.0]], [1, 0, 9, 0], "length 3"),
        ([[1.0], [2.0], [0.0]], [0, -2, 1], "labels must lie"),
    ],
)
def test_train_rejects_bad_graph_files_in_one_line(tmp_path, capsys, features, labels, match):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1], [1, 2]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.array(features), delimiter=",")
    np.savetxt(g / "labels.csv", np.array(labels), fmt="%d")
    code, _, err = run(["train", "--dataset", str(g), "--output", str(tmp_path / "o")], capsys)
    assert code == 2 and match in err and err.count("\n") == 1
