"""Learning curves: ``history.csv`` of a run folder, written and resumed; ``gbpn plot`` and its figure."""
import csv
import json
import math

import numpy as np
import pytest

from gbpn.cli import main
from gbpn.experiments.curves import read_history
from gbpn.experiments.runner import run_trials
from gbpn.train.config import TrainConfig


def _ring(path, n=60, seed=0):
    """A ring of two balanced classes whose features carry the label."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    y = (rng.permutation(n) < n // 2).astype(int)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(path / "features.csv", y[:, None] + rng.normal(0, 1.0, (n, 2)), delimiter=",")
    np.savetxt(path / "labels.csv", y, fmt="%d")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two finished trials of 3 epochs each."""
    base = tmp_path_factory.mktemp("curves")
    g = _ring(base / "g")
    cfg = TrainConfig(epochs=3, hidden=8, metric="accuracy")
    run_trials(str(g), cfg, trials=2, output=base / "a", progress=False, log=lambda m: None)
    return g, cfg, base / "a"


def test_every_trial_writes_its_per_epoch_history(run):
    _, _, out = run
    with open(out / "history.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert header == ["trial", "epoch", "loss", "train_accuracy", "val_accuracy", "val_loss", "seconds"]  # no test
    rows = read_history(out / "history.csv")
    assert [(r["trial"], r["epoch"]) for r in rows] == [(t, e) for t in (0, 1) for e in range(3)]
    assert all(math.isfinite(r["loss"]) and r["seconds"] > 0 and 0 <= r["val_accuracy"] <= 1 for r in rows)
    metrics = json.loads((out / "metrics.json").read_text())
    for t in metrics["trials"]:  # the row of the kept epoch holds the scores metrics.json reports
        kept = next(r for r in rows if r["trial"] == t["trial"] and r["epoch"] == t["best_epoch"])
        assert kept["val_accuracy"] == pytest.approx(t["val_accuracy"])
        assert kept["train_accuracy"] == pytest.approx(t["train_accuracy"])
        assert max(r["val_accuracy"] for r in rows if r["trial"] == t["trial"]) == pytest.approx(t["val_accuracy"])
        assert [r["loss"] for r in rows if r["trial"] == t["trial"]][0] == pytest.approx(t["first_loss"])


def test_a_resumed_run_has_each_trials_rows_once(run, tmp_path):
    g, cfg, out = run
    import shutil

    copy = tmp_path / "a"
    shutil.copytree(out, copy)
    before = read_history(copy / "history.csv")
    # trial 2 wrote its rows, then the run stopped before metrics.json listed it: a rerun trains it again
    with open(copy / "history.csv", "a") as fh:
        fh.write("2,0,9.0,0.5,0.5,0.7,1.0\n2,1,9.0,0.5,0.5,0.7,1.0\n")
    run_trials(str(g), cfg, trials=3, output=copy, progress=False, log=lambda m: None)
    after = read_history(copy / "history.csv")
    assert after[:6] == before
    assert [(r["trial"], r["epoch"]) for r in after[6:]] == [(2, 0), (2, 1), (2, 2)]
    assert all(r["loss"] != 9.0 for r in after)


def test_verbose_prints_a_line_per_epoch(tmp_path, capsys):
    g = _ring(tmp_path / "g")
    assert main(["train", "--dataset", str(g), "--epochs", "3", "--hidden", "8", "--output", str(tmp_path / "a"),
                 "-v"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": epoch " in line and "/3: loss " in line]
    assert [line.split(": epoch ")[1][:3] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all("val " in line and "best " in line for line in lines)
    assert main(["train", "--dataset", str(g), "--epochs", "3", "--hidden", "8", "--output", str(tmp_path / "b")]) == 0
    assert ": epoch 1/3" not in capsys.readouterr().err  # without -v: no line per epoch


def test_plot_draws_a_finished_runs_curves(run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    _, _, out = run
    assert main(["plot", str(out), "--output", str(tmp_path / "c.png")]) == 0
    assert "saved to" in capsys.readouterr().out
    png, svg = tmp_path / "c.png", tmp_path / "c.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = svg.read_text()
    assert "<svg" in text and "trial 0" in text and "trial 1" in text and "validation accuracy" in text
    assert main(["plot", str(out), "-q"]) == 0 and (out / "curves.png").is_file() and (out / "curves.svg").is_file()


def test_plot_says_what_is_missing(run, tmp_path, capsys, monkeypatch):
    _, _, out = run
    assert main(["plot", str(tmp_path)]) == 2
    assert "holds no history.csv" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if it were not installed
    assert main(["plot", str(out), "--output", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs matplotlib" in err and "pip install" in err
    assert not (tmp_path / "c.png").exists()


def test_tensorboard_gets_every_epochs_scalars(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    g = _ring(tmp_path / "g")
    assert main(["train", "--dataset", str(g), "--epochs", "3", "--hidden", "8", "--trials", "2", "--metric",
                 "accuracy", "--output", str(tmp_path / "a"), "--tensorboard", str(tmp_path / "tb"), "-q"]) == 0
    rows = read_history(tmp_path / "a" / "history.csv")
    for trial in (0, 1):
        events = EventAccumulator(str(tmp_path / "tb" / f"trial_{trial}"))
        events.Reload()
        assert set(events.Tags()["scalars"]) == {"loss/train", "loss/val", "accuracy/train", "accuracy/val",
                                                 "seconds/epoch"}
        mine = [r for r in rows if r["trial"] == trial]
        for tag, key in (("loss/train", "loss"), ("accuracy/val", "val_accuracy")):
            assert [(e.step, e.value) for e in events.Scalars(tag)] == [
                (r["epoch"], pytest.approx(r[key], rel=1e-6)) for r in mine]


def test_tensorboard_missing_is_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch.utils.tensorboard", None)  # as if it were not installed
    g = _ring(tmp_path / "g")
    assert main(["train", "--dataset", str(g), "--epochs", "3", "--output", str(tmp_path / "a"), "--tensorboard",
                 str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tensorboard needs the tensorboard package" in err and "pip install" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "tb").exists()
