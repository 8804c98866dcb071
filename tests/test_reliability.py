"""Every user mistake ends in a one-line error and exit code 2 with nothing written, never in a
silent wrong result or an "internal error" (issue 12, items 3-6 and 9)."""
import json
import logging

import numpy as np
import pytest
import torch

from gbpn.cli import main
from gbpn.data import load_dataset
from gbpn.errors import GBPNError


def _folder(path, y, names=None, n=40):
    """A small ring graph in the bring-your-own format (text headers)."""
    rng = np.random.default_rng(0)
    path.mkdir(parents=True, exist_ok=True)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(path / "features.csv", rng.random((n, 3)), delimiter=",", header="a,b,c", comments="")
    np.savetxt(path / "labels.csv", np.resize(np.asarray(y), n), fmt="%d", header="label", comments="")
    if names is not None:
        (path / "class_names.txt").write_text("\n".join(names) + "\n")
    return path


def _train(args, out):
    return main(["train", "--epochs", "2", "--hidden", "8", "--quiet", "--output", str(out), *args])


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return _folder(tmp_path_factory.mktemp("g"), [0, 1, 2], ["red", "green", "blue"])


@pytest.fixture(scope="module")
def run2(graph, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert _train(["--dataset", str(graph), "--trials", "2"], out) == 0
    return out


# item 3 ------------------------------------------------------------------------------------------

def test_label_beyond_class_names_is_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g", [0, 1, 2, 7], ["a", "b", "c"])
    assert _train(["--dataset", str(g)], tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "label 7" in err and "names 3 classes" in err and not (tmp_path / "run").exists()


def test_a_named_class_without_nodes_is_reported(tmp_path, caplog):
    g = _folder(tmp_path / "g", [0, 2], ["a", "b", "c"])
    with caplog.at_level(logging.WARNING):
        d = load_dataset(str(g))
    assert d.num_classes == 3 and "has class 1: class_names.txt names 3 classes" in caplog.text
    caplog.clear()
    g = _folder(tmp_path / "h", [0, 1, 0, 1, 7])  # a typo'd label makes eight classes: the warning says where from
    with caplog.at_level(logging.WARNING):
        d = load_dataset(str(g))
    assert d.num_classes == 8 and "has class 2, 3, 4, 5, 6: classes are counted up to the largest label (7" in caplog.text


# item 4 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("option,name", [
    (["--coupling-lr", "-1"], "coupling_lr"), (["--lr", "-1"], "lr"), (["--lr", "nan"], "lr"),
    (["--weight-decay", "-1"], "weight_decay"), (["--damping", "1.0"], "damping"), (["--warmup", "nan"], "warmup"),
    (["--fanout", "0", "--batch-size", "4"], "fanout"),
])
def test_bad_train_option_is_refused_before_anything_is_written(graph, tmp_path, option, name, capsys):
    assert _train(["--dataset", str(graph), *option], tmp_path / "run") == 2
    assert f"error: {name} " in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("option", [["--edge-chunk", "0"], ["--threads", "-1"], ["--trials", "0"]])
def test_bad_count_is_a_usage_error(graph, tmp_path, option, capsys):
    with pytest.raises(SystemExit) as ex:
        _train(["--dataset", str(graph), *option], tmp_path / "run")
    assert ex.value.code == 2 and f"argument {option[0]}: must be at least" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_predict_negative_steps_is_refused(run2, graph, tmp_path, capsys):
    with pytest.raises(SystemExit) as ex:
        main(["predict", "--checkpoint", str(run2 / "model.pt"), "--dataset", str(graph), "--steps", "-3",
              "--output", str(tmp_path / "p.csv")])
    assert ex.value.code == 2 and "--steps" in capsys.readouterr().err and not (tmp_path / "p.csv").exists()


# item 5 ------------------------------------------------------------------------------------------

def test_fewer_trials_keeps_finished_results(run2, graph, capsys):
    before = {p: (run2 / p).read_bytes() for p in ("metrics.json", "config.json", "model.pt")}
    assert _train(["--dataset", str(graph), "--trials", "1"], run2) == 2
    assert "--trials 2 or more" in capsys.readouterr().err
    assert all((run2 / p).read_bytes() == b for p, b in before.items())


# item 6 ------------------------------------------------------------------------------------------

def test_corrupt_metrics_on_resume_names_the_file(graph, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(["--dataset", str(graph)], out) == 0
    (out / "metrics.json").write_text('{"trials": [')
    assert _train(["--dataset", str(graph)], out) == 2
    err = capsys.readouterr().err
    assert "metrics.json" in err and "not valid JSON" in err and "internal error" not in err


def test_unwritable_output_is_a_clear_error(run2, graph, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the output folder should be
    code = main(["predict", "--checkpoint", str(run2 / "model.pt"), "--dataset", str(graph),
                 "--output", str(blocker / "p.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot write" in err and f"{blocker} is a file, not a folder" in err
    # a file given as an output folder
    assert _train(["--dataset", str(graph)], blocker) == 2
    assert f"{blocker} is a file, not a folder" in capsys.readouterr().err


def test_truncated_raw_file_names_the_file(tmp_path, capsys):
    folder = tmp_path / "gbpn" / "county_facebook"
    folder.mkdir(parents=True)
    (folder / "dat.csv").write_text("a,b,c,d,e,f,g,h,i,DEM,GOP\n" + "1,2,3,4,5,6,7,8,9,10,11\n1,2,3,4\n")
    (folder / "adj.csv").write_text("x1,x2\n0,1\n")
    code = main(["train", "--dataset", "election", "--data-dir", str(tmp_path), "--output", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "dat.csv" in err and "damaged or cut short" in err


# item 9 ------------------------------------------------------------------------------------------

def test_single_class_data_set_is_refused(tmp_path, capsys):
    g = _folder(tmp_path / "g", [1])
    assert _train(["--dataset", str(g)], tmp_path / "run") == 2
    assert "at least two classes" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_nan_checkpoint_is_refused(run2, graph, tmp_path, capsys):
    payload = torch.load(run2 / "model.pt", weights_only=True)
    next(v for v in payload["state_dict"].values() if v.is_floating_point()).view(-1)[0] = float("nan")
    torch.save(payload, tmp_path / "nan.pt")
    code = main(["predict", "--checkpoint", str(tmp_path / "nan.pt"), "--dataset", str(graph),
                 "--output", str(tmp_path / "p.csv")])
    assert code == 2 and "NaN" in capsys.readouterr().err and not (tmp_path / "p.csv").exists()


def test_election_nan_is_reported_at_its_line(tmp_path):
    folder = tmp_path / "gbpn" / "county_facebook"
    folder.mkdir(parents=True)
    rows = np.arange(1, 45, dtype=float).reshape(4, 11)
    rows[2, 3] = np.nan
    np.savetxt(folder / "dat.csv", rows, delimiter=",", header=",".join("abcdefghijk"), comments="")
    (folder / "adj.csv").write_text("x1,x2\n0,1\n")
    with pytest.raises(GBPNError, match=r"line\(s\) \[4\]"):  # header is line 1, rows[2] is line 4
        load_dataset("election", str(tmp_path))


def test_damaged_pyg_raw_file_is_named_as_damaged(data_dir, tmp_path):
    import shutil
    from pathlib import Path

    raw = tmp_path / "planetoid" / "Cora" / "raw"
    shutil.copytree(Path(data_dir) / "planetoid" / "Cora" / "raw", raw)
    graph = raw / "ind.cora.graph"
    graph.write_bytes(graph.read_bytes()[:100])  # cut short
    with pytest.raises(GBPNError, match="damaged or cut short"):
        load_dataset("cora", str(tmp_path))


def _benchmark(datasets, out):
    return main(["benchmark", "--models", "gbpn", "--datasets", *datasets, "--trials", "1", "--epochs", "2",
                 "--quiet", "--output", str(out)])


@pytest.mark.parametrize("bad", ["nosuch", "./no/such/folder"])
def test_benchmark_refuses_an_unknown_data_set_before_running_or_writing(graph, tmp_path, bad, capsys):
    # the bad name comes second: it is refused before the first data set's runs
    assert _benchmark([str(graph), bad], tmp_path / "grid") == 2
    err = capsys.readouterr().err
    assert ("unknown dataset" if "/" not in bad else "no such folder") in err and not (tmp_path / "grid").exists()


def test_table_only_rebuilds_the_recorded_grid_and_refuses_a_folder_without_one(graph, tmp_path, capsys):
    assert _benchmark([str(graph)], tmp_path / "grid") == 0
    table = (tmp_path / "grid" / "table.md").read_text()
    (tmp_path / "grid" / "table.md").unlink()
    # no --models/--datasets: the grid comes from the folder's config.json, and nothing trains
    assert main(["benchmark", "--table-only", "--quiet", "--output", str(tmp_path / "grid")]) == 0
    assert (tmp_path / "grid" / "table.md").read_text() == table
    capsys.readouterr()
    assert main(["benchmark", "--table-only", "--output", str(tmp_path / "none")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["benchmark", "--table-only", "--preset", "table3", "--output", str(tmp_path / "none")]) == 2
    assert "no finished runs" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_table_only_refuses_a_train_folder_and_options_it_would_ignore(graph, tmp_path, capsys):
    assert _train(["--dataset", str(graph)], tmp_path / "t") == 0
    capsys.readouterr()
    assert main(["benchmark", "--table-only", "--output", str(tmp_path / "t")]) == 2
    assert "is not a benchmark grid's" in capsys.readouterr().err
    assert _benchmark([str(graph)], tmp_path / "grid") == 0
    capsys.readouterr()
    assert main(["benchmark", "--table-only", "--trials", "3", "--output", str(tmp_path / "grid")]) == 2
    assert "--trials would be ignored" in capsys.readouterr().err


def test_benchmark_on_a_bad_folder_writes_nothing(tmp_path, capsys):
    g = _folder(tmp_path / "g", [0, 1])
    x = np.loadtxt(g / "features.csv", delimiter=",", skiprows=1)
    x[3, 1] = np.nan
    np.savetxt(g / "features.csv", x, delimiter=",", header="a,b,c", comments="")
    assert _benchmark([str(g)], tmp_path / "grid") == 2
    assert "NaN" in capsys.readouterr().err and not (tmp_path / "grid").exists()


@pytest.mark.parametrize("args,message", [
    (["sample-mrf", "--kind", "ising+", "--size", "5", "--coupling", "1", "inf", "inf", "1"], "positive finite"),
    (["sample-mrf", "--kind", "ising+", "--size", "5", "--coupling", "1", "nan", "nan", "1"], "positive finite"),
    (["analyze", "degree", "--checkpoint", "x.pt", "--fanouts", "1", "2"], "not both"),
    (["analyze", "degree", "--checkpoint", "x.pt", "--epochs", "7"], "--epochs: only for the --fanouts study"),
    (["analyze", "degree", "--checkpoint", "x.pt", "--epochs", "100"], "--epochs: only for the --fanouts study"),
    (["benchmark", "--preset", "table2", "--trials", "1", "--models", "gbpn"], "--models, --trials would be ignored"),
    (["benchmark", "--models", "mlp", "--datasets", "cora", "--quick", "--epochs", "100"],
     "--epochs would be ignored"),
    (["train", "--dataset", "synth-ising+", "--header"], "built-in data set: leave it out"),
    (["analyze", "degree", "--fanouts", "1", "--known", "none"], "--known: only with --checkpoint"),
    (["predict", "--checkpoint", "x.pt", "--partitioner", "metis"], "--partitioner is for partitioned inference"),
    # a grid's nodes have at most 4 neighbours: a fanout of 5 samples nothing
    (["analyze", "sampling", "--fanout", "5", "--epochs", "1"], "give a fanout below 4"),
])
def test_options_of_another_mode_or_not_finite_are_refused(tmp_path, args, message, capsys):
    assert main([*args, "--output", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_every_command_that_computes_takes_threads():
    from gbpn.cli import build_parser

    for analysis in ("convergence", "degree", "sampling", "identifiability"):
        extra = ["--checkpoint", "x.pt"] if analysis == "convergence" else []
        assert build_parser().parse_args(["analyze", analysis, *extra, "--threads", "1"]).threads == 1
    for command in (["predict", "--checkpoint", "x.pt"], ["explain", "--checkpoint", "x.pt", "--node", "0"],
                    ["coupling", "--checkpoint", "x.pt"], ["sample-mrf", "--output", "o"]):  # default 1, as everywhere
        assert build_parser().parse_args(command).threads == 1


def test_roc_auc_on_more_than_two_classes_is_refused_before_writing(graph, tmp_path, capsys):
    assert _train(["--dataset", str(graph), "--metric", "roc_auc"], tmp_path / "t") == 2
    assert "defined here for two classes" in capsys.readouterr().err and not (tmp_path / "t").exists()
    assert main(["benchmark", "--models", "mlp", "--datasets", str(graph), "--metric", "roc_auc", "--trials", "1",
                 "--epochs", "1", "-q", "--output", str(tmp_path / "b")]) == 2
    assert "defined here for two classes" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_a_home_folder_data_set_names_its_run_by_the_folder(graph, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    _folder(home / "myg", [0, 1, 2])
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", "~/myg", "--epochs", "1", "--hidden", "8", "-q"]) == 0
    assert (tmp_path / "runs" / "myg-gbpn-seed0" / "metrics.json").is_file() and not (tmp_path / "runs" / "~").exists()


def test_save_options_added_to_a_finished_run_say_they_change_nothing(graph, tmp_path, capsys):
    assert _train(["--dataset", str(graph)], tmp_path / "t") == 0
    capsys.readouterr()
    assert _train(["--dataset", str(graph), "--save-trials"], tmp_path / "t") == 0
    assert "finished earlier without it" in capsys.readouterr().err
    assert _benchmark([str(graph)], tmp_path / "b") == 0
    capsys.readouterr()
    assert main(["benchmark", "--models", "gbpn", "--datasets", str(graph), "--trials", "1", "--epochs", "2", "-q",
                 "--save-predictions", "--output", str(tmp_path / "b")]) == 0
    assert "finished earlier without it" in capsys.readouterr().err


def test_identifiability_kinds_are_checked_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", "identifiability", "--kinds", "ising+", "ising"])
    assert exit_.value.code == 2 and "invalid choice: 'ising'" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--fanout", "3"], "--fanout: only for mini-batch training"),
    (["--hops", "3"], "--hops: only for mini-batch training"),
    (["--tol", "1e-3"], "--tol: only for --backward implicit"),
    (["--potential-hops", "3"], "--potential-hops: only for --potential sign"),
    (["--potential", "sign", "--residual", "--potential-layers", "3"],
     "--potential-layers, --residual: only for --potential gcn, sage, gat, classic-gcn, classic-sage or classic-gat"),
])
def test_train_options_that_would_act_on_nothing_are_refused(graph, tmp_path, args, message, capsys):
    assert _train(["--dataset", str(graph), *args], tmp_path / "o") == 2
    assert message in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_predict_reads_the_folder_as_training_did_and_refuses_changed_labels(tmp_path, capsys):
    g = _folder(tmp_path / "g", [0, 1, 2])
    for name, head in (("edges.csv", "0,1"), ("features.csv", "0,1,2"), ("labels.csv", "0")):
        lines = (g / name).read_text().splitlines()
        (g / name).write_text("\n".join([head] + lines[1:]) + "\n")  # a header of numbers: ambiguous
    assert _train(["--dataset", str(g)], tmp_path / "t") == 2
    assert "pass --header" in capsys.readouterr().err
    assert _train(["--dataset", str(g), "--header"], tmp_path / "t") == 0
    ckpt = str(tmp_path / "t" / "model.pt")
    assert main(["predict", "--checkpoint", ckpt, "--output", str(tmp_path / "p.csv"), "-q"]) == 0  # header remembered
    labels = (g / "labels.csv").read_text().splitlines()
    (g / "labels.csv").write_text("\n".join(labels[:1] + ["-1"] + labels[2:]) + "\n")
    capsys.readouterr()
    assert main(["predict", "--checkpoint", ckpt, "--output", str(tmp_path / "q.csv"), "-q"]) == 2
    assert "labels of" in capsys.readouterr().err
    assert main(["predict", "--checkpoint", ckpt, "--known", "none", "--output", str(tmp_path / "q.csv"), "-q"]) == 0
    # a split read from splits.npz does not depend on the labels: still rebuilt after they change
    _folder(tmp_path / "s", [0, 1, 2])
    np.savez(tmp_path / "s" / "splits.npz", train=np.arange(40) < 12, val=(np.arange(40) >= 12) & (np.arange(40) < 20),
             test=np.arange(40) >= 20)
    assert _train(["--dataset", str(tmp_path / "s")], tmp_path / "ts") == 0
    labels = (tmp_path / "s" / "labels.csv").read_text().splitlines()
    (tmp_path / "s" / "labels.csv").write_text("\n".join(labels[:30] + ["2"] + labels[31:]) + "\n")
    assert main(["predict", "--checkpoint", str(tmp_path / "ts" / "model.pt"), "--output", str(tmp_path / "r.csv"),
                 "-q"]) == 0


@pytest.mark.parametrize("args,message", [
    (["--seed", "99999999999999999999"], "argument --seed: must lie in 0..4294967295"),
    (["--seed", "-1"], "argument --seed: must lie in 0..4294967295"),
    (["--seed", "4294967295", "--trials", "2"], "argument --seed: must lie in 0..4294967295"),
    (["--epochs", "100000000000000000000"], "argument --epochs: 100000000000000000000 is beyond any size"),
    (["--config", ""], "argument --config: is empty"),
    (["--output", ""], "argument --output: is empty"),
])
def test_values_beyond_meaning_are_usage_errors(tmp_path, args, message, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ex:
        main(["train", "--epochs", "2", "-q", *args])
    assert ex.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_training_that_diverges_says_so(graph, tmp_path, capsys, caplog):
    from gbpn.train.loop import train_with_selection

    # diverged after some epochs: stopped there, the best epoch before it kept, and said
    model = torch.nn.Linear(2, 2)
    x, y = torch.randn(10, 2), torch.arange(10) % 2
    masks = (torch.arange(10) < 4, (torch.arange(10) >= 4) & (torch.arange(10) < 7), torch.arange(10) >= 7)

    def train_epoch(epoch):
        if epoch == 3:
            with torch.no_grad():
                model.weight.fill_(float("nan"))
        return 1.0

    metrics, out, history = train_with_selection(model, train_epoch, lambda e: model(x).log_softmax(-1), y, masks,
                                                 epochs=10, desc="t")
    assert metrics["diverged_at"] == 4 and len(history) == 3 and bool(torch.isfinite(model.weight).all())
    assert any("training diverged at epoch 4 (its output holds NaN or inf" in r.message
               or "training diverged at epoch 4 (weight holds NaN" in r.message for r in caplog.records)
    # diverged in the first epoch: nothing to keep, an error naming the cause
    assert _train(["--dataset", str(graph), "--coupling-lr", "1000", "--epochs", "6"], tmp_path / "b") == 2
    assert "training diverged at epoch 1 (log H spans" in capsys.readouterr().err
    assert not (tmp_path / "b" / "config.json").exists()  # no trial finished: no record of a run is left


def test_a_loss_that_explodes_without_reaching_inf_is_divergence(caplog):
    """A loss of 1e31 is finite but the model is garbage: judged on the loss's growth, not only inf/NaN."""
    from gbpn.train.loop import LOSS_GROWTH, train_with_selection

    model = torch.nn.Linear(2, 2)
    x, y = torch.randn(10, 2), torch.arange(10) % 2
    masks = (torch.arange(10) < 4, (torch.arange(10) >= 4) & (torch.arange(10) < 7), torch.arange(10) >= 7)

    def run(losses):
        return train_with_selection(model, lambda e: losses[e], lambda e: model(x).log_softmax(-1), y, masks,
                                    epochs=len(losses), desc="t")

    metrics, _, history = run([0.7, 0.5, 1.1e31, 0.4])
    assert metrics["diverged_at"] == 3 and len(history) == 2 and metrics["best_epoch"] in (0, 1)
    assert any("diverged at epoch 3 (the loss grew from 0.7 to 1.1e+31)" in r.message for r in caplog.records)
    # a loss that grows, but within the bound, is a training's own business
    metrics, _, history = run([0.7, 0.9 * LOSS_GROWTH, 0.4])
    assert "diverged_at" not in metrics and len(history) == 3


def test_training_at_a_huge_learning_rate_says_which_epoch_it_kept(graph, tmp_path, capsys):
    assert main(["train", "--dataset", str(graph), "--epochs", "5", "--hidden", "8", "--lr", "1e5", "--output",
                 str(tmp_path / "a")]) == 0
    trial = json.loads((tmp_path / "a" / "metrics.json").read_text())["trials"][0]
    assert trial["diverged_at"] == trial["best_epoch"] + 2 and trial["last_loss"] < 1e3
    assert f"kept epoch {trial['best_epoch'] + 1}, the best before training diverged at epoch " \
           f"{trial['diverged_at']}" in capsys.readouterr().err


@pytest.mark.slow  # a process and three short trainings
def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_same_command_resumes_it(graph, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = ["train", "--dataset", str(graph), "--epochs", "400", "--hidden", "8", "--trials", "3", "--output", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "gbpn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    metrics, deadline = out / "metrics.json", time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and json.loads(metrics.read_text())["trials"]:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # what kill, systemd, Slurm and Kubernetes send
    _, err = proc.communicate(timeout=120)
    first = json.loads(metrics.read_text())["trials"]
    if len(first) == 3:
        pytest.skip("every trial finished before the signal arrived")
    assert proc.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == "gbpn train: terminated (SIGTERM); rerun the same command to resume"
    assert "Traceback" not in err and not (out / ".gbpn.lock.holder").exists()  # the lock released
    assert main([*args, "-q"]) == 0
    done = json.loads(metrics.read_text())["trials"]
    assert [t["trial"] for t in done] == [0, 1, 2] and done[0] == first[0]  # finished trials kept, not retrained


@pytest.mark.parametrize("budget", ["inf", "1e400", "1e9", "1001"])
def test_a_budget_beyond_any_search_is_refused_before_anything_is_written(graph, tmp_path, budget, capsys):
    assert _train(["--dataset", str(graph), "--potential", "auto", "--budget", budget], tmp_path / "a") == 2
    assert main(["benchmark", "--models", "gcn:tuned", "--datasets", str(graph), "--budget", budget, "--trials", "1",
                 "--epochs", "2", "-q", "--output", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("counts full trainings of a search: from 1" in line and "to 1000" in line
                                 for line in err), err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def recorded(graph, tmp_path_factory):
    """A finished run's config.json, to hand-edit."""
    out = tmp_path_factory.mktemp("recorded")
    assert _train(["--dataset", str(graph), "--epochs", "1"], out) == 0
    return json.loads((out / "config.json").read_text())


@pytest.mark.parametrize("space,message", [
    ({"potential": ["mlp"], "lr": [-1.0]}, "the search space's lr lists -1.0: lr (--lr) must be a positive number"),
    ({"potential": ["bogus"]}, "the search space's potential lists 'bogus', which is not an encoder"),
    ({"potential": ["auto"]}, "the search space's potential lists 'auto', which is not an encoder"),
    ({"potential": ["mlp"], "hidden": [64, 0]}, "the search space's hidden lists 0: hidden (--hidden) must be a whole"),
    ({"potential": ["mlp"], "num_steps": [0]}, "the search space's num_steps lists 0 (no BP steps"),
    ({"potential": []}, "the search space's potential must be a non-empty list"),
    ({"potential": ["mlp"], "dropout": [1.5]}, "the search space's dropout lists 1.5: dropout (--dropout) must be in"),
])
def test_a_search_space_is_checked_as_the_flags_are_before_anything_runs(recorded, tmp_path, space, message, capsys):
    config = dict(recorded, train={**recorded["train"], "optim": {**recorded["train"]["optim"], "budget": 2,
                                                                  "search_space": space}})
    config["train"]["encoder"] = {**config["train"]["encoder"], "potential": "auto"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["train", "--config", str(tmp_path / "config.json"), "--output", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_an_infinite_budget_in_a_config_file_is_refused(recorded, tmp_path, capsys):
    text = json.dumps(dict(recorded, train={**recorded["train"], "optim": {**recorded["train"]["optim"], "budget": 7},
                                            "encoder": {**recorded["train"]["encoder"], "potential": "auto"}}))
    (tmp_path / "config.json").write_text(text.replace('"budget": 7', '"budget": Infinity'))
    assert main(["train", "--config", str(tmp_path / "config.json"), "--output", str(tmp_path / "out"), "-q"]) == 2
    assert "to 1000, got inf" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_convergence_study_beyond_any_use_is_a_usage_error(tmp_path, capsys):
    """It reruns BP for every step count: --steps 100000000 never returned."""
    with pytest.raises(SystemExit) as ex:
        main(["analyze", "convergence", "--checkpoint", str(tmp_path / "m.pt"), "--steps", "100000000", "--output",
              str(tmp_path / "c")])
    assert ex.value.code == 2 and "argument --steps/-K: must be at most 10000" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_running_out_of_memory_names_the_sizes(graph, tmp_path, capsys, monkeypatch):
    import gbpn.experiments.runner as runner

    def too_big(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried "
                           "to allocate 40000000000000000 bytes.")

    monkeypatch.setattr(runner, "fit", too_big)
    assert _train(["--dataset", str(graph)], tmp_path / "a") == 2
    err = capsys.readouterr().err
    assert "error: out of memory" in err and "--hidden" in err and "internal error" not in err
    assert not (tmp_path / "a" / "config.json").exists()


def test_a_hand_edited_config_is_checked_value_by_value(run2, tmp_path, capsys):
    import json

    rec = json.loads((run2 / "config.json").read_text())
    for edit, message in [({"degree_weight": "no"}, "degree_weight (--degree-weight) must be bool, got 'no'"),
                          ({"epochs": "5"}, "epochs (--epochs) must be int, got '5'"),
                          ({"epochs": True}, "epochs (--epochs) must be int, got True"),
                          ({"dropout": "0.1"}, "dropout (--dropout) must be int or float or null")]:
        (tmp_path / "c.json").write_text(json.dumps({**rec, "train": {**rec["train"], **edit}}))
        assert main(["train", "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "o"), "-q"]) == 2
        assert message in capsys.readouterr().err
    for top, message in [({"seed": 1.5}, "seed must be a whole number >= 0, got 1.5"),
                         ({"trials": "2"}, "trials must be a whole number >= 1, got '2'")]:
        (tmp_path / "c.json").write_text(json.dumps({**rec, **top}))
        assert main(["train", "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "o"), "-q"]) == 2
        assert message in capsys.readouterr().err
    # a config of an older version, without the options added since, takes their defaults
    from gbpn.train.config import TrainConfig

    flat = TrainConfig.from_dict(rec["train"]).flat_dict()  # the flat config.json of versions before its parts
    older = {k: v for k, v in flat.items() if k not in ("metric", "potential", "layer_norm")}
    (tmp_path / "c.json").write_text(json.dumps({**rec, "train": older}))
    assert main(["train", "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "older"), "-q"]) == 0
    (tmp_path / "c.json").write_text("[1, 2]")
    assert main(["train", "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "o"), "-q"]) == 2
    assert "is not a run's config.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_metrics_file_with_impossible_trials_is_refused(run2, tmp_path, graph, capsys):
    import json
    import shutil

    for edit in ({"val_accuracy": "x"}, {"trial": -1}, {"trial": 1}):
        out = tmp_path / "r"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(run2, out)
        rec = json.loads((out / "metrics.json").read_text())
        rec["trials"][0].update(edit)
        (out / "metrics.json").write_text(json.dumps(rec))
        assert _train(["--dataset", str(graph), "--trials", "2"], out) == 2
        assert "is not a gbpn metrics file" in capsys.readouterr().err


# issue 62, round 3: clear but late, small, unclear ----------------------------------------------

def _unwritable(kind, tmp_path, monkeypatch):
    """An --output path that cannot be written, and what its error names."""
    import os

    if kind == "file":
        (tmp_path / "f").write_text("")
        return tmp_path / "f" / "grid", f"{tmp_path / 'f'} is a file, not a folder"
    if kind == "loop":
        (tmp_path / "l1").symlink_to(tmp_path / "l2")
        (tmp_path / "l2").symlink_to(tmp_path / "l1")
        return tmp_path / "l1", f"{tmp_path / 'l1'} is a symbolic link that loops"
    ro, access = tmp_path / "ro", os.access  # read-only, as the kernel says to a process (root included)
    ro.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(ro) else access(p, mode, **kw))
    return ro / "grid", f"{ro} is not writable"


@pytest.mark.parametrize("kind", ["file", "loop", "read-only"])
def test_benchmark_into_an_unwritable_folder_says_so_first(graph, tmp_path, kind, capsys, monkeypatch):
    out, why = _unwritable(kind, tmp_path, monkeypatch)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["benchmark", "--models", "mlp", "--datasets", str(graph), "--trials", "1", "--epochs", "1",
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0] and "runs to do" not in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_output_folder_that_is_a_symlink_loop_is_named_as_one(graph, tmp_path, capsys, monkeypatch):
    out, why = _unwritable("loop", tmp_path, monkeypatch)
    assert _train(["--dataset", str(graph)], out) == 2
    err = capsys.readouterr().err
    assert why in err and "File exists" not in err


def _disk_full_at_the_second_write(monkeypatch):
    import errno
    import gbpn.io

    calls, fsync = [], gbpn.io.os.fsync

    def full(fd):
        calls.append(fd)
        if len(calls) >= 2:  # config.json is written; the trial's split is not
            raise OSError(errno.ENOSPC, "No space left on device")
        fsync(fd)

    monkeypatch.setattr(gbpn.io.os, "fsync", full)


@pytest.mark.parametrize("case,message", [
    (["--lr", "1e30"], "training diverged at epoch 1"),
    ("disk full", "No space left on device"),
])
def test_a_run_that_fails_leaves_no_folder_of_its_making(graph, tmp_path, case, message, capsys, monkeypatch):
    if case == "disk full":
        _disk_full_at_the_second_write(monkeypatch)
        case = []
    assert _train(["--dataset", str(graph), *case], tmp_path / "a") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []  # not even .gbpn.lock or splits/
    # a folder that was there before is left there, emptied of what the failed run wrote
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    assert _train(["--dataset", str(graph), "--lr", "1e30"], tmp_path / "b") == 2
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["notes.txt"]


def test_out_of_memory_leaves_no_folder(graph, tmp_path, capsys, monkeypatch):
    import gbpn.experiments.runner as runner

    def too_big(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4e16 bytes.")

    monkeypatch.setattr(runner, "fit", too_big)
    assert _train(["--dataset", str(graph), "--hidden", "100000000"], tmp_path / "a") == 2
    assert "error: out of memory" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_count_beyond_any_size_shows_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["train", "--motifs", "triangle", "--max-triangles-per-node", "99999999999"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.startswith("usage: gbpn train ") and "at most 2147483647" in err


def test_benchmark_refuses_a_triangle_cap_train_refuses(graph, tmp_path, capsys):
    assert main(["benchmark", "--models", "gbpn-triangle99999999999", "--datasets", str(graph), "--trials", "1",
                 "--epochs", "1", "--output", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gbpn-triangle99999999999: the cap (triangles per node) must lie in 1..2147483647" \
        in err[0], err
    assert list(tmp_path.iterdir()) == []
    from gbpn.train.config import TrainConfig

    with pytest.raises(GBPNError, match="must lie in 1..2147483647"):
        TrainConfig(motifs="triangle", max_triangles_per_node=2**31).validate()


def test_wait_says_what_it_waits_for(graph, tmp_path, capsys):
    import threading
    import time

    from gbpn.experiments.lock import lock_folder, release

    out, taken = tmp_path / "run", threading.Event()

    def another_run():  # holds the folder's lock for half a second (in a thread: filelock's own check is per thread)
        lock = lock_folder(out)
        taken.set()
        time.sleep(0.5)
        release(lock)

    threading.Thread(target=another_run).start()
    taken.wait(10)
    assert main(["train", "--dataset", str(graph), "--epochs", "1", "--hidden", "8", "--wait", "--output",
                 str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"waiting for {out} to be free: in use by pid ") and "--wait" not in err[1:], err


def test_config_without_output_resumes_the_recorded_folder(graph, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _train(["--dataset", str(graph), "--trials", "2"], tmp_path / "a") == 0
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    (tmp_path / "a" / "metrics.json").write_text(json.dumps({**metrics, "trials": metrics["trials"][:1]}))
    capsys.readouterr()
    assert main(["train", "--config", str(tmp_path / "a" / "config.json")]) == 0
    out, err = capsys.readouterr()
    assert f"resuming {tmp_path / 'a'}: 1 of 2 trials already finished" in err
    assert out.strip().endswith(f"run saved in {tmp_path / 'a'}") and sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["trials"][0] == metrics["trials"][0]


def test_a_newline_in_a_path_stays_inside_its_line(graph, tmp_path, capsys):
    out = tmp_path / "a\nb"
    assert main(["train", "--dataset", str(graph), "--epochs", "1", "--hidden", "8", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        assert "a\\nb" in stream and not any(line.startswith("b") for line in stream.splitlines()), stream
    (tmp_path / "f\nx").write_text("")
    assert _train(["--dataset", str(graph)], tmp_path / "f\nx" / "run") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "f\\nx is a file, not a folder" in err


def test_a_torchscript_file_given_as_a_checkpoint_is_one_line(tmp_path, capsys):
    torch.jit.script(torch.nn.Linear(2, 2)).save(str(tmp_path / "ts.pt"))
    assert main(["predict", "--checkpoint", str(tmp_path / "ts.pt"), "--output", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a TorchScript archive (torch.jit.save), not a gbpn checkpoint" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ts.pt"]
