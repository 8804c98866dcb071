import numpy as np
import pytest

from gbpn.train.config import TrainConfig
from gbpn.data import load_dataset
from gbpn.experiments.convergence import convergence, steps_to_tolerance
from gbpn.experiments.coupling import compare_couplings
from gbpn.train.fit import fit


@pytest.mark.slow
def test_convergence_residual_ends_at_zero_and_settle_steps_are_consistent():
    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=10, hidden=16), seed=0)
    out = convergence(res.model, data, res.masks, known_mask=res.masks[0], num_steps=8)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_confidence_by_degree_bins_cover_every_test_node():
    from gbpn.experiments.degree import confidence_by_degree

    data = load_dataset("synth-ising+")
    res = fit(data, TrainConfig(epochs=5, hidden=16), seed=0)
    out = confidence_by_degree(res.model, data, res.masks[2], res.masks[0])
    assert out["count"].sum() == int(res.masks[2].sum())
    assert ((out["confidence"] >= 0.5) & (out["confidence"] <= 1)).all()  # two classes: top class >= 1/2
    assert np.isclose((out["accuracy"] * out["count"]).sum() / out["count"].sum(), out["node_correct"].mean())


@pytest.mark.slow
def test_sampling_studies_write_their_figures_and_rows(tmp_path):
    import csv

    from gbpn.cli import main

    # a random graph with degrees above the fanout, so sampling (and its variance) matters
    from gbpn.data.generators import planted_partition_graph

    data = planted_partition_graph(300, 3000, 8, 3, seed=0)
    folder = tmp_path / "graph"
    folder.mkdir()
    np.savetxt(folder / "edges.csv", data.edge_index.T.numpy(), fmt="%d", delimiter=",")
    np.savetxt(folder / "features.csv", data.x.numpy(), delimiter=",")
    np.savetxt(folder / "labels.csv", data.y.numpy(), fmt="%d", delimiter=",")
    out = tmp_path / "sampling"
    assert main(["analyze", "sampling", "--dataset", str(folder), "--epochs", "3", "--trials", "1",
                 "--fanout", "2", "--batch-size", "64", "--output", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "variance.csv")))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    # uniform sampling can never beat the optimal distribution
    assert all(float(r["total_uniform_vs_optimal"]) >= 1 - 1e-9 for r in rows)
    assert (out / "variance.png").is_file() and (out / "variance.svg").is_file()
    out = tmp_path / "degree"
    assert main(["analyze", "degree", "--fanouts", "2", "0", "--dataset", str(folder), "--epochs", "2",
                 "--trials", "1", "--output", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "subsampling.csv")))
    assert [r["max_neighbours"] for r in rows] == ["2", "all"]
    assert all(float(r["all_log_likelihood"]) < 0 for r in rows)
    assert (out / "subsampling.png").is_file()


def test_degree_split_takes_the_lowest_thirty_percent():
    import torch

    from gbpn.experiments.sampling import degree_split

    deg = torch.tensor([5, 1, 9, 3, 3, 7, 2, 8, 4, 6])
    low = degree_split(deg.float())
    assert low.sum() == 3 and set(deg[low].tolist()) == {1, 2, 3}


def test_convergence_figure_has_whole_step_ticks_and_its_legends_clear_of_the_curves(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from gbpn.experiments import convergence as conv

    steps, n = 3, 50  # few steps: matplotlib's default ticks would fall at 0.5, 1.5, ...
    rng = np.random.default_rng(0)
    result = {"step": np.arange(steps + 1), "settle_step": rng.integers(-1, steps, n)}
    for key in ("residual_mean", "residual_max", "step_change_max"):
        result[key] = np.geomspace(1, 1e-6, steps + 1)
    for split in ("train", "val", "test"):
        result[f"{split}_accuracy"] = np.linspace(0.5, 0.8, steps + 1)
    figures = []
    monkeypatch.setattr(conv, "save_figure", lambda fig, path: figures.append(fig))
    conv.save_convergence(result, rng.normal(size=(n, 2)), "t-SNE", tmp_path)
    fig = figures[0]
    fig.canvas.draw()
    curves = fig.axes[0]
    ticks = [t for t in curves.get_xticks() if curves.get_xlim()[0] <= t <= curves.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # BP steps are whole
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:  # below its axes, not over the curves or points
            assert legend.get_window_extent().y1 <= ax.get_window_extent().y0


def test_an_interrupted_subsampling_study_trains_only_its_missing_rows(tmp_path, monkeypatch):
    """Each finished (fanout, trial) row is kept: a rerun after an interruption trains only the rows
    still missing and gives the same rows."""
    import gbpn.experiments.sampling as sampling
    from gbpn.data.generators import planted_partition_graph
    from gbpn.train.config import TrainConfig

    data = planted_partition_graph(120, 800, 6, 3, seed=0)
    config = TrainConfig(epochs=2, batch_size=32)
    keep = tmp_path / "units"
    first = sampling.subsampling_study(data, [2, None], config, trials=1, keep=keep)
    files = sorted(keep.rglob("*.json"))
    assert len(files) == 2
    files[0].unlink()  # as if interrupted while training that row
    trained = []
    fit = sampling.fit
    monkeypatch.setattr(sampling, "fit", lambda *a, **k: trained.append(1) or fit(*a, **k))
    again = sampling.subsampling_study(data, [2, None], config, trials=1, keep=keep)
    assert len(trained) == 1 and again == first


def test_an_interrupted_variance_study_trains_only_what_is_missing(tmp_path, monkeypatch):
    """Each finished (trial, sampler) training of ``analyze sampling`` is kept with its rows: a rerun
    trains only the missing one and gives the same rows."""
    import math

    import gbpn.experiments.sampling as sampling
    from gbpn.data.generators import planted_partition_graph
    from gbpn.train.config import TrainConfig

    data = planted_partition_graph(120, 800, 6, 3, seed=0)
    config = TrainConfig(epochs=2, batch_size=32, fanout=2, sampler="exp3")
    keep = tmp_path / "units"
    first = sampling.variance_study(data, config, trials=1, keep=keep)
    files = sorted(keep.rglob("*.pt"))
    assert len(files) == 2
    next(f for f in files if "exp3" in f.name).unlink()  # as if interrupted while training it
    trained = []
    fit = sampling.fit
    monkeypatch.setattr(sampling, "fit", lambda *a, **k: trained.append(1) or fit(*a, **k))
    again = sampling.variance_study(data, config, trials=1, keep=keep)

    def same(a, b):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))

    assert len(trained) == 1 and again["accuracy"] == first["accuracy"]
    assert len(again["epochs"]) == len(first["epochs"]) == 2
    assert all(same(r[k], s[k]) for r, s in zip(sorted(again["epochs"], key=lambda r: r["epoch"]),
                                                 sorted(first["epochs"], key=lambda r: r["epoch"])) for k in r)


@pytest.mark.slow
def test_an_interrupted_identifiability_study_trains_only_the_grids_left(tmp_path, monkeypatch):
    """A grid of ``analyze identifiability`` finished before an interruption is not trained again."""
    import gbpn.train.fit as fitting
    from gbpn.experiments.coupling import identifiability

    fit, calls = fitting.fit, []

    def interrupted_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fit(*a, **k)

    monkeypatch.setattr(fitting, "fit", interrupted_second)
    with pytest.raises(KeyboardInterrupt):
        identifiability(["ising+", "ising-"], tmp_path, epochs=1, log=lambda *_: None)
    first = list((tmp_path / "units").rglob("*.pt"))
    assert len(first) == 1  # the finished grid, kept
    calls.clear()
    monkeypatch.setattr(fitting, "fit", lambda *a, **k: calls.append(1) or fit(*a, **k))
    results = identifiability(["ising+", "ising-"], tmp_path, epochs=1, log=lambda *_: None)
    assert len(calls) == 1 and set(results) == {"ising+", "ising-"} and not (tmp_path / "units").exists()
