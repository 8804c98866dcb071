import json

import numpy as np
import pytest

import gbpn.experiments.benchmark as benchmark
import gbpn.experiments.tables as tables
from gbpn.experiments.benchmark import Grid
from gbpn.errors import GBPNError

pytestmark = pytest.mark.slow  # grids of whole trainings


def test_rows_keep_the_learned_coupling_and_one_trial_shows_no_spread(tmp_path):
    table = benchmark.run_grid(Grid(["gbpn", "mlp"], ["synth-ising+"], trials=1, output=tmp_path, epochs=2),
                               progress=False, log=lambda m: None)
    row = json.loads((tmp_path / "rows" / "synth-ising+__gbpn__0.json").read_text())
    H = np.asarray(row["coupling"])
    assert H.shape == (2, 2) and np.allclose(H, H.T) and (H > 0).all()
    assert "±" not in table


def test_quick_table2_is_the_four_reference_grids(monkeypatch):
    seen = {}
    monkeypatch.setattr(benchmark, "run_grid", lambda grid, **kw: seen.update(
        datasets=grid.datasets, trials=grid.trials, epochs=grid.epochs) or "")
    benchmark.run_preset("table2", "unused", quick=True)
    assert seen == {"datasets": ["ising+", "ising-", "mrf+", "mrf-"], "trials": 2, "epochs": 100}
    benchmark.run_preset("table2", "unused")
    assert len(seen["datasets"]) == 8 and seen["trials"] == 10


def test_quick_leaves_out_auto_and_the_full_preset_keeps_it(monkeypatch):
    seen = {}
    monkeypatch.setattr(benchmark, "run_grid", lambda grid, **kw: seen.update(
        models=grid.models) or "")
    benchmark.run_preset("table3", "unused", quick=True)
    assert "gbpn:auto" not in seen["models"] and "gbpn" in seen["models"]
    benchmark.run_preset("table3", "unused")
    assert "gbpn:auto" in seen["models"]


@pytest.mark.parametrize("metric", ["roc_auc", "macro_f1"])
def test_baselines_select_and_report_the_chosen_metric(tmp_path, metric):
    models = ["mlp", "gcn", "lp", "cs", "gmnn", "gbpn"]
    benchmark.run_grid(Grid(models, ["synth-ising+"], trials=1, output=tmp_path, epochs=4, metric=metric),
                       progress=False, log=lambda m: None)
    for m in models:
        row = json.loads((tmp_path / "rows" / f"synth-ising+__{m}__0.json").read_text())
        assert 0.0 <= row[f"test_{metric}"] <= 1.0 and 0.0 <= row[f"val_{metric}"] <= 1.0, m
    with pytest.raises(GBPNError, match="metric"):  # a grid keeps its criterion
        benchmark.run_grid(Grid(models, ["synth-ising+"], trials=1, output=tmp_path, epochs=4, metric="accuracy"),
                           progress=False, log=lambda m: None)


def test_lp_alpha_is_chosen_on_the_validation_metric():
    from gbpn.baselines import fit_baseline
    from gbpn.data import load_dataset
    from gbpn.data.splits import random_split

    data = load_dataset("synth-ising+")
    masks = random_split(data.y, seed=0)
    by_f1 = fit_baseline("lp", data, masks, metric="macro_f1")
    by_acc = fit_baseline("lp", data, masks)
    assert by_f1["metric"] == "macro_f1" and "metric" not in by_acc
    from gbpn.baselines import _fit_lp

    acc_choice = _fit_lp(data, masks, "macro_f1", alphas=[by_acc["alpha"]])  # the accuracy pick, scored by F1
    assert by_f1["val_macro_f1"] >= acc_choice["val_macro_f1"]


def test_save_predictions_writes_every_runs_probabilities_and_gbpn_checkpoints(tmp_path, capsys):
    from gbpn.cli import main
    from gbpn.data import load_dataset, random_split

    models = ["gbpn", "lp", "cs", "gcn", "gmnn"]
    assert main(["benchmark", "--models", *models, "--datasets", "synth-ising+", "--trials", "1", "--epochs", "3",
                 "--save-predictions", "--output", str(tmp_path), "-q"]) == 0
    data = load_dataset("synth-ising+")
    test = random_split(data.y, seed=0)[2].numpy()
    y = data.y.numpy()
    for m in models:
        row = json.loads((tmp_path / "rows" / f"synth-ising+__{m}__0.json").read_text())
        pred = np.genfromtxt(tmp_path / "predictions" / f"synth-ising+__{m}__0.csv", delimiter=",", names=True)
        probs = np.stack([pred["p_0"], pred["p_1"]], 1)
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
        # the saved output is the selected model's: it scores the row's test accuracy
        assert (probs[test].argmax(1) == y[test]).mean() == pytest.approx(row["test_accuracy"], abs=1e-6), m
    assert main(["predict", "--checkpoint", str(tmp_path / "checkpoints" / "synth-ising+__gbpn__0.pt"),
                 "--output", str(tmp_path / "again.csv"), "-q"]) == 0
    again = np.genfromtxt(tmp_path / "again.csv", delimiter=",", names=True)
    saved = np.genfromtxt(tmp_path / "predictions" / "synth-ising+__gbpn__0.csv", delimiter=",", names=True)
    np.testing.assert_allclose(again["p_0"], saved["p_0"], atol=1e-5)


def _auto_row(trial, test, candidates=True):
    row = {"dataset": "g", "model": "gbpn:auto", "trial": trial, "test_accuracy": test, "potential": "mlp"}
    if candidates:
        row.update({"mlp__test_accuracy": test, "sign__test_accuracy": test + 0.1})
    return row


def test_encoder_table_counts_the_candidate_scores_it_has():
    rows = [_auto_row(0, 0.5, candidates=False), _auto_row(1, 0.6), _auto_row(2, 0.7),
            {"dataset": "g", "model": "gcn", "trial": 0, "test_accuracy": 0.4}]
    line = tables.potential_table(rows, ["g"]).splitlines()[2]
    # auto over its 3 trials; each candidate over the 2 rows that recorded it, and says so
    assert "| 60.0 ± 10.0 |" in line and "65.0 ± 7.1 (n=2)" in line and "75.0 ± 7.1 (n=2)" in line
    assert "accuracy (n=3)" in line and "gcn 40.0" in line
    # a data set none of whose rows recorded the candidates shows a dash, not NaN
    line = tables.potential_table([_auto_row(0, 0.5, candidates=False), _auto_row(1, 0.6)] +
                                     [dict(_auto_row(t, 0.7, candidates=False), dataset="h") for t in (0, 1)],
                                     ["g", "h"]).splitlines()[3]
    assert line.startswith("| h |") and "nan" not in line and "| – | – |" in line


def test_results_csv_keeps_the_candidates_scores(tmp_path):
    benchmark.run_grid(Grid(["gbpn:auto"], ["synth-ising+"], trials=1, output=tmp_path, epochs=2),
                       progress=False, log=lambda m: None)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert "mlp__test_accuracy" in header and "mlp__val_accuracy" in header


def test_grid_auto_row_equals_an_auto_fit_of_the_same_trial(tmp_path):
    from gbpn.train.config import TrainConfig
    from gbpn.data.datasets import load_dataset
    from gbpn.data.splits import trial_split
    from gbpn.train.fit import fit

    benchmark.run_grid(Grid(["gbpn:auto"], ["synth-ising+"], trials=1, output=tmp_path, epochs=3),
                       progress=False, log=lambda m: None)
    row = json.loads((tmp_path / "rows" / "synth-ising+__gbpn:auto__0.json").read_text())
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=3, potential="auto"), seed=0, masks=trial_split(data, 0, 0)[0])
    assert row["potential"] == res.metrics["potential"]
    assert row["test_accuracy"] == res.metrics["test_accuracy"]
    for cand in res.metrics["auto_candidates"]:
        assert row[f"{cand['potential']}__val_accuracy"] == cand["val_accuracy"]
        assert row[f"{cand['potential']}__test_accuracy"] == cand["test_accuracy"]
    # the candidates are rows of their own, the MLP one under the plain variant's name
    assert {p.name for p in (tmp_path / "rows").glob("*.json")} == {
        f"synth-ising+__{m}__0.json" for m in ("gbpn", "gbpn:sign", "gbpn:sage", "gbpn:gcn-mixed", "gbpn:dagnn", "gbpn:linkx",
                                               "gbpn:auto")}


def test_auto_shares_candidate_runs_and_a_new_candidate_trains_only_itself(tmp_path, monkeypatch):
    import gbpn.models.encoders as encoders

    ran = []
    real = benchmark.run_one
    monkeypatch.setattr(benchmark, "run_one", lambda m, *a, **k: ran.append(m) or real(m, *a, **k))
    monkeypatch.setattr(encoders, "AUTO_CANDIDATES", ({"potential": "mlp"}, {"potential": "sign"}))
    grid, quiet = dict(trials=1, output=tmp_path, epochs=2), dict(progress=False, log=lambda m: None)
    benchmark.run_grid(Grid(["gbpn", "gbpn:auto"], ["synth-ising+"], **grid), **quiet)
    assert sorted(ran) == ["gbpn", "gbpn:sign"]  # gbpn is trained once, for itself and as a candidate
    monkeypatch.setattr(encoders, "AUTO_CANDIDATES", encoders.AUTO_CANDIDATES + ({"potential": "sage"},))
    (tmp_path / "rows" / "synth-ising+__gbpn:auto__0.json").unlink()  # the auto row is recomposed
    ran.clear()
    benchmark.run_grid(Grid(["gbpn:auto"], ["synth-ising+"], **grid), **quiet)
    assert ran == ["gbpn:sage"]
    row = json.loads((tmp_path / "rows" / "synth-ising+__gbpn:auto__0.json").read_text())
    assert {k.split("__")[0] for k in row if "__" in k} == {"mlp", "sign", "sage"}


def test_compose_auto_picks_on_validation_only():
    members = [("gbpn", "mlp"), ("gbpn:sign", "sign")]
    rows = [{"val_accuracy": 0.8, "test_accuracy": 0.1, "seconds": 1.0},
            {"val_accuracy": 0.7, "test_accuracy": 0.9, "seconds": 2.0}]
    out = benchmark.compose_auto(members, rows, "accuracy")
    assert out["potential"] == "mlp" and out["test_accuracy"] == 0.1 and out["seconds"] == 3.0
    assert out["sign__test_accuracy"] == 0.9 and out["mlp__val_accuracy"] == 0.8
    assert "seconds" not in benchmark.compose_auto(members, [rows[0], {"val_accuracy": 0.9, "test_accuracy": 0.2}],
                                                   "accuracy")


def test_results_csv_neutralises_a_data_set_folder_named_like_a_formula(tmp_path):
    """OWASP CSV injection: a bring-your-own folder named ``=1+1`` is a cell of results.csv."""
    import csv

    rng = np.random.default_rng(0)
    g = tmp_path / "=1+1"
    g.mkdir()
    y = np.arange(40) * 2 // 40
    np.savetxt(g / "edges.csv", np.stack([np.arange(40), (np.arange(40) + 1) % 40], 1), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", y[:, None] + rng.normal(0, 1.0, (40, 2)), delimiter=",")
    np.savetxt(g / "labels.csv", y, fmt="%d")
    benchmark.run_grid(Grid(["mlp"], [str(g)], trials=1, output=tmp_path / "out", epochs=2),
                       progress=False, log=lambda m: None)
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert [r["dataset"] for r in rows] == ["'=1+1"] and float(rows[0]["test_accuracy"]) >= 0
