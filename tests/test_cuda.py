"""The CUDA paths that only a GPU can check: implicit differentiation, the potential encoders,
mini-batch and data-parallel training, and the CLI on ``--device cuda``. Skipped, with the
reason, where no GPU is present; ``benchmarks/gpu.sh`` runs them first on a GPU machine."""
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import random_graph

from gbpn.cli import main
from gbpn.train.config import TrainConfig
from gbpn.data import load_dataset
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.reverse import reverse_edge_index
from gbpn.train.fit import fit

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
              pytest.mark.slow]


def _implicit_grads(device, damping, edge_weight):
    n, c = 40, 4
    ei = random_graph(n, 0.12, seed=3)
    g = torch.Generator().manual_seed(0)
    log_phi = torch.randn(n, c, generator=g, dtype=torch.float64)
    weight = 0.5 * torch.randn(c, c, generator=g, dtype=torch.float64)
    layer = BeliefPropagation(c, num_steps=500, backward="implicit", tol=1e-12, damping=damping).double()
    with torch.no_grad():
        layer.coupling.weight.copy_(weight)
    layer = layer.to(device)
    kw = {"known_labels": (torch.arange(n) % c).to(device), "known_mask": (torch.arange(n) % 4 == 1).to(device)}
    if edge_weight:
        w = torch.rand(ei.size(1), generator=g, dtype=torch.float64) + 0.5
        kw["edge_weight"] = torch.minimum(w, w[reverse_edge_index(ei, n)]).to(device)  # symmetric
    log_phi = log_phi.to(device).requires_grad_()
    out = layer(log_phi, ei.to(device), **kw)
    loss = (out * torch.arange(out.numel(), dtype=out.dtype, device=device).view_as(out).sin()).sum()
    grads = torch.autograd.grad(loss, [log_phi, layer.coupling.weight])
    assert layer.implicit_stats.fallbacks == 0  # both converged: the fixed point's gradient, not the fallback
    return [t.detach().cpu() for t in (out, *grads)]


@pytest.mark.parametrize("damping, edge_weight", [(0.0, False), (0.3, True)])
def test_implicit_gradient_on_cuda_equals_the_cpu_one(damping, edge_weight):
    cpu = _implicit_grads("cpu", damping, edge_weight)
    cuda = _implicit_grads("cuda", damping, edge_weight)
    for a, b in zip(cuda, cpu):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("config", [
    dict(backward="implicit"),
    *(dict(potential=p, separate=s) for p, s in [("sign", True), ("sage", True), ("gcn", False), ("gat", True),
                                                 ("dagnn", True), ("linkx", True)]),
    dict(potential="sign", batch_size=256),
    dict(potential="auto", epochs=10),
], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_training_on_cuda(config):
    data = load_dataset("synth-ising+")
    cfg = TrainConfig(**{"epochs": 30, "hidden": 16, "lr": 3e-3, "device": "cuda", **config})
    res = fit(data, cfg, seed=0)
    losses = [h["loss"] for h in res.history]
    assert res.metrics["device"].startswith("cuda")
    assert next(res.model.parameters()).device.type == "cpu"
    assert all(map(torch.isfinite, map(torch.tensor, losses)))
    assert min(losses[-3:]) < losses[0]
    assert res.metrics["test_accuracy"] > 0.6  # chance is about 0.5
    if config.get("backward") == "implicit":
        assert res.metrics["implicit_forward_converged_frac"] > 0


def test_cli_trains_and_predicts_on_cuda(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "synth-ising+", "--device", "cuda", "--epochs", "20", "--hidden", "16",
                 "--backward", "implicit", "--potential", "sign", "--output", str(run), "--quiet"]) == 0
    assert json.loads((run / "metrics.json").read_text())["trials"][0]["device"].startswith("cuda")
    assert main(["predict", "--checkpoint", str(run / "model.pt"), "--device", "cuda",
                 "--output", str(tmp_path / "pred.csv")]) == 0
    assert (tmp_path / "pred.csv").stat().st_size > 0


def test_torchrun_maps_ranks_to_gpus(tmp_path):
    """NCCL under torchrun, one rank per GPU (as many ranks as GPUs, at most 2)."""
    ranks = min(2, torch.cuda.device_count())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), "-m",
           "gbpn", "train", "--dataset", "synth-ising+", "--device", "cuda", "--batch-size", "128", "--hidden", "32",
           "--epochs", "5", "--output", str(tmp_path / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = json.loads((tmp_path / "run" / "metrics.json").read_text())["trials"][0]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["world_size"] == ranks
    assert len(set(trial["rank_parameter_digests"])) == 1 and trial["device"].startswith("cuda")


def test_a_tuned_baseline_and_budgeted_gbpn_benchmark_on_cuda(tmp_path):
    out = tmp_path / "grid"
    assert main(["benchmark", "--models", "gat-sep:tuned", "gbpn:tuned", "--datasets", "synth-ising+", "--trials", "1",
                 "--epochs", "12", "--device", "cuda", "--output", str(out), "-q"]) == 0
    assert json.loads((out / "config.json").read_text())["device"] == "cuda"
    for model in ("gat-sep:tuned", "gbpn:tuned"):
        row = json.loads((out / "rows" / f"synth-ising+__{model}__0.json").read_text())
        assert row["search_configurations"] >= 2 and 0.5 < row["test_accuracy"] <= 1
