"""The budgeted search (gbpn.train.search), --potential auto --budget, resuming auto trials, tuned baselines."""
import json
import math

import pytest

from gbpn.errors import GBPNError
from gbpn.train.search import plan, sample, successive_halving


def toy(scores, slopes=None):
    """A unit whose validation score is known: ``scores[i] + slopes[i] * epochs``; its test score is the
    opposite, so a search that read it would choose otherwise."""
    calls = []

    def train(i, params, epochs):
        calls.append((i, epochs))
        val = scores[i] + (slopes[i] * epochs if slopes else 0.0)
        return {"val": val, "test": -val, "epochs_run": epochs}
    return train, calls


def test_successive_halving_keeps_the_best_third_at_each_rung():
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6]
    train, calls = toy(scores)
    best, records = successive_halving([{"c": i} for i in range(9)], [(9, 1), (3, 3)], train)
    assert sorted(i for i, e in calls if e == 1) == list(range(9))
    assert sorted(i for i, e in calls if e == 3) == [1, 4, 6]  # the first rung's top three, never by test score
    assert best == 1
    assert [len(r["rungs"]) for r in records] == [1, 2, 1, 1, 2, 1, 2, 1, 1]
    assert records[4]["rungs"][1] == {"epochs": 3, "val": 0.8, "test": -0.8, "epochs_run": 3}


def test_successive_halving_ranks_each_rung_on_its_own_scores():
    # config 2 starts worst but learns fastest: it must survive rung 1 to win rung 2
    scores, slopes = [0.50, 0.52, 0.45, 0.10], [0.0, 0.0, 0.1, 0.5]
    train, calls = toy(scores, slopes)
    best, _ = successive_halving([{}] * 4, [(4, 1), (2, 2)], train)
    # rung 1 (1 epoch): 0.50, 0.52, 0.55, 0.60 -> 3 and 2 go on; rung 2 (2 epochs): 0.65, 1.10 -> 3
    assert sorted(i for i, e in calls if e == 2) == [2, 3] and best == 3


def test_ties_keep_the_earlier_configuration_and_nan_never_goes_on():
    train, _ = toy([0.5, float("nan"), 0.5, 0.4])
    best, records = successive_halving([{}] * 4, [(4, 1)], train)
    assert best == 0
    train, _ = toy([float("nan"), float("nan"), 0.1])
    assert successive_halving([{}] * 3, [(3, 1)], train)[0] == 2


@pytest.mark.parametrize("epochs,budget,patience", [(500, 2, None), (500, 1.5, None), (500, 3, None), (100, 2, None),
                                                    (20, 2, None), (7, 1.2, None), (3, 1, None), (500, 2, 100),
                                                    (500, 3, 50), (100, 2, 80), (20, 2, 5)])
def test_the_search_spends_at_most_the_budget_in_epochs(epochs, budget, patience):
    p = plan(epochs, budget, patience)
    train, calls = toy([(7 * i) % 11 / 11 for i in range(p.configurations)])
    successive_halving([{}] * p.configurations, p.rungs, train)
    run = epochs if patience is None else min(epochs, 2 * patience)  # one plain run's epochs under patience
    assert p.final == epochs and p.run == run  # the configuration kept trains as a plain run does
    assert sum(e for _, e in calls) + run == p.epochs <= budget * run


def test_the_default_budget_searches_many_configurations():
    p = plan(500, 2)
    assert p.epochs <= 1000 and p.configurations >= 11 and len(p.rungs) >= 2
    # with patience 100 a plain run stops about 200 epochs in: the rungs get 200 epochs, not 500
    p = plan(500, 2, patience=100)
    assert p.rungs == ((11, 10), (3, 30)) and p.epochs == 400


def test_a_budget_below_one_training_is_refused():
    for budget in (0.5, float("nan"), -1):
        with pytest.raises(GBPNError, match="at least 1"):
            plan(500, budget)


def test_sample_puts_anchors_first_and_draws_distinct_seeded_configurations():
    space = {"potential": ["a", "b"], "depth": [1, 2, 3], "lr": [0.1, 0.01]}
    reads = lambda name, params: name != "depth" or params["potential"] == "b"  # noqa: E731
    first = sample(space, 6, seed=3, anchors=[{"potential": "a", "lr": 0.1}], reads=reads)
    assert first[0] == {"potential": "a", "lr": 0.1}
    assert len({json.dumps(c, sort_keys=True) for c in first}) == 6
    assert all(("depth" in c) == (c["potential"] == "b") for c in first)
    assert sample(space, 6, seed=3, anchors=[{"potential": "a", "lr": 0.1}], reads=reads) == first
    assert len(sample(space, 50, seed=0, reads=reads)) == 2 + 3 * 2  # the whole space (a: 2 lr; b: 3 depths x 2 lr), no more


# --- whole trainings ---------------------------------------------------------------------------------------

def _without_seconds(obj):
    if isinstance(obj, dict):
        return {k: _without_seconds(v) for k, v in obj.items() if "seconds" not in k}
    if isinstance(obj, list):
        return [_without_seconds(v) for v in obj]
    return obj


@pytest.fixture(scope="module")
def ising():
    from gbpn.data import load_dataset

    return load_dataset("synth-ising+")


@pytest.mark.slow
def test_budgeted_auto_chooses_on_validation_only_within_its_budget(ising):
    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit

    cfg = TrainConfig(epochs=12, potential="auto", budget=2)
    res = fit(ising, cfg, seed=1)
    search = res.metrics["auto_search"]
    assert res.metrics["search_epochs"] <= 2 * 12 and search["planned_epochs"] <= search["budget_epochs"] == 24
    chosen = search["chosen"]["params"]
    assert res.metrics["potential"].split("-")[0] == chosen["potential"] and res.config.potential == chosen["potential"]
    last = [r for r in search["configurations"] if len(r["rungs"]) == len(search["rungs"])]
    assert search["chosen"]["id"] == max(last, key=lambda r: (r["rungs"][-1]["val"], -r["id"]))["id"]
    # test labels flipped: every validation score and the choice stay; the test score moves
    scrambled = ising.clone()
    scrambled.y = ising.y.clone()
    scrambled.y[res.masks[2]] = 1 - ising.y[res.masks[2]]
    other = fit(scrambled, cfg, seed=1, masks=res.masks)
    assert _without_seconds(other.metrics["auto_search"]) == _without_seconds(search)
    assert other.metrics["test_accuracy"] != res.metrics["test_accuracy"]


@pytest.mark.slow
def test_config_of_a_budgeted_run_reruns_its_search_exactly(tmp_path):
    from gbpn import api
    from gbpn.train.config import TrainConfig
    from gbpn.train.search import GBPN_SPACE

    first, out = api.train("synth-ising+", TrainConfig(epochs=9, potential="auto", budget=1.5), output=str(tmp_path / "a"),
                           progress=False)
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())["train"]
    assert recorded["optim"]["budget"] == 1.5 and recorded["optim"]["search_space"] == json.loads(json.dumps(GBPN_SPACE))
    assert not (tmp_path / "a" / "units").exists() or not any((tmp_path / "a" / "units").iterdir())
    rec = api.recorded_run(str(tmp_path / "a" / "config.json"))
    again, _ = api.train(rec.dataset, rec.config, rec.trials, rec.seed, str(tmp_path / "b"), progress=False)
    a, b = first["trials"][0], again["trials"][0]
    assert _without_seconds(a["auto_search"]) == _without_seconds(b["auto_search"])
    assert a["test_accuracy"] == b["test_accuracy"]


def _interrupting(monkeypatch, after):
    """``_fit_one`` counting its calls and raising KeyboardInterrupt at call ``after + 1`` (None: never)."""
    import gbpn.train.fit as fit_module

    real, calls = getattr(fit_module._fit_one, "original", fit_module._fit_one), []

    def counted(*args, **kw):
        if after is not None and len(calls) == after:
            raise KeyboardInterrupt
        calls.append(args[1])
        return real(*args, **kw)
    counted.original = real
    monkeypatch.setattr(fit_module, "_fit_one", counted)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("budget", [2, None])
def test_an_interrupted_auto_trial_resumes_without_retraining_finished_units(ising, tmp_path, monkeypatch, budget):
    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit

    cfg = TrainConfig(epochs=6 if budget else 3, hidden=32, potential="auto", budget=budget)
    whole = _interrupting(monkeypatch, None)
    reference = fit(ising, cfg, seed=2, units=tmp_path / "whole")
    total = len(whole)
    with pytest.raises(KeyboardInterrupt):
        _interrupting(monkeypatch, 3)
        fit(ising, cfg, seed=2, units=tmp_path / "cut")
    rerun = _interrupting(monkeypatch, None)
    resumed = fit(ising, cfg, seed=2, units=tmp_path / "cut")
    assert len(rerun) == total - 3  # the three finished units are read back, not trained
    keys = ("potential", "val_accuracy", "test_accuracy", "auto_candidates")
    assert {k: resumed.metrics.get(k) for k in keys} == {k: reference.metrics.get(k) for k in keys}
    assert _without_seconds(resumed.metrics.get("auto_search")) == _without_seconds(reference.metrics.get("auto_search"))
    # another configuration never reads these units
    other = _interrupting(monkeypatch, None)
    fit(ising, TrainConfig(epochs=cfg.epochs, hidden=16, potential="auto", budget=budget), seed=2, units=tmp_path / "cut")
    assert len(other) == total


@pytest.mark.slow
def test_tuned_baselines_search_within_the_budget_and_choose_on_validation(ising):
    from gbpn.baselines.tuned import fit_tuned
    from gbpn.data.splits import random_split

    masks = random_split(ising.y, 0.3, 0.2, 0)
    m = fit_tuned("gcn-sep", ising, masks, seed=0, epochs=9, budget=2)
    assert m["search_epochs"] <= 18 and m["search_configurations"] >= 2
    chosen = m["search"]["configurations"][m["search"]["chosen"]]
    assert m["tuned__num_layers"] == chosen["params"]["num_layers"]
    scrambled = ising.clone()
    scrambled.y = ising.y.clone()
    scrambled.y[masks[2]] = 1 - ising.y[masks[2]]
    other = fit_tuned("gcn-sep", scrambled, masks, seed=0, epochs=9, budget=2)
    assert _without_seconds(other["search"]) == _without_seconds(m["search"])
    with pytest.raises(GBPNError, match="unknown tuned baseline"):
        fit_tuned("gin", ising, masks)
    assert not math.isnan(m["test_accuracy"])


@pytest.mark.parametrize("argv", [["--potential", "mlp", "--budget", "2"], ["--potential", "auto", "--budget", "0.5"]])
def test_a_budget_without_auto_or_below_one_training_is_one_line_exit_2(argv, capsys, tmp_path):
    from gbpn.cli import main

    assert main(["train", "--dataset", "synth-ising+", "--epochs", "2", "--output", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget" in err[0] and "full trainings" in err[0]
    assert not (tmp_path / "r" / "metrics.json").exists()


@pytest.mark.slow
def test_gbpn_train_interrupted_between_auto_candidates_resumes_there(tmp_path, monkeypatch):
    from gbpn import api
    from gbpn.train.config import TrainConfig

    cfg = TrainConfig(epochs=3, hidden=16, potential="auto")
    calls = _interrupting(monkeypatch, None)
    clean, _ = api.train("synth-ising+", cfg, output=str(tmp_path / "clean"), progress=False)
    with pytest.raises(KeyboardInterrupt):
        _interrupting(monkeypatch, 2)
        api.train("synth-ising+", cfg, output=str(tmp_path / "cut"), progress=False)
    assert len(list((tmp_path / "cut" / "units" / "trial_0").glob("*/*.pt"))) == 2
    rerun = _interrupting(monkeypatch, None)
    resumed, _ = api.train("synth-ising+", cfg, output=str(tmp_path / "cut"), progress=False)
    assert len(rerun) == len(calls) - 2
    keys = ("potential", "val_accuracy", "test_accuracy", "auto_candidates")
    assert {k: resumed["trials"][0][k] for k in keys} == {k: clean["trials"][0][k] for k in keys}
    assert not (tmp_path / "cut" / "units" / "trial_0").exists()  # gone once the trial is recorded


@pytest.mark.slow
def test_a_tuned_benchmark_row_interrupted_mid_search_resumes_at_its_rungs(tmp_path, monkeypatch):
    import gbpn.baselines.tuned as tuned
    from gbpn.experiments.benchmark import run_grid

    real, calls = tuned.train_full_batch, []

    def counted(*args, **kw):
        if stop[0] is not None and len(calls) == stop[0]:
            raise KeyboardInterrupt
        calls.append(args[4])  # the epochs of each training
        return real(*args, **kw)
    monkeypatch.setattr(tuned, "train_full_batch", counted)
    grid = dict(models=["gcn-sep:tuned"], datasets=["synth-ising+"], trials=1, epochs=9, progress=False,
                log=lambda s: None)
    stop = [None]
    run_grid(output=tmp_path / "clean", **grid)
    total, calls[:] = len(calls), []
    stop[0] = 3
    with pytest.raises(KeyboardInterrupt):
        run_grid(output=tmp_path / "cut", **grid)
    stop[0], calls[:] = None, []
    run_grid(output=tmp_path / "cut", **grid)
    assert len(calls) == total - 3  # the three finished rungs are read back
    read = lambda folder: json.loads((folder / "rows" / "synth-ising+__gcn-sep:tuned__0.json").read_text())  # noqa: E731
    assert _without_seconds(read(tmp_path / "cut")) == _without_seconds(read(tmp_path / "clean"))
    assert not any((tmp_path / "cut" / "units").glob("*/*"))
