import numpy as np

from gbpn.data import load_dataset
from gbpn.experiments.convergence import convergence, steps_to_tolerance
from gbpn.experiments.coupling import compare_couplings
from gbpn.training import TrainConfig, fit


def test_convergence_residual_ends_at_zero_and_settle_steps_are_consistent():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=10, hidden=16), seed=0)
    out = convergence(res.model, data, res.masks, known_mask=res.masks[0], max_steps=8)
    assert out["residual_mean"][-1] == 0 and out["residual_mean"][0] > 0
    settle = out["settle_step"]
    # a node that settled at step s is correct at the last step; -1 means wrong at the last step
    final_correct = out["test_accuracy"][-1]
    test = res.masks[2].numpy()
    assert np.isclose((settle[test] >= 0).mean(), final_correct)
    assert (settle[res.masks[0].numpy()] == 0).all()  # clamped training labels are right from step 0


def test_steps_to_tolerance():
    assert steps_to_tolerance(np.array([np.nan, 1e-2, 1e-3, 5e-5, 1e-6])) == 3
    assert steps_to_tolerance(np.array([np.nan, 1e-2])) is None


def test_compare_couplings_ignores_scale():
    H = np.array([[2.0, 0.5], [0.5, 2.0]])
    assert compare_couplings(3.7 * H, H)["relative_error"] < 1e-12
    assert compare_couplings(H.T[::-1], H)["relative_error"] > 0.5


def test_explanation_decomposes_the_margin_exactly():
    from gbpn.experiments.explain import explain_node, format_explanation

    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=5, hidden=16), seed=0)
    ex = explain_node(res.model, data, 100, known_mask=res.masks[0])
    total = ex["self_contribution"] + sum(r["contribution"] for r in ex["neighbours"])
    assert abs(total - ex["margin"]) < 1e-4
    assert len(ex["neighbours"]) == int((data.edge_index[1] == 100).sum())
    contribs = [r["contribution"] for r in ex["neighbours"]]
    assert contribs == sorted(contribs, reverse=True)
    assert "node 100" in format_explanation(ex)


def test_confidence_by_degree_bins_cover_every_test_node():
    from gbpn.experiments.degree import confidence_by_degree

    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=5, hidden=16), seed=0)
    out = confidence_by_degree(res.model, data, res.masks[2], res.masks[0])
    assert out["count"].sum() == int(res.masks[2].sum())
    assert ((out["confidence"] >= 0.5) & (out["confidence"] <= 1)).all()  # two classes: top class >= 1/2
    assert np.isclose((out["accuracy"] * out["count"]).sum() / out["count"].sum(), out["node_correct"].mean())
