"""Triangle (motif) potentials end to end (issue 50): the GBPN option, training, checkpoints, predict,
``gbpn coupling``, ``gbpn sample-mrf --triangle-coupling`` and what is refused with one line."""
import json

import numpy as np
import pytest
import torch

from gbpn.cli import main
from test_cli import run
from gbpn.data.triangle_mrf import make_triangle_mrf
from gbpn.graph.triangles import enumerate_triangles
from gbpn.models.gbpn import GBPN
from gbpn.train.config import TrainConfig
from gbpn.train.fit import fit, model_args, predict

pytestmark = pytest.mark.slow  # trainings and the CLI


@pytest.fixture(scope="module")
def lattice(tmp_path_factory):
    """A 10 x 10 triangular lattice with the three-spin triangle factor, in the bring-your-own format."""
    out = tmp_path_factory.mktemp("tri") / "lattice"
    assert main(["sample-mrf", "--kind", "ising+", "--size", "10", "--triangle-coupling", "1.0", "--samples", "2",
                 "--burn-in", "30", "--thin", "5", "--seed", "1", "--output", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def trained(lattice, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "--dataset", str(lattice), "--motifs", "triangle", "--max-triangles-per-node", "2",
                 "--epochs", "8", "--hidden", "16", "--seed", "5", "--threads", "1", "--output", str(out),
                 "--quiet"]) == 0
    return out


def test_sample_mrf_writes_a_triangular_lattice(lattice):
    mrf = json.loads((lattice / "mrf.json").read_text())
    assert mrf["lattice"] == "triangular" and mrf["triangle_coupling"] == 1.0 and mrf["triangles"] == 2 * 9 * 9
    T = np.log(np.asarray(mrf["triangle_potential"]))
    np.testing.assert_allclose(T[0, 0, 0], -1.0, atol=1e-6)  # three-spin: s * (-1)^3
    np.testing.assert_allclose(T[0, 0, 1], 1.0, atol=1e-6)
    np.testing.assert_allclose(mrf["coupling"], np.ones((2, 2)))  # no pairwise coupling unless --coupling
    edges = np.loadtxt(lattice / "edges.csv", delimiter=",", skiprows=1, dtype=int)
    assert len(edges) == 3 * 100 - 2 * 10 - 2 * 10 + 1
    labels = np.loadtxt(lattice / "labels.csv", skiprows=1, dtype=int)
    assert labels.shape == (100,) and set(labels.tolist()) <= {0, 1}
    # the graph gbpn reads back holds exactly the lattice's triangles
    ei = torch.as_tensor(np.concatenate([edges, edges[:, ::-1]]).T.copy())
    assert enumerate_triangles(ei, 100).size(1) == mrf["triangles"]


def test_sample_mrf_refuses_a_bad_triangle_coupling(tmp_path, capsys):
    code, _, err = run(["sample-mrf", "--size", "5", "--triangle-coupling", "nan", "--output", str(tmp_path)], capsys)
    assert code == 2 and "--triangle-coupling" in err and len(err.strip().splitlines()) == 1


def test_train_records_triangles_and_the_option(trained):
    cfg = json.loads((trained / "config.json").read_text())
    assert cfg["train"]["model"]["motifs"] == "triangle" and cfg["train"]["model"]["max_triangles_per_node"] == 2
    trial = json.loads((trained / "metrics.json").read_text())["trials"][0]
    assert 0 < trial["triangles"] <= 100 * 2 // 3 and trial["triangle_seconds"] >= 0
    assert trial["triangle_form"] == "full"


def test_checkpoint_predicts_on_the_triangles_it_was_trained_on(trained, lattice, tmp_path, capsys):
    from gbpn import api
    from gbpn.data.datasets import load_dataset

    run_ = api.load(str(trained / "model.pt"))
    model = run_.model
    assert model.motifs == "triangle" and model.max_triangles_per_node == 2 and model.triangle_seed == 5
    data = load_dataset(str(lattice))
    tri = model.triangles_of(data.edge_index, data.num_nodes)
    assert torch.equal(tri, enumerate_triangles(data.edge_index, 100, max_per_node=2, seed=5))
    assert int(torch.bincount(tri.reshape(-1), minlength=100).max()) <= 2
    # another seed samples other triangles: the recorded one is what makes the round trip exact
    assert not torch.equal(tri, enumerate_triangles(data.edge_index, 100, max_per_node=2, seed=0))
    csv = tmp_path / "p.csv"
    code, out, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--output", str(csv)], capsys)
    assert code == 0 and "evidence: train" in out
    rows = np.genfromtxt(csv, delimiter=",", names=True, dtype=None, encoding=None)
    probs = np.stack([rows["p_0"], rows["p_1"]], 1)
    np.testing.assert_allclose(probs, api.predict(run_), atol=1e-6)
    known = rows["known"] == 1
    assert known.sum() == 30 and (probs[known].argmax(1) == data.y.numpy()[known]).all()  # clamps stay clamped
    # the chunked and half-precision paths are the pairwise layer's: refused with one line
    code, _, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--half-messages", "--output",
                        str(tmp_path / "h.csv")], capsys)
    assert code == 2 and "triangle model" in err and len(err.strip().splitlines()) == 1


def test_coupling_shows_the_triangle_factor(trained, tmp_path, capsys):
    code, out, _ = run(["coupling", "--checkpoint", str(trained / "model.pt"), "--output", str(tmp_path)], capsys)
    assert code == 0 and "coupling H" in out and "triangle factor T" in out and "std of log T" in out
    assert (tmp_path / "triangle.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "triangle.svg").is_file()
    rows = (tmp_path / "triangle.csv").read_text().splitlines()
    assert rows[0] == "class_a,class_b,class_k,T" and len(rows) == 1 + 2 ** 3


@pytest.mark.parametrize("flags,message", [
    (["--batch-size", "16"], "sampled computation trees hold no triangles"),
    (["--backward", "implicit"], "triangle BP is unrolled"),
    (["--edge-chunk", "100"], "runs on the whole graph"),
])
def test_train_refuses_what_triangles_do_not_run_with(lattice, tmp_path, capsys, flags, message):
    code, _, err = run(["train", "--dataset", str(lattice), "--motifs", "triangle", "--epochs", "2", *flags,
                        "--output", str(tmp_path / "r")], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_cap_without_triangles_is_refused(lattice, tmp_path, capsys):
    code, _, err = run(["train", "--dataset", str(lattice), "--max-triangles-per-node", "3", "--epochs", "2",
                        "--output", str(tmp_path / "r")], capsys)
    assert code == 2 and "only for --motifs triangle" in err


def test_pairwise_model_and_arguments_are_unchanged():
    """Without triangles the option changes nothing: a pairwise config's model arguments are those of
    earlier versions, and a triangle model on a graph without triangles gives the pairwise output bit for bit."""
    assert "motifs" not in model_args(4, 3, TrainConfig(), 0.1)
    assert model_args(4, 3, TrainConfig(motifs="triangle"), 0.1, seed=7)["triangle_seed"] == 7
    grid = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]]).T
    ei = torch.cat([grid, grid.flip(0)], dim=1)  # a 4-cycle: no triangle
    x = torch.randn(4, 5)
    torch.manual_seed(0)
    pairwise = GBPN(5, 3, hidden_channels=8, dropout=0.0)
    torch.manual_seed(0)
    motif = GBPN(5, 3, hidden_channels=8, dropout=0.0, motifs="triangle")
    motif.load_state_dict({**pairwise.state_dict(), "bp.triangle.weight": motif.bp.triangle.weight}, strict=False)
    assert motif.triangles_of(ei, 4).shape == (3, 0)
    known = torch.tensor([True, False, False, False])
    y = torch.tensor([2, 0, 0, 0])
    assert torch.equal(pairwise(x, ei, known_labels=y, known_mask=known),
                       motif(x, ei, known_labels=y, known_mask=known))


def test_fit_learns_a_triangle_factor_with_both_variants():
    data = make_triangle_mrf(8, 8, num_classes=2, triangle_strength=1.0, num_samples=1, burn_in=20, thin=1)
    for variant in ("gbpn", "gbpn-i"):
        res = fit(data, TrainConfig(variant=variant, motifs="triangle", epochs=6, hidden=8, damping=0.2), seed=2)
        assert res.metrics["triangles"] == 2 * 7 * 7
        # the factor trained (it starts at T = 1 exactly) at --coupling-lr, once per step
        assert float(res.model.bp.triangle.weight.detach().abs().max()) > 0
        out = predict(res.model, data, res.masks[0] if variant == "gbpn" else None)
        assert torch.isfinite(out).all() and torch.allclose(out.exp().sum(1), torch.ones(64))
    with pytest.raises(ValueError, match="implicit"):
        GBPN(2, 2, motifs="triangle", backward="implicit")
    with pytest.raises(ValueError, match="pairwise model"):
        GBPN(2, 2)(torch.randn(3, 2), torch.tensor([[0, 1], [1, 0]]), triangles=torch.zeros(3, 0, dtype=torch.long))


def test_fit_with_edge_weights_gives_them_to_triangle_bp():
    """A weighted graph trains with triangles, and the weights reach BP in training and in inference: the
    same seed trains to another loss without them, and the model predicts otherwise once they are dropped.
    (Under the initial H = 1 and T = 1 every message is uniform whatever the weights: the coupling must move
    first, hence 10 epochs at a coupling learning rate of 0.1.)"""
    data = make_triangle_mrf(6, 6, num_classes=2, triangle_strength=1.0, num_samples=1, burn_in=20, thin=1)
    ei, n = data.edge_index, data.num_nodes
    _, pair = torch.unique(torch.minimum(ei[0], ei[1]) * n + torch.maximum(ei[0], ei[1]), return_inverse=True)
    data.edge_weight = 0.2 + 2 * torch.rand(int(pair.max()) + 1, generator=torch.Generator().manual_seed(0))[pair]
    config = TrainConfig(motifs="triangle", epochs=10, hidden=8, coupling_lr=0.1)
    res = fit(data, config, seed=1)
    assert res.metrics["triangles"] == 2 * 5 * 5 and np.isfinite(res.metrics["test_accuracy"])
    weighted = predict(res.model, data, res.masks[0])
    data.edge_weight = None
    assert torch.isfinite(weighted).all() and not torch.allclose(weighted, predict(res.model, data, res.masks[0]))
    assert abs(fit(data, config, seed=1).metrics["last_loss"] - res.metrics["last_loss"]) > 1e-3


def test_benchmark_names_and_the_exact_model_reference():
    from gbpn.data.splits import random_split
    from gbpn.errors import GBPNError
    from gbpn.experiments.grid_models import gbpn_config
    from gbpn.experiments.motifs import exact_bp, triangle_fit

    c = gbpn_config("gbpn-i-triangle50", epochs=3)
    assert (c.variant, c.motifs, c.max_triangles_per_node, c.epochs) == ("gbpn-i", "triangle", 50, 3)
    c = gbpn_config("gbpn-triangle:sign")
    assert (c.variant, c.motifs, c.max_triangles_per_node, c.potential) == ("gbpn", "triangle", None, "sign")
    assert gbpn_config("gbpn").motifs == "none" and gbpn_config("gcn-triangle") is None
    with pytest.raises(GBPNError, match="must lie in 1.."):
        gbpn_config("gbpn-triangle0")
    data = make_triangle_mrf(8, 8, num_classes=2, triangle_strength=1.0, num_samples=1, burn_in=20, thin=1)
    masks = random_split(data.y, 0.3, 0.2, 0)
    clamped, free = exact_bp("exact-bp", data, masks), exact_bp("exact-bp-i", data, masks)
    assert clamped["train_accuracy"] == 1.0  # the evidence stays clamped
    assert free["train_accuracy"] < 1.0 and 0 <= free["test_accuracy"] <= 1
    plain = make_triangle_mrf(4, 4, num_samples=1, burn_in=2, thin=1)
    del plain.true_T
    with pytest.raises(GBPNError, match="true factors"):
        exact_bp("exact-bp", plain, masks)
    model = GBPN(2, 2, motifs="triangle")
    with torch.no_grad():
        model.bp.triangle.weight.copy_(data.true_T.double().log())
    fit_ = triangle_fit(model, data)
    assert fit_["triangle_correlation"] == pytest.approx(1.0) and fit_["triangle_relative_error"] < 1e-6
    assert triangle_fit(GBPN(2, 2), data) == {}
