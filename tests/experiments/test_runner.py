"""What a run folder records: resolved settings, strict JSON, the checkpoint it keeps."""
import json
import math

import numpy as np
import pytest
import torch

from gbpn.train.config import TrainConfig
from gbpn.experiments.runner import run_trials
from gbpn.io import write_json
from gbpn.train.metrics import default_metric


def _strict(path):
    """The file's JSON; fails on NaN / Infinity, which strict parsers reject."""
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}")
    return json.loads(path.read_text(), parse_constant=refuse)


def _binary_folder(path, n=80, minority=0.25, seed=0):
    """A ring whose labels are binary with ``minority`` of the nodes in class 1."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    y = (rng.permutation(n) < int(minority * n)).astype(int)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(path / "features.csv", y[:, None] + rng.normal(0, 1.0, (n, 2)), delimiter=",")
    np.savetxt(path / "labels.csv", y, fmt="%d")
    return path


def test_auto_metric_is_a_property_of_the_graph_not_of_a_split():
    y = torch.tensor([1] * 25 + [0] * 75 + [-1] * 20)  # unlabelled nodes do not count
    assert default_metric(y, 2) == "roc_auc"
    # the old rule read the training mask: a split holding 40% of class 1 chose accuracy for that trial only
    assert default_metric(torch.tensor([1] * 30 + [0] * 70), 2) == "accuracy"


def test_run_records_the_metric_dropout_and_tree_depth_it_used(tmp_path):
    g = _binary_folder(tmp_path / "g")
    cfg = TrainConfig(epochs=3, hidden=8, batch_size=32, num_steps=2)
    run_trials(str(g), cfg, trials=2, output=tmp_path / "a", progress=False, log=lambda m: None)
    whole = _strict(tmp_path / "a" / "config.json")
    rec = whole["train"]
    assert rec["device"] == "cpu" and whole["device_used"] == "cpu"
    # the dropout by the rule for 2 features and 24 training nodes
    assert (rec["evaluation"]["metric"] == "roc_auc" and rec["model"]["dropout"] == pytest.approx(0.3)
            and rec["sampling"]["num_hops"] == 2)
    metrics = _strict(tmp_path / "a" / "metrics.json")
    assert all("val_roc_auc" in t and "test_roc_auc" in t for t in metrics["trials"])
    # a folder written before these were recorded resolved resumes as the same run
    old = json.loads((tmp_path / "a" / "config.json").read_text())
    old["train"] = {**TrainConfig.from_dict(old["train"]).flat_dict(), "metric": "auto", "dropout": None,
                    "num_hops": None}  # flat, as config.json was before the config's parts
    del old["device_used"]
    (tmp_path / "a" / "config.json").write_text(json.dumps(old))
    msgs = []
    run_trials(str(g), cfg, trials=3, output=tmp_path / "a", progress=False, log=msgs.append)
    assert any("2 of 3 trials already finished" in m for m in msgs)
    assert len(_strict(tmp_path / "a" / "metrics.json")["trials"]) == 3


def test_undefined_scores_are_written_as_null(tmp_path):
    write_json(tmp_path / "m.json", {"auc": float("nan"), "rows": [{"x": math.inf}, 1.5], "n": np.float64("nan")})
    assert _strict(tmp_path / "m.json") == {"auc": None, "rows": [{"x": None}, 1.5], "n": None}


def test_a_run_without_validation_nodes_still_keeps_a_checkpoint(tmp_path):
    g = _binary_folder(tmp_path / "g", minority=0.5)
    cfg = TrainConfig(epochs=2, hidden=8, val_frac=0.0)
    res = run_trials(str(g), cfg, trials=2, output=tmp_path / "a", progress=False, log=lambda m: None)
    assert all(math.isnan(t["val_accuracy"]) for t in res["trials"])
    assert (tmp_path / "a" / "model.pt").is_file()
    assert all(t["val_accuracy"] is None for t in _strict(tmp_path / "a" / "metrics.json")["trials"])
    # resuming reads the nulls back
    run_trials(str(g), cfg, trials=3, output=tmp_path / "a", progress=False, log=lambda m: None)
    assert len(_strict(tmp_path / "a" / "metrics.json")["trials"]) == 3


def test_device_auto_is_recorded_as_asked_and_as_used(tmp_path):
    g = _binary_folder(tmp_path / "g", minority=0.5)
    cfg = TrainConfig(epochs=2, hidden=8, device="auto")
    run_trials(str(g), cfg, trials=1, output=tmp_path / "a", progress=False, log=lambda m: None)
    rec = _strict(tmp_path / "a" / "config.json")
    # "auto" reruns anywhere (--config on a machine without the GPU it found); the device used is beside it
    assert rec["train"]["device"] == "auto" and rec["device_used"] == ("cuda" if torch.cuda.is_available() else "cpu")
    msgs = []
    run_trials(str(g), cfg, trials=2, output=tmp_path / "a", progress=False, log=msgs.append)
    assert any("1 of 2 trials already finished" in m for m in msgs)


def test_a_folder_whose_trials_chose_another_metric_is_not_resumed(tmp_path):
    g = _binary_folder(tmp_path / "g")
    cfg = TrainConfig(epochs=2, hidden=8)
    run_trials(str(g), cfg, trials=1, output=tmp_path / "a", progress=False, log=lambda m: None)
    rec = json.loads((tmp_path / "a" / "metrics.json").read_text())
    rec["trials"][0]["metric"] = "macro_f1"  # as an old per-trial "auto" could have chosen
    (tmp_path / "a" / "metrics.json").write_text(json.dumps(rec))
    with pytest.raises(Exception, match="selected on another metric than this run's roc_auc"):
        run_trials(str(g), cfg, trials=2, output=tmp_path / "a", progress=False, log=lambda m: None)
