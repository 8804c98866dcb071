"""The budgeted search (gbpn.train.search), --potential auto --budget, resuming auto trials, tuned baselines."""
import json
import math
from types import SimpleNamespace

import pytest
import torch

from gbpn.errors import GBPNError
from gbpn.train.search import Plan, at_fastest_lr, max_configurations, plan, sample, successive_halving


class Toy:
    """A session whose validation score is known, ``score + slope * epoch``, with a declared cost per epoch; its
    result's test score is the opposite, so a search that read it would choose otherwise. ``log`` gets
    ``(index, from_epoch, to_epoch)`` of every advance."""

    def __init__(self, i, score, slope, cost, log, final=100, loss=1.0, val_loss=1.0, val_loss_slope=0.0):
        self.i, self.score, self.slope, self.cost, self.log, self.loss = i, score, slope, cost, log, loss
        self.val_loss0, self.val_loss_slope = val_loss, val_loss_slope
        self.selection = SimpleNamespace(history=[], epochs=final)
        self.epoch = 0

    @property
    def val(self):
        return self.score + self.slope * self.epoch if self.epoch else -math.inf

    @property
    def val_loss(self):
        return self.val_loss0 + self.val_loss_slope * self.epoch if self.epoch else math.inf

    def advance(self, until, progress=False):
        until = min(until, self.selection.epochs)
        if until > self.epoch:
            self.log.append((self.i, self.epoch, until))
        self.selection.history += [{"loss": self.loss}] * (until - self.epoch)
        self.epoch = max(self.epoch, until)
        return self

    def finish(self, progress=False):
        self.advance(self.selection.epochs)
        return {"id": self.i, "val": self.val, "test": -self.val}

    def state_dict(self):
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]


def toy(scores, slopes=None, costs=None, losses=None, final=100, val_losses=None, val_loss_slopes=None):
    log = []

    def start(i, params):
        return Toy(i, scores[i], slopes[i] if slopes else 0.0, costs[i] if costs else 1.0, log, final,
                   losses[i] if losses else 1.0, val_losses[i] if val_losses else 1.0,
                   val_loss_slopes[i] if val_loss_slopes else 0.0)
    return start, log, lambda fn: (lambda s: (s, s.cost))(fn())


def halving(scores, first=1, budget=100.0, run=1000, final=100, anchors=0, **kw):
    start, log, measure = toy(scores, final=final, **kw)
    chosen, result, search = successive_halving([{"c": i} for i in range(len(scores))], start,
                                                Plan(first, 3, run, final, budget), measure=measure, anchors=anchors)
    return chosen, result, search, log


def test_successive_halving_keeps_the_best_third_at_each_rung_and_continues_it():
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6]
    # one run of 17 epochs at cost 1: 9 first epochs and a last rung planned for up to four (the best third by loss,
    # here tied, and the best score: it is among them), 8 left for the three: 2 epochs each, to epoch 3
    chosen, result, search, log = halving(scores, budget=2, run=17)
    assert halving(scores, budget=2, run=16)[2]["admitted"] == 8  # 9 first epochs and 4 x 2 would not fit 16
    assert search["rungs"] == [[9, 1], [3, 3]]
    assert sorted(i for i, a, b in log if (a, b) == (0, 1)) == list(range(9))  # each one's first epoch
    assert sorted(i for i, a, b in log if (a, b) == (1, 3)) == [1, 4, 6]  # the top three go on from epoch 1
    assert chosen == 1 and (1, 3, 100) in log and result == {"id": 1, "val": 0.9, "test": -0.9}
    assert not any(a == 0 and i in (1, 4, 6) and b > 1 for i, a, b in log)  # never trained again from the start
    records = search["configurations"]
    assert [len(r["rungs"]) for r in records] == [1, 2, 1, 1, 2, 1, 2, 1, 1]
    assert records[4]["rungs"][1] == {"epoch": 3, "val": 0.8, "loss": 1.0, "val_loss": 1.0, "epochs_run": 3}


def test_successive_halving_ranks_each_rung_on_its_own_scores():
    # config 2 is second after one epoch but learns faster than the leader: it wins the second rung
    chosen, *_, log = halving([0.60, 0.50, 0.45, 0.0, 0.0, 0.0], slopes=[0.0, 0.0, 0.1, 0.0, 0.0, 0.0])
    # epoch 1: 0.60, 0.50, 0.55, 0, 0, 0 -> 0 and 2 go on; epoch 3: 0.60, 0.75 -> 2
    assert sorted(i for i, a, b in log if a == 1) == [0, 2] and chosen == 2


def test_the_last_rung_goes_on_as_far_as_the_allowance_left_pays_for():
    # 9 configurations costing 1 (the third 3): first epochs 11 of an allowance of 1 x 40; the three finalists
    # (0.9, 0.8, 0.7: costs 1, 1, 1) share the 29 left: 9 more epochs each, to epoch 10
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6]
    costs = [1, 1, 3, 1, 1, 1, 1, 1, 1]
    _, _, search, log = halving(scores, costs=costs, budget=2, run=40, final=100)
    assert search["rungs"] == [[9, 1], [3, 10]] and sorted(i for i, a, b in log if (a, b) == (1, 10)) == [1, 4, 6]
    assert search["spent_cost"] <= search["allowance"] == 40
    # never past a run's epochs
    assert halving(scores, budget=10, run=12, final=100)[2]["rungs"] == [[9, 1], [3, 12]]


def test_a_cheap_configuration_that_falls_early_does_not_cut_the_finalists_comparison_short():
    # config 0 costs 0.5 and ranks last: the rungs are planned within 2 runs of 40 epochs of it (40), but the three
    # finalists cost 1 each, so the one kept is one of them and the last rung may spend 2 runs of 40 of it (80):
    # 80 - 8.5 (the first epochs) left, 23 more epochs each, to epoch 24 (at 40 - 8.5 it would stop at epoch 11)
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6]
    costs = [0.5, 1, 1, 1, 1, 1, 1, 1, 1]
    chosen, _, search, log = halving(scores, costs=costs, budget=3, run=40, final=100)
    assert search["admitted"] == 9 and search["rungs"] == [[9, 1], [3, 24]] and chosen == 1
    assert search["allowance"] == 80 and search["spent_cost"] <= 2 * 40 * costs[chosen]


def test_the_log_states_the_plan_that_runs_each_rungs_epochs_and_the_configuration_kept(caplog):
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7, 0.4, 0.6]
    costs = [1, 1, 3, 1, 1, 1, 1, 1, 1]
    configs = [{"potential": "sage", "hidden": 64 * (i + 1), "dropout": 0.5, "lr": 0.01, "separate": i % 2 == 0,
                "layers": 2} for i in range(9)]
    start, _, measure = toy(scores, costs=costs, final=100)
    with caplog.at_level("INFO", logger="gbpn"):
        chosen, _, search = successive_halving(configs, start, Plan(1, 3, 40, 100, 2), desc="t", measure=measure)
    lines = [r.getMessage() for r in caplog.records]
    assert search["rungs"] == [[9, 1], [3, 10]] and chosen == 1
    # the plan, once admitted: the last rung's epoch as the bounds it will fall in, the first rung's exactly
    plan_lines = [m for m in lines if "admitted;" in m]
    assert plan_lines == ["t: 9 of 9 configurations admitted; rungs (each from where the last stopped): 9 to epoch 1; "
                          "up to 4 to between epoch 3 and 40, as far as what is left of the allowance pays for; "
                          "the best then trains on to epoch 100 at most"]
    rung_lines = [m for m in lines if ": rung " in m]
    assert rung_lines[0].startswith("t: rung 1/2: 9 configurations trained to epoch 1 (0 more each); best val 90.00%")
    assert rung_lines[1].startswith("t: rung 2/2: 3 configurations trained to epoch 10 (9 more each); best val 90.00% "
                                    "(configuration 1: sage); configuration 1 trains on to the end")
    kept = [m for m in lines if "kept configuration" in m]
    assert kept == ["t: kept configuration 1 of 9 admitted: sage --hidden 128 --dropout 0.5 --lr 0.01 --no-separate "
                    "layers 2; it trained 100 epochs, the others 0.70 runs of 40 epochs of it at the counted costs (the "
                    "budget leaves them 1)"]


def test_a_search_of_one_rung_plans_its_epoch_exactly(caplog):
    with caplog.at_level("INFO", logger="gbpn"):
        _, _, search, _ = halving([0.9, 0.8], budget=2, run=20)
    assert search["rungs"] == [[2, 10]]  # 18 of the allowance's 20 epochs left after the first: 9 more each
    assert any(m.endswith("admitted; rungs (each from where the last stopped): 2 to epoch 10; the best then trains "
                          "on to epoch 100 at most") for m in (r.getMessage() for r in caplog.records))


def test_a_slow_learner_survives_the_first_rung_on_its_validation_loss():
    # after one epoch config 0 (a small learning rate) still predicts the majority class (0.40) while 1-5 have
    # moved (0.45-0.50) by fitting noise; its validation loss already falls fastest, and it ends the best
    scores, slopes = [0.40, 0.50, 0.48, 0.47, 0.46, 0.45], [0.05, 0.0, 0.0, 0.0, 0.0, 0.0]
    val_losses = [0.60, 0.70, 0.71, 0.72, 0.73, 0.74]
    chosen, *_, log = halving(scores, slopes=slopes, val_losses=val_losses, budget=2, run=20)
    assert 0 in {i for i, a, b in log if a == 1} and chosen == 0
    # ranked on the score at every rung, as before, it dies at the first one
    _, *_, log = halving(scores, slopes=slopes, budget=2, run=20)
    assert 0 not in {i for i, a, b in log if a == 1}


def test_a_fast_learner_grown_confident_survives_the_first_rung_on_its_score():
    # config 8 leads on the score after one epoch (0.45 against 0.20-0.35) but its confident predictions give it the
    # worst validation loss; it goes on beside the best third by loss and wins the last rung (unfiltered Squirrel's
    # LINKX at epoch 5). The rung passes four on, not three, only because the best score is not among the third.
    scores = [0.30, 0.35, 0.20, 0.25, 0.30, 0.22, 0.28, 0.24, 0.45]
    val_losses = [1.70, 1.71, 1.72, 1.80, 1.90, 2.00, 2.10, 2.20, 2.60]
    chosen, _, search, log = halving(scores, val_losses=val_losses, budget=2, run=40)
    assert sorted(i for i, a, b in log if a == 1) == [0, 1, 2, 8] and chosen == 8 and search["rungs"][1][0] == 4
    # ranked on the loss alone (the best score among the third) three go on, as before
    chosen, _, search, log = halving(scores[:8], val_losses=val_losses[:8], budget=2, run=40)
    assert sorted(i for i, a, b in log if a == 1) == [0, 1, 2] and chosen == 1 and search["rungs"][1][0] == 3


def test_an_anchor_that_fits_only_without_the_hedge_is_admitted_and_turns_it_off():
    # one run of 14 epochs at cost 1: six fit with the hedge (6 + 3 x 2); a seventh fits only without it (7 + 3 x 2,
    # not 7 + 4 x 2)
    scores = [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.7]
    _, _, search, _ = halving(scores, budget=2, run=14)
    assert search["admitted"] == 6 and search["hedge"] == 1
    _, _, search, log = halving(scores, budget=2, run=14, anchors=7)
    assert search["admitted"] == 7 and search["hedge"] == 0 and search["planned_cost"] <= 14
    assert sorted(i for i, a, b in log if a == 1) == [1, 4, 6]  # the best third alone goes on
    # where the hedge fits, anchors keep it
    assert halving(scores, budget=2, run=15, anchors=7)[2]["hedge"] == 1


def test_the_last_rung_ranks_on_the_score_not_the_loss():
    # the finalists: config 1 is better calibrated (lower validation loss) but config 0 scores higher; one rung
    chosen, _, search, _ = halving([0.9, 0.8], val_losses=[0.9, 0.1], budget=2, run=20)
    assert len(search["rungs"]) == 1 and chosen == 0


def test_ties_go_to_the_lower_loss_then_the_earlier_and_nan_never_goes_on():
    assert halving([0.5, float("nan"), 0.5, 0.4])[0] == 0
    assert halving([0.5, float("nan"), 0.5, 0.4], losses=[0.9, 0.1, 0.3, 0.1])[0] == 2
    assert halving([float("nan"), float("nan"), 0.1])[0] == 2


@pytest.mark.parametrize("budget,run,first", [(2, 200, 5), (1.5, 200, 5), (3, 100, 2), (2, 12, 1), (1.2, 7, 1),
                                              (1, 3, 1), (4, 50, 5)])
def test_the_search_spends_at_most_its_allowance_at_the_counted_costs(budget, run, first):
    scores = [(7 * i) % 11 / 11 for i in range(40)]
    costs = [1.0 + (5 * i) % 7 for i in range(40)]
    chosen, _, search, log = halving(scores, first=first, budget=budget, run=run, final=run, costs=costs)
    trained = {}
    for i, a, b in log:
        trained[i] = max(trained.get(i, 0), b)
    admitted = [r["id"] for r in search["configurations"] if r["admitted"]]
    assert admitted == list(range(len(admitted))) and chosen in admitted  # taken in order; the first never refused
    cheapest = min(costs[i] for i in admitted)
    rejected = [i for i in trained if i not in admitted]
    assert len(rejected) <= 1 and all(trained[i] == 1 for i in rejected)  # the one that did not fit: its first epoch
    spent = sum(costs[i] * e for i, e in trained.items() if i != chosen)
    assert spent == search["spent_cost"]
    # the rungs were planned within B - 1 runs of the cheapest admitted; the last rung spends up to B - 1 runs of
    # the cheapest finalist, and so of the one kept
    assert search["planned_cost"] <= (budget - 1) * run * cheapest
    last = len(search["rungs"])
    finalists = [i for i in admitted if len(search["configurations"][i]["rungs"]) == last]
    assert chosen in finalists and search["allowance"] == (budget - 1) * run * min(costs[i] for i in finalists)
    assert spent - sum(costs[i] for i in rejected) <= search["allowance"] + 1e-9
    assert search["allowance"] <= (budget - 1) * run * costs[chosen]


def test_a_costly_configuration_stops_the_admissions_and_a_cheap_one_shrinks_the_allowance():
    # 4 configurations of cost 1 fit their rungs (4 to epoch 1, 2 to epoch 3) in 1 run of 8 epochs; a fifth
    # costing 10 does not
    _, _, search, log = halving([0.1] * 6, costs=[1, 1, 1, 1, 10, 1], budget=2, run=8, final=8)
    assert search["admitted"] == 4 and (4, 0, 1) in log and not any(i == 5 for i, *_ in log)
    # the cheapest admitted sets the allowance: a config costing 0.1 would shrink it below the rungs planned
    _, _, search, _ = halving([0.1] * 3, costs=[1, 1, 0.1], budget=2, run=2, final=2)
    assert search["admitted"] == 2 and search["allowance"] == 2


def test_the_default_plan_starts_at_5_epochs_and_draws_configurations_for_its_allowance():
    p = plan(500, 2, patience=100)
    assert (p.first, p.eta, p.run, p.final) == (5, 3, 200, 500) and max_configurations(p, 6) == 40
    # a third rounded up and the best score go on: up to 4 of 8, 5 of 11; at most 4 (eta + 1) make the last rung
    assert p.rungs(8) == [(8, 5), (4, 15)] and p.rungs(9) == [(9, 5), (4, 15)] and p.rungs(1) == []
    assert p.rungs(11) == [(11, 5), (5, 15), (3, 45)] and p.rungs(4) == [(4, 5)]
    assert p.cost([1.0] * 11) == 11 * 5 + 5 * 10 + 3 * 30 and p.allowance([2.0, 1.0]) == 200
    assert plan(500, 2).run == 500 and plan(20, 2, patience=5).run == 10


def test_counted_cost_is_matrix_flops_plus_elements_written():
    from gbpn.train.cost import ELEMENT_FLOPS, counted

    a, b = torch.ones(30, 20), torch.ones(20, 10)
    out, cost = counted(lambda: (a @ b).relu())
    assert out.shape == (30, 10)
    assert cost == 2 * 30 * 20 * 10 + ELEMENT_FLOPS * (300 + 300)  # the product's and relu's outputs
    assert counted(lambda: torch.zeros(7).add_(1))[1] == ELEMENT_FLOPS * 14


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


def test_sample_stops_drawing_once_the_space_is_exhausted():
    """A budget asking for far more configurations than the space holds draws until none is new, not 100 n times."""
    space = {"potential": ["a", "b"], "depth": [1, 2, 3], "lr": [0.1, 0.01, 0.1]}  # 0.1 twice: one choice
    calls = []

    def reads(name, params):
        calls.append(name)
        return name != "depth" or params["potential"] == "b"

    configs = sample(space, 10**5, seed=0, anchors=[{"potential": "c"}], reads=reads)
    assert len(configs) == 1 + 2 + 3 * 2 and configs[0] == {"potential": "c"}  # the anchor, then the whole space
    assert len(calls) < 10**4  # the old loop made 100 n draws: 3e7 calls
    # a space larger than asked for gives what was asked for, as before
    assert len(sample({"x": list(range(100))}, 90, seed=1)) == 90


def test_anchors_start_at_the_fastest_learning_rate_of_the_space():
    assert at_fastest_lr({"potential": "a", "lr": 1e-3}, {"lr": [3e-3, 1e-2]}) == {"potential": "a", "lr": 1e-2}
    assert at_fastest_lr({"potential": "a"}, {"potential": ["a"]}) == {"potential": "a"}  # a space without lr


def test_budgeted_auto_and_tuned_baselines_draw_anchors_at_the_fastest_learning_rate(monkeypatch):
    from gbpn.baselines import tuned
    from gbpn.data import load_dataset
    from gbpn.train import auto
    from gbpn.train.config import TrainConfig

    seen = []

    def stop(configs, *args, **kwargs):  # the configurations the search would try, no training
        seen.append(list(configs))
        raise KeyboardInterrupt

    monkeypatch.setattr(auto, "successive_halving", stop)
    monkeypatch.setattr(tuned, "successive_halving", stop)
    data = load_dataset("synth-ising+")
    masks = (torch.arange(data.num_nodes) % 3 == 0, torch.arange(data.num_nodes) % 3 == 1,
             torch.arange(data.num_nodes) % 3 == 2)
    with pytest.raises(KeyboardInterrupt):
        auto.fit_budgeted(data, TrainConfig(epochs=12, potential="auto", budget=2, lr=1e-3), 0, masks, False, "t",
                          None, None)
    with pytest.raises(KeyboardInterrupt):
        tuned.fit_tuned("gcn", data, masks, epochs=12)
    gbpn_configs, gcn_configs = seen
    # exhaustive auto's encoders, then the published configurations, all at the fastest learning rate
    assert [c["potential"] for c in gbpn_configs[:9]] == ["mlp", "sign", "sage", "gcn", "dagnn", "linkx", "mlp",
                                                           "res-sage", "classic-gcn"]
    assert all(c["lr"] == 1e-2 for c in gbpn_configs[:9]) and {c["lr"] for c in gcn_configs[:2]} == {1e-2}
    # the MLP potential once more with a fast coupling, the run's own otherwise
    assert gbpn_configs[6] == {**gbpn_configs[0], "coupling_lr": 0.1}
    # the published configurations train on the plain cross-entropy; exhaustive auto's keep the run's weighting
    assert gbpn_configs[7] == {**gbpn_configs[7], "potential_blocks": 3, "hidden": 512, "dropout": 0.2,
                               "degree_weight": False}
    assert gbpn_configs[8] == {**gbpn_configs[8], "potential_layers": 4, "residual": True, "batch_norm": True,
                               "hidden": 256, "dropout": 0.7, "degree_weight": False}
    assert all(c["degree_weight"] for c in gbpn_configs[:6])
    assert gcn_configs[1] == {**gcn_configs[1], "num_layers": 4, "residual": True, "batch_norm": True}
    assert {c["lr"] for c in gbpn_configs + gcn_configs} <= {1e-3, 3e-3, 1e-2}
    # one normalisation per configuration: BatchNorm is not drawn beside LayerNorm
    assert not any(c.get("layer_norm") and c.get("batch_norm") for c in gbpn_configs + gcn_configs)


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
    assert search["admitted"] >= 3 and search["planned_cost"] <= search["allowance"]
    cheapest = min(r["cost"] for r in search["configurations"] if r["admitted"])
    assert search["allowance"] == pytest.approx(12 * cheapest)  # B - 1 = 1 run of 12 epochs of the cheapest
    chosen = search["chosen"]["params"]
    assert res.metrics["potential"].split("-")[0] == chosen["potential"] and res.config.potential == chosen["potential"]
    last = [r for r in search["configurations"] if len(r["rungs"]) == len(search["rungs"])]
    assert search["chosen"]["id"] == max(last, key=lambda r: (r["rungs"][-1]["val"], -r["rungs"][-1]["loss"],
                                                              -r["id"]))["id"]
    # the configuration kept trained on where its rungs stopped: its result is a plain run's
    plain = fit(ising, res.config, seed=1, masks=res.masks)
    assert plain.metrics["val_accuracy"] == res.metrics["val_accuracy"]
    assert plain.metrics["test_accuracy"] == res.metrics["test_accuracy"]
    assert plain.metrics["best_epoch"] == res.metrics["best_epoch"]
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


def _epochs_interrupting(monkeypatch, after):
    """Every training epoch counted; KeyboardInterrupt at epoch ``after + 1`` of the whole run (None: never)."""
    from gbpn.train.loop import Selection

    real, calls = getattr(Selection._epoch, "original", Selection._epoch), []

    def counted(self, epoch):
        if after is not None and len(calls) == after:
            raise KeyboardInterrupt
        calls.append(epoch)
        return real(self, epoch)
    counted.original = real
    monkeypatch.setattr(Selection, "_epoch", counted)
    return calls


@pytest.mark.slow
def test_an_interrupted_auto_trial_resumes_without_retraining_finished_units(ising, tmp_path, monkeypatch):
    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit

    cfg = TrainConfig(epochs=3, hidden=32, potential="auto")
    whole = _interrupting(monkeypatch, None)
    reference = fit(ising, cfg, seed=2, units=tmp_path / "whole")
    total = len(whole)
    with pytest.raises(KeyboardInterrupt):
        _interrupting(monkeypatch, 3)
        fit(ising, cfg, seed=2, units=tmp_path / "cut")
    rerun = _interrupting(monkeypatch, None)
    resumed = fit(ising, cfg, seed=2, units=tmp_path / "cut")
    assert len(rerun) == total - 3  # the three finished candidates are read back, not trained
    keys = ("potential", "val_accuracy", "test_accuracy", "auto_candidates")
    assert {k: resumed.metrics.get(k) for k in keys} == {k: reference.metrics.get(k) for k in keys}
    # another configuration never reads these units
    other = _interrupting(monkeypatch, None)
    fit(ising, TrainConfig(epochs=cfg.epochs, hidden=16, potential="auto"), seed=2, units=tmp_path / "cut")
    assert len(other) == total


@pytest.mark.slow
def test_an_interrupted_budgeted_search_resumes_from_its_saved_rungs(ising, tmp_path, monkeypatch):
    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit

    cfg = TrainConfig(epochs=12, hidden=32, potential="auto", budget=2)
    whole = _epochs_interrupting(monkeypatch, None)
    reference = fit(ising, cfg, seed=2, units=tmp_path / "whole")
    search = reference.metrics["auto_search"]
    first_rung = sum(r["rungs"][0]["epoch"] for r in search["configurations"] if r["rungs"])
    probed = sum(1 for r in search["configurations"] if r["cost"] is not None)
    cut = probed + first_rung  # past the first epochs of all, and the first rung's states saved
    with pytest.raises(KeyboardInterrupt):
        _epochs_interrupting(monkeypatch, cut)
        fit(ising, cfg, seed=2, units=tmp_path / "cut")
    rerun = _epochs_interrupting(monkeypatch, None)
    resumed = fit(ising, cfg, seed=2, units=tmp_path / "cut")
    assert len(rerun) <= len(whole) - first_rung  # the first rung's epochs are not trained again
    assert _without_seconds(resumed.metrics["auto_search"]) == _without_seconds(search)
    assert {k: resumed.metrics[k] for k in ("val_accuracy", "test_accuracy", "best_epoch")} == \
        {k: reference.metrics[k] for k in ("val_accuracy", "test_accuracy", "best_epoch")}


@pytest.mark.slow
def test_tuned_baselines_search_within_the_budget_and_choose_on_validation(ising):
    from gbpn.baselines.tuned import fit_tuned
    from gbpn.data.splits import random_split

    masks = random_split(ising.y, 0.3, 0.2, 0)
    m = fit_tuned("gcn-sep", ising, masks, seed=0, epochs=9, budget=3)
    assert m["search_configurations"] >= 3 and m["search"]["planned_cost"] <= m["search"]["allowance"]
    chosen = m["search"]["configurations"][m["search"]["chosen"]]
    if not m["tuned__default"]:
        assert m["tuned__num_layers"] == chosen["params"]["num_layers"]
    assert m["val_accuracy"] >= m["search"]["default"]["val"]
    scrambled = ising.clone()
    scrambled.y = ising.y.clone()
    scrambled.y[masks[2]] = 1 - ising.y[masks[2]]
    other = fit_tuned("gcn-sep", scrambled, masks, seed=0, epochs=9, budget=3)
    assert _without_seconds(other["search"]) == _without_seconds(m["search"])
    with pytest.raises(GBPNError, match="unknown tuned baseline"):
        fit_tuned("gin", ising, masks)
    assert not math.isnan(m["test_accuracy"])


@pytest.mark.slow
def test_a_tuned_row_never_ends_below_its_own_default_on_validation(ising):
    """A search that cannot learn (every configuration at lr 1e-7) keeps the untuned model: the plain row, exactly;
    at budget 1 there is no search, only the default."""
    from gbpn.baselines import fit_baseline
    from gbpn.baselines.tuned import BASELINE_SPACE, fit_tuned
    from gbpn.data.splits import random_split

    masks = random_split(ising.y, 0.3, 0.2, 0)
    plain = fit_baseline("sage", ising, masks, seed=0, epochs=30)
    hopeless = fit_tuned("sage", ising, masks, seed=0, epochs=30, budget=3, space={**BASELINE_SPACE, "lr": [1e-7]})
    assert hopeless["tuned__default"] and hopeless["search"]["default"]["kept"]
    assert hopeless["search"]["admitted"] >= 2  # the search ran, and lost
    assert (hopeless["val_accuracy"], hopeless["test_accuracy"]) == (plain["val_accuracy"], plain["test_accuracy"])
    alone = fit_tuned("sage", ising, masks, seed=0, epochs=30, budget=1)
    assert alone["test_accuracy"] == plain["test_accuracy"] and alone["search_configurations"] == 1


@pytest.mark.parametrize("argv", [["--potential", "mlp", "--budget", "2"], ["--potential", "auto", "--budget", "0.5"]])
def test_a_budget_without_auto_or_below_one_training_is_one_line_exit_2(argv, capsys, tmp_path):
    from gbpn.cli import main

    assert main(["train", "--dataset", "synth-ising+", "--epochs", "2", "--output", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget" in err[0] and "full trainings" in err[0]
    assert not (tmp_path / "r" / "metrics.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message of a machine without CUDA")
def test_a_benchmark_on_an_absent_gpu_is_one_line_exit_2_before_its_folder_exists(capsys, tmp_path):
    from gbpn.cli import main

    out = tmp_path / "grid"
    assert main(["benchmark", "--models", "gcn:tuned", "--datasets", "synth-ising+", "--trials", "1", "--epochs", "2",
                 "--device", "cuda", "--output", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such CUDA device" in err[0] and "--device cpu" in err[0]
    assert not out.exists()


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
    from gbpn.experiments.benchmark import Grid, run_grid

    # budget 4: rungs to resume (at 2, only the two-layer anchor fits runs of 9 epochs, and the cut lands in its run)
    grid = dict(models=["gcn-sep:tuned"], datasets=["synth-ising+"], trials=1, epochs=9, budget=4)
    quiet = dict(progress=False, log=lambda s: None)
    calls = _epochs_interrupting(monkeypatch, None)
    run_grid(Grid(output=tmp_path / "clean", **grid), **quiet)
    total = len(calls)
    with pytest.raises(KeyboardInterrupt):
        _epochs_interrupting(monkeypatch, total - 3)
        run_grid(Grid(output=tmp_path / "cut", **grid), **quiet)
    calls = _epochs_interrupting(monkeypatch, None)
    run_grid(Grid(output=tmp_path / "cut", **grid), **quiet)
    assert len(calls) < total - 3  # the rungs finished before the cut are read back
    read = lambda folder: json.loads((folder / "rows" / "synth-ising+__gcn-sep:tuned__0.json").read_text())  # noqa: E731
    assert _without_seconds(read(tmp_path / "cut")) == _without_seconds(read(tmp_path / "clean"))
    assert not any((tmp_path / "cut" / "units").glob("*/*"))
