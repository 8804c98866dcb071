"""Predictions and explanations that say what they are: the true label and the split of every node."""
import csv
import json

import numpy as np
import pytest
import torch

from gbpn.cli import main


def _folder(path, n=60, seed=0):
    """A ring of classes ``a`` and ``b`` (class_names.txt), ten of its nodes unlabelled (-1)."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    y = (np.arange(n) * 2 // n).astype(int)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(path / "features.csv", y[:, None] + rng.normal(0, 1.0, (n, 2)), delimiter=",")
    y[::6] = -1
    np.savetxt(path / "labels.csv", y, fmt="%d")
    (path / "class_names.txt").write_text("a\nb\n")
    return path, y


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("columns")
    g, y = _folder(base / "g")
    out = base / "run"
    assert main(["train", "--dataset", str(g), "--epochs", "3", "--hidden", "8", "--trials", "2", "--save-trials",
                 "--output", str(out), "-q"]) == 0
    return g, y, out


def _expected_split(y, npz):
    split = np.where(y < 0, "unlabelled", "unused").astype(object)
    for name in ("train", "val", "test"):
        split[npz[name]] = name
    return split


def test_predictions_carry_the_true_label_and_the_checkpoints_split(run, tmp_path, capsys):
    g, y, out = run
    metrics = json.loads((out / "metrics.json").read_text())
    assert main(["predict", "--checkpoint", str(out / "model.pt"), "--output", str(tmp_path / "p.csv")]) == 0
    best = max(metrics["trials"], key=lambda t: t["val_accuracy"])  # model.pt's trial
    for path, trial in [(tmp_path / "p.csv", best)] + [(out / t["predictions"], t) for t in metrics["trials"]]:
        rows = _rows(path)
        assert list(rows[0])[:5] == ["node", "prediction", "label", "split", "known"]
        split = _expected_split(y, np.load(out / trial["split"]))
        assert [r["split"] for r in rows] == list(split)
        assert [r["label"] for r in rows] == ["" if v < 0 else "ab"[v] for v in y]
        assert all((r["known"] == "1") == (r["split"] == "train") for r in rows)  # gbpn clamps its training split
        test = [r for r in rows if r["split"] == "test"]
        accuracy = np.mean([r["prediction"] == r["label"] for r in test])
        assert accuracy == pytest.approx(trial["test_accuracy"])  # the columns score as the run did
    # on another graph than the checkpoint's, no split of its own: the column stays empty, the labels are that graph's
    other, y2 = _folder(tmp_path / "other", seed=1)
    assert main(["predict", "--checkpoint", str(out / "model.pt"), "--dataset", str(other), "--known", "none",
                 "--output", str(tmp_path / "q.csv"), "-q"]) == 0
    rows = _rows(tmp_path / "q.csv")
    assert {r["split"] for r in rows} == {""} and [r["label"] for r in rows] == ["" if v < 0 else "ab"[v] for v in y2]


def test_explain_says_the_nodes_split_and_true_label(run, tmp_path, capsys):
    _, y, out = run
    meta = torch.load(out / "model.pt", weights_only=True)
    trial = next(t for t in json.loads((out / "metrics.json").read_text())["trials"] if t["seed"] == meta["seed"])
    split = _expected_split(y, np.load(out / trial["split"]))
    test, free = int(np.flatnonzero(split == "test")[0]), int(np.flatnonzero(y < 0)[0])
    capsys.readouterr()
    assert main(["explain", "--checkpoint", str(out / "model.pt"), "--node", str(test),
                 "--json", str(tmp_path / "e.json")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"node {test} (test split, true label {'ab'[y[test]]}): predicted ")
    ex = json.loads((tmp_path / "e.json").read_text())
    assert ex["split"] == "test" and ex["label"] == "ab"[y[test]]
    assert main(["explain", "--checkpoint", str(out / "model.pt"), "--node", str(free)]) == 0
    assert capsys.readouterr().out.startswith(f"node {free} (unlabelled): predicted ")


def test_cora_and_citeseer_name_their_classes_in_label_order(data_dir):
    from gbpn.data import load_dataset

    # each class's size in the original data (LINQS): a name in the wrong place has another class's count
    sizes = {"cora": {"Case_Based": 298, "Genetic_Algorithms": 418, "Neural_Networks": 818,
                      "Probabilistic_Methods": 426, "Reinforcement_Learning": 217, "Rule_Learning": 180, "Theory": 351},
             "citeseer": {"Agents": 596, "AI": 249 + 15, "DB": 701, "IR": 668, "ML": 590, "HCI": 508}}
    for name, expected in sizes.items():  # (CiteSeer's 15 nodes absent from the Planetoid files get class 0)
        d = load_dataset(name, data_dir)
        counts = torch.bincount(d.y[d.y >= 0], minlength=d.num_classes).tolist()
        assert dict(zip(d.class_names, counts)) == expected


def test_predict_report_scores_the_unclamped_test_nodes_and_plot_draws_their_confusion(run, tmp_path, capsys):
    from sklearn.metrics import f1_score

    _, y, out = run
    metrics = json.loads((out / "metrics.json").read_text())
    best = max(metrics["trials"], key=lambda t: t["val_accuracy"])  # model.pt's trial
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(out / "model.pt"), "--report", "-q"]) == 0  # RUN/predictions.csv
    text = capsys.readouterr().out
    test = [r for r in _rows(out / "predictions.csv") if r["split"] == "test"]
    truth, guess = [r["label"] for r in test], [r["prediction"] for r in test]
    counts = [[sum(t == a and g == b for t, g in zip(truth, guess)) for b in "ab"] for a in "ab"]
    assert (f"test split, {len(test)} nodes: accuracy {100 * best['test_accuracy']:.2f}%, macro F1 "
            f"{100 * f1_score(truth, guess, labels=list('ab'), average='macro', zero_division=0):.2f}%") in text
    lines = text.splitlines()
    matrix = lines[lines.index(next(x for x in lines if x.startswith("confusion matrix"))) + 2:]
    assert [[int(v) for v in row.split()[2:]] for row in matrix] == counts  # rows "0 a", "1 b": true class
    # clamping the test labels leaves nothing to score, and says so
    code = main(["predict", "--checkpoint", str(out / "model.pt"), "--known", "labeled", "--report",
                 "--output", str(tmp_path / "k.csv"), "-q"])
    assert code == 2 and "clamped as evidence" in capsys.readouterr().err
    # gbpn plot draws the same matrix from the run's predictions.csv
    pytest.importorskip("matplotlib")
    from gbpn.experiments.report import read_predictions, score_report

    assert main(["plot", str(out), "--output", str(tmp_path / "fig" / "c")]) == 0
    assert (tmp_path / "fig" / "c-confusion.png").is_file() and (tmp_path / "fig" / "c-confusion.svg").is_file()
    t = read_predictions(out / "predictions.csv")
    assert score_report(t["predicted"], t["labels"], t["split"], t["known"], t["classes"])["confusion"] == counts
