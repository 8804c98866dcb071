"""The ``:published`` (Platonov et al.) and ``:classic`` (Luo et al.) rows: their protocols, run small."""
import pytest
import torch

from gbpn.baselines.published import (CLASSIC, PUBLISHED, PUBLISHED_MODELS, Protocol, classic_setting, fit_classic,
                                      fit_published)
from gbpn.data import random_split
from gbpn.errors import GBPNError

from test_baselines import planted_graph

SMALL = Protocol(hidden=16, steps=20, depths=(1, 2, 3), heads=2, lr=1e-2)


@pytest.fixture(scope="module")
def graph():
    return planted_graph(n=60)


@pytest.fixture(scope="module")
def masks(graph):
    return random_split(graph.y, 0.3, 0.2, seed=0)


def test_every_depth_is_trained_and_validation_picks_one(graph, masks):
    m = fit_published("sage", graph, masks, protocol=SMALL)
    vals = [m[f"depth{d}__val_accuracy"] for d in SMALL.depths]
    assert m["published__depth"] == SMALL.depths[vals.index(max(vals))]  # the first best: the shallower
    assert m["val_accuracy"] == max(vals)
    assert m["test_accuracy"] == m[f"depth{m['published__depth']}__test_accuracy"]
    assert m["baseline"] == "sage:published" and m["published__lr"] == SMALL.lr


def test_published_protocol_never_reads_test_labels(graph, masks):
    a = fit_published("gat-sep", graph, masks, protocol=SMALL)
    shuffled = graph.clone()
    test = masks[2]
    shuffled.y = graph.y.clone()
    shuffled.y[test] = (graph.y[test] + 1) % 2  # every test label wrong
    b = fit_published("gat-sep", shuffled, masks, protocol=SMALL)
    assert a["published__depth"] == b["published__depth"] and a["best_epoch"] == b["best_epoch"]
    assert a["val_accuracy"] == b["val_accuracy"] and a["test_accuracy"] + b["test_accuracy"] == pytest.approx(1.0)


def test_the_published_defaults_are_the_papers():
    p = Protocol()
    assert (p.hidden, p.dropout, p.lr, p.weight_decay, p.steps, p.depths, p.heads) == \
        (512, 0.2, 3e-5, 0.0, 1000, (1, 2, 3, 4, 5), 8)
    assert set(PUBLISHED) == {"resnet", "gcn", "sage", "gat", "gat-sep", "gt", "gt-sep"}
    assert "gat-sep:published" in PUBLISHED_MODELS and "sage:classic" in PUBLISHED_MODELS


def test_classic_runs_a_published_setting(graph, masks):
    setting = dict(classic_setting("sage", "chameleon-filtered"), hidden=16, epochs=15)
    m = fit_classic("sage", graph, masks, setting=setting)
    assert m["baseline"] == "sage:classic" and m["classic__norm"] == "batch" and m["classic__num_layers"] == 4
    assert 0 <= m["best_epoch"] < 15 and m["epochs_run"] == 15


def test_classic_settings_name_the_data_sets_that_have_one():
    assert {d for d, _ in CLASSIC} == {"chameleon-filtered", "squirrel-filtered"}
    with pytest.raises(GBPNError, match="chameleon-filtered, squirrel-filtered.*gcn:tuned"):
        classic_setting("gcn", "cora")
    with pytest.raises(GBPNError, match="unknown classic model"):
        classic_setting("gin", "cora")
    with pytest.raises(GBPNError, match="unknown published model"):
        fit_published("gin", planted_graph(n=20), random_split(torch.arange(20) % 2, 0.3, 0.2, 0))


@pytest.mark.parametrize("potential,options", [("res-gat-sep", {"potential_blocks": 2}),
                                               ("classic-gcn", {"potential_layers": 4, "residual": True,
                                                                "batch_norm": True})])
def test_config_reruns_a_published_protocol_run_exactly(tmp_path, potential, options):
    import json

    from gbpn import api
    from gbpn.train.config import TrainConfig

    # GBPN on a published encoder at the published protocol's optimiser settings (epochs cut short)
    cfg = TrainConfig(potential=potential, hidden=16, dropout=0.2, lr=3e-5, weight_decay=0.0, epochs=4, **options)
    first, _ = api.train("synth-ising+", cfg, output=str(tmp_path / "a"), progress=False)
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())["train"]
    assert recorded["encoder"]["potential"] == potential and recorded["optim"]["lr"] == 3e-5
    rec = api.recorded_run(str(tmp_path / "a" / "config.json"))
    again, _ = api.train(rec.dataset, rec.config, rec.trials, rec.seed, str(tmp_path / "b"), progress=False)
    keys = ("val_accuracy", "test_accuracy", "best_epoch", "last_loss")
    assert {k: again["trials"][0][k] for k in keys} == {k: first["trials"][0][k] for k in keys}


def test_a_classic_row_on_a_data_set_without_a_published_setting_stops_before_the_grid(capsys, tmp_path):
    from gbpn.cli import main

    out = tmp_path / "grid"
    assert main(["benchmark", "--models", "sage:classic", "--datasets", "synth-ising+", "--trials", "1",
                 "--output", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Luo et al." in err[0] and "synth-ising+" in err[0] and "sage:tuned" in err[0]
    assert not out.exists()
