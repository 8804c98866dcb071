import pytest
import torch
from conftest import undirected
from torch_geometric.data import Data

from gbpn.train.config import TrainConfig
from gbpn.data import load_dataset
from gbpn.errors import GBPNError
from gbpn.train.objective import degree_temperature, empirical_coupling, marginal_nll
from gbpn.train.fit import fit, predict

pytestmark = pytest.mark.slow  # whole trainings


def test_marginal_nll_with_unit_alpha_is_plain_nll():
    log_b = torch.log_softmax(torch.randn(5, 3), -1)
    y = torch.tensor([0, 1, 2, 1, 0])
    torch.testing.assert_close(marginal_nll(log_b, y, torch.ones(5)), torch.nn.functional.nll_loss(log_b, y))
    # tempering lowers the loss of a confidently wrong prediction
    wrong = torch.log_softmax(torch.tensor([[8.0, 0.0, 0.0]]), -1)
    assert marginal_nll(wrong, torch.tensor([1]), torch.tensor([0.25])) < marginal_nll(wrong, torch.tensor([1]))


def test_degree_temperature():
    ei = undirected([(0, 1), (0, 2), (0, 3), (0, 4)])
    alpha = degree_temperature(ei, 6)
    torch.testing.assert_close(alpha, torch.tensor([0.5, 1, 1, 1, 1, 1]))  # node 5 isolated -> 1


def test_empirical_coupling_is_homophilous_on_a_homophilous_graph():
    ei = undirected([(0, 1), (1, 2), (3, 4), (4, 5), (2, 3)])
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    H = empirical_coupling(ei, y, torch.ones(6, dtype=torch.bool), 2)
    assert torch.equal(H, H.T) and H[0, 0] > H[0, 1] and H[1, 1] > H[0, 1]


def test_short_training_beats_chance_and_clamps_training_labels():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=40, hidden=32), seed=0)
    train, val, test = res.masks
    assert res.metrics["test_accuracy"] > 0.6  # chance is ~0.5
    log_b = predict(res.model, data, known_mask=train)
    assert torch.equal(log_b[train].argmax(1), data.y[train])
    assert res.model.H[0, 0] > res.model.H[0, 1]  # homophily is learned on Ising+


@pytest.mark.parametrize("batch_size", [None, 128])
def test_gbpns_training_score_is_the_unclamped_halfs_not_evaluations(batch_size):
    """Evaluation clamps every training label (a score of 1 by construction); the history's training score comes
    from the nodes each step left unclamped, so an untrained model's is near chance."""
    data = load_dataset("synth-ising+")
    cfg = TrainConfig(epochs=2, hidden=16, batch_size=batch_size, num_steps=2, fanout=3)
    res = fit(data, cfg, seed=0)
    clamped = predict(res.model, data, known_mask=res.masks[0])
    assert torch.equal(clamped[res.masks[0]].argmax(1), data.y[res.masks[0]])  # what evaluation sees
    first = res.history[0]["train_accuracy"]
    assert 0.2 < first < 0.95
    assert res.metrics["train_accuracy"] == res.history[res.metrics["best_epoch"]]["train_accuracy"]


def test_the_selection_scores_training_on_the_recorded_step_rows():
    from gbpn.train.loop import Selection, StepScores

    y = torch.tensor([0, 1, 0, 1])
    masks = (torch.tensor([True, True, False, False]), torch.tensor([False, False, True, True]),
             torch.tensor([False, False, True, True]))
    perfect = torch.nn.functional.one_hot(y, 2).float().log_softmax(1)
    steps = StepScores()

    def train_epoch(epoch):  # the step saw node 1 and called it class 0: training accuracy 0
        steps.record(torch.tensor([[0.0, -5.0]]), torch.tensor([1]))
        return 1.0

    sel = Selection(torch.nn.Linear(1, 1), train_epoch, lambda e: perfect, y, masks, 2, step_scores=steps)
    metrics, _, history = sel.advance(2).result()
    assert [r["train_accuracy"] for r in history] == [0.0, 0.0] and metrics["val_accuracy"] == 1.0
    plain = Selection(torch.nn.Linear(1, 1), lambda e: 1.0, lambda e: perfect, y, masks, 1).advance(1).result()
    assert plain[2][0]["train_accuracy"] == 1.0  # without rows, evaluation's own


def test_inductive_training_uses_no_labels_at_inference():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(variant="gbpn-i", epochs=5, hidden=16), seed=0)
    a = predict(res.model, data)
    data2 = data.clone()
    data2.y = torch.randint(0, 2, data.y.shape)
    torch.testing.assert_close(predict(res.model, data2), a)  # labels cannot leak in


def test_same_seed_same_result():
    data = load_dataset("synth-ising+")
    cfg = TrainConfig(epochs=5, hidden=16)
    a, b = fit(data, cfg, seed=3), fit(data, cfg, seed=3)
    assert a.metrics["test_accuracy"] == b.metrics["test_accuracy"]
    assert all(torch.equal(u, v) for u, v in zip(a.masks, b.masks))


def test_minibatch_tree_training_learns_and_matches_full_graph_inference():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=6, hidden=16, batch_size=128, num_steps=2, fanout=3, edge_chunk=1000), seed=0)
    assert res.metrics["test_accuracy"] > 0.6
    train = res.masks[0]
    chunked = predict(res.model, data, known_mask=train, edge_chunk=333, node_chunk=500)
    torch.testing.assert_close(chunked, predict(res.model, data, known_mask=train))
    assert res.model.H[0, 0] > res.model.H[0, 1]


def test_f1_threshold_is_chosen_on_validation_and_class_weights_balance():
    from gbpn.train.metrics import f1_with_val_threshold
    from gbpn.train.objective import balanced_class_weight

    y = torch.tensor([0] * 90 + [1] * 10)
    w = balanced_class_weight(y, 2)
    torch.testing.assert_close(w * torch.bincount(y).float(), torch.tensor([50.0, 50.0]))
    # positives score 0.3, negatives 0.1: only a threshold found on validation separates them
    p1 = torch.where(y == 1, 0.3, 0.1)
    log_b = torch.stack([1 - p1, p1], 1).log()
    val = torch.arange(100) % 2 == 0
    out = f1_with_val_threshold(log_b, y, val, ~val)
    assert out["val_f1"] > 0.999 and out["test_f1"] == 1.0 and 0.1 < out["threshold"] <= 0.3


@pytest.mark.parametrize("name, homophilous", [("election", True), ("sexual", False)])
def test_learned_coupling_direction_on_election_and_sexual(data_dir, name, homophilous):
    """A short run learns H with the sign of the graph's label mixing (paper Figure 3 e-f)."""
    data = load_dataset(name, data_dir)
    res = fit(data, TrainConfig(epochs=60, hidden=64), seed=0)
    H = res.model.H
    same, across = float(H[0, 0] + H[1, 1]), float(2 * H[0, 1])  # equal at the start (H = 1)
    assert (same > 1.05 * across) if homophilous else (same < across / 1.05), H


def test_patience_stops_training_and_keeps_the_best_epoch():
    data = load_dataset("synth-ising+")
    result = fit(data, TrainConfig(variant="gbpn-i", epochs=300, patience=2, hidden=16), seed=0)
    m, history = result.metrics, result.history
    assert m["epochs_run"] == len(history) == m["best_epoch"] + 3 < 300
    assert m["val_accuracy"] == max(h["val_accuracy"] for h in history)
    with pytest.raises(GBPNError, match="patience"):
        TrainConfig(patience=0).validate()


def test_auto_device_trains_where_it_can_and_returns_cpu_tensors():
    data = load_dataset("synth-ising+")
    result = fit(data, TrainConfig(epochs=3, hidden=16, device="auto"), seed=0)
    assert result.metrics["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert next(result.model.parameters()).device.type == "cpu" and result.masks[0].device.type == "cpu"


@pytest.mark.parametrize("potential,separate", [("sign", True), ("sign", False), ("sage", True), ("gcn", False),
                                                ("gat", True), ("dagnn", True), ("linkx", True)])
def test_each_potential_encoder_trains(potential, separate):
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=30, hidden=16, potential=potential, separate=separate, lr=3e-3), seed=0)
    losses = [h["loss"] for h in res.history]
    assert min(losses[-5:]) < 0.9 * losses[0]
    assert res.metrics["test_accuracy"] > 0.6  # chance is ~0.5
    assert res.metrics["potential"] == potential + ("" if separate else "-mixed")
    assert res.model.potential == potential


def test_sign_potential_trains_on_sampled_trees():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=4, hidden=16, batch_size=256, num_steps=2, potential="sign"), seed=0)
    assert res.metrics["test_accuracy"] > 0.6


@pytest.mark.parametrize("potential", ["sage", "dagnn", "linkx"])
def test_graph_potentials_refuse_mini_batches(potential):
    with pytest.raises(GBPNError, match="full batch"):
        fit(load_dataset("synth-ising+"), TrainConfig(epochs=2, potential=potential, batch_size=64))


def test_selection_takes_the_best_validation_score():
    from gbpn.train.auto import select_by_validation

    assert select_by_validation([0.8, 0.7, float("nan")]) == 0  # NaN never wins
    assert select_by_validation([0.7, 0.7]) == 0  # ties: the earlier (simpler) candidate
    assert select_by_validation([0.74, 0.76]) == 1  # any margin wins
    assert select_by_validation([float("nan"), 0.1]) == 1


def test_auto_potential_picks_the_best_validation_candidate_and_ignores_test_labels():
    data = load_dataset("synth-ising+")
    cfg = TrainConfig(epochs=8, hidden=16, potential="auto")
    res = fit(data, cfg, seed=1)
    cands = res.metrics["auto_candidates"]
    assert [c["potential"] for c in cands] == ["mlp", "sign", "sage", "gcn-mixed", "dagnn", "linkx"]
    top = max(c["val_accuracy"] for c in cands)
    assert res.metrics["potential"] == next(c["potential"] for c in cands if c["val_accuracy"] == top)
    # scrambling the test labels changes no choice and no validation score
    scrambled = data.clone()
    test = res.masks[2]
    scrambled.y = data.y.clone()
    scrambled.y[test] = 1 - data.y[test]
    other = fit(scrambled, cfg, seed=1, masks=res.masks)
    assert other.metrics["potential"] == res.metrics["potential"]
    assert [c["val_accuracy"] for c in other.metrics["auto_candidates"]] == [c["val_accuracy"] for c in cands]


def test_roc_auc_is_the_default_metric_for_imbalanced_binary_labels():
    from gbpn.train.metrics import default_metric, roc_auc

    y = torch.tensor([0] * 8 + [1] * 2)
    assert default_metric(y, 2) == "roc_auc"
    assert default_metric(torch.tensor([0, 1] * 5), 2) == "accuracy"
    assert default_metric(y, 3) == "accuracy"
    log_p = torch.log(torch.tensor([[0.9, 0.1]] * 8 + [[0.2, 0.8]] * 2))
    assert roc_auc(log_p, y, torch.ones(10, dtype=torch.bool)) == 1.0


@pytest.mark.parametrize("batch_size, sampler", [(None, "uniform"), (128, "uniform"), (128, "exp3")])
def test_implicit_training_learns_with_clamps_warmup_and_trees(batch_size, sampler):
    data = load_dataset("synth-ising+")
    cfg = TrainConfig(epochs=15, hidden=16, warmup=0.2, backward="implicit", tol=1e-4, max_steps=60,
                      batch_size=batch_size, num_steps=2, fanout=3, sampler=sampler)
    res = fit(data, cfg, seed=0)
    m = res.metrics
    assert m["test_accuracy"] > 0.6 and res.model.H[0, 0] > res.model.H[0, 1]
    # 3 warm-up epochs run no BP; the other training passes all converged
    assert m["implicit_forward_converged_frac"] == 1.0 and m["implicit_adjoint_converged_frac"] == 1.0
    assert m["implicit_fallback_frac"] == 0.0
    assert 1 < m["implicit_forward_steps_mean"] < 60
    if batch_size:  # a tree of depth 2 (diameter 4) is exact after 4 steps; the 5th sees no change
        assert m["implicit_forward_steps_mean"] <= 5
    assert res.model.bp.max_steps == 60 and res.model.bp.steps_of() == 60 and res.model.bp.tol == 1e-4  # inference
    # runs to convergence too, within implicit mode's own bound


def test_implicit_config_is_validated():
    with pytest.raises(GBPNError, match="backward"):
        TrainConfig(backward="neumann").validate()
    with pytest.raises(GBPNError, match="tol > 0"):
        TrainConfig(backward="implicit", tol=0.0).validate()


def test_implicit_training_composes_with_a_neighbourhood_potential():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=6, hidden=16, backward="implicit", max_steps=60, potential="sign"), seed=0)
    assert res.metrics["potential"] == "sign" and res.metrics["implicit_forward_converged_frac"] == 1.0
    assert res.model.bp.implicit_stats.backward_calls == 6


def test_fit_takes_a_plain_pyg_data_and_predict_chunks_what_it_can():
    from torch_geometric.data import Data

    from gbpn import GBPN
    from gbpn.data.graph import as_training_graph

    g = torch.Generator().manual_seed(0)
    n = 40
    ei = torch.randint(0, n, (2, 120), generator=g)  # directed, with self-loops and duplicates
    data = Data(x=torch.randn(n, 4, generator=g), edge_index=ei, y=torch.randint(0, 3, (n,), generator=g))
    res = fit(data, TrainConfig(epochs=2, hidden=8))
    assert res.model.num_classes == 3 and "rev_index" not in data  # the caller's Data is left as it was
    graph = as_training_graph(data)
    assert as_training_graph(graph) is graph
    for potential in ("mlp", "dagnn", "linkx"):  # graph encoders ignore node_chunk instead of failing
        model = GBPN(4, 3, hidden_channels=8, potential=potential,
                     potential_options={"num_nodes": n} if potential == "linkx" else None)
        torch.testing.assert_close(predict(model, graph, node_chunk=7), predict(model, graph))
    with pytest.raises(GBPNError, match="needs node labels"):
        fit(Data(x=torch.randn(5, 2), edge_index=torch.zeros(2, 0, dtype=torch.long)), TrainConfig(epochs=1))


def _plain_graph(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 7) % n) for i in range(0, n, 3)]
    y = torch.randint(0, 3, (n,), generator=g)
    x = torch.nn.functional.one_hot(y, 3).float() + torch.randn(n, 3, generator=g)
    return Data(x=x, edge_index=undirected(pairs), y=y)


def test_fit_refuses_masks_that_would_score_wrongly():
    data = _plain_graph()
    n = data.num_nodes
    idx = torch.arange(n)
    train, val, test = idx < 12, (idx >= 12) & (idx < 20), idx >= 20
    cfg = TrainConfig(epochs=1, hidden=8)
    unlabelled = data.clone()
    unlabelled.y[30:] = -1  # test = the rest: it then holds unlabelled nodes
    with pytest.raises(GBPNError, match=r"without a label \(y < 0: test 10\)"):
        fit(unlabelled, cfg, masks=(train, val, test), progress=False)
    with pytest.raises(GBPNError, match="train and test masks share 12"):
        fit(data, cfg, masks=(train, val, train | test), progress=False)
    with pytest.raises(GBPNError, match="node ids.*index_to_mask"):
        fit(data, cfg, masks=(idx[:12], val, test), progress=False)
    with pytest.raises(GBPNError, match="one entry per node"):
        fit(data, cfg, masks=(train[:-1], val, test), progress=False)
    with pytest.raises(GBPNError, match="training mask is empty"):
        fit(data, cfg, masks=(train & False, val, test), progress=False)


def test_fit_takes_integer_labels_of_any_width_and_refuses_float_ones():
    data = _plain_graph()
    cfg = TrainConfig(epochs=2, hidden=8)
    ref = fit(data, cfg, seed=1, progress=False)
    narrow = data.clone()
    narrow.y = data.y.int()
    res = fit(narrow, cfg, seed=1, progress=False)
    assert res.metrics["test_accuracy"] == ref.metrics["test_accuracy"]
    narrow.y = data.y.float()
    with pytest.raises(GBPNError, match="data.y must hold integer class ids"):
        fit(narrow, cfg, progress=False)


def test_predict_reads_a_double_model_and_a_raw_graph_as_fit_does():
    from gbpn import GBPN

    data = _plain_graph()
    model = GBPN(3, 3, hidden_channels=8, num_steps=3).double()
    raw = data.clone()
    raw.edge_index = torch.cat([data.edge_index[:, ::2], torch.tensor([[0], [0]])], 1)  # one direction, a self-loop
    out = predict(model, raw)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, predict(model, data))  # symmetrised and the self-loop dropped, as fit does
    with pytest.raises(GBPNError, match="data has no y"):
        predict(model, Data(x=data.x, edge_index=data.edge_index), known_mask=torch.ones(40, dtype=torch.bool))


def test_an_undefined_validation_roc_auc_selects_on_accuracy(caplog):
    data = _plain_graph(n=60)
    data.y = (data.y == 0).long()  # binary
    zeros, ones = (data.y == 0).nonzero().view(-1), (data.y == 1).nonzero().view(-1)
    val = torch.zeros(60, dtype=torch.bool)
    val[zeros[:6]] = True  # one class only: ROC AUC is undefined on it
    train = torch.zeros(60, dtype=torch.bool)
    train[torch.cat([zeros[6:14], ones[:8]])] = True
    test = ~train & ~val
    res = fit(data, TrainConfig(epochs=8, hidden=8, metric="roc_auc"), masks=(train, val, test), progress=False)
    assert res.metrics["selected_on"] == "accuracy" and res.metrics["val_roc_auc"] != res.metrics["val_roc_auc"]
    assert any("selected on validation accuracy" in r.message for r in caplog.records)


def test_auto_candidates_fall_back_to_accuracy_where_no_validation_roc_auc_is_defined():
    from gbpn.train.auto import select_candidate

    rows = [{"val_roc_auc": None, "val_accuracy": 0.6}, {"val_roc_auc": float("nan"), "val_accuracy": 0.8}]
    assert select_candidate(rows, "roc_auc") == 1
    rows[0]["val_roc_auc"] = 0.5  # one defined: it decides
    assert select_candidate(rows, "roc_auc") == 0


def test_the_baselines_check_their_masks():
    from gbpn.baselines import fit_baseline
    from gbpn.baselines.large import fit_large_baseline

    data = _plain_graph()
    idx = torch.arange(data.num_nodes)
    masks = (idx < 12, (idx >= 10) & (idx < 20), idx >= 20)  # train and val share two nodes
    with pytest.raises(GBPNError, match="train and val masks share 2"):
        fit_baseline("mlp", data, masks, epochs=1)
    with pytest.raises(GBPNError, match="train and val masks share 2"):
        fit_large_baseline("sage-sampled", data, masks, epochs=1)
