import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gbpn.cli import main

pytestmark = pytest.mark.slow  # the CLI end to end: trainings, and processes


def run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small transductive run on the generated grid, shared by the tests below."""
    out = tmp_path_factory.mktemp("run")
    code = main(["train", "--dataset", "synth-ising+", "--epochs", "15", "--trials", "2", "--hidden", "16",
                 "--seed", "3", "--output", str(out), "--quiet"])
    assert code == 0
    return out


def test_train_writes_config_metrics_splits_and_checkpoint(trained):
    cfg = json.loads((trained / "config.json").read_text())
    metrics = json.loads((trained / "metrics.json").read_text())
    assert cfg["dataset"] == "synth-ising+" and cfg["train"]["optim"]["epochs"] == 15 and "torch" in cfg["versions"]
    assert [t["seed"] for t in metrics["trials"]] == [3, 4]
    assert all(0.0 <= t["test_accuracy"] <= 1.0 for t in metrics["trials"])
    split = np.load(trained / metrics["trials"][0]["split"])
    assert split["train"].sum() + split["val"].sum() + split["test"].sum() == 2601
    assert (trained / "model.pt").is_file()


def test_rerun_resumes_and_skips_finished_trials(trained, capsys):
    before = json.loads((trained / "metrics.json").read_text())
    code, out, err = run(["train", "--dataset", "synth-ising+", "--epochs", "15", "--trials", "3", "--hidden", "16",
                          "--seed", "3", "--output", str(trained)], capsys)
    assert code == 0 and "2 of 3 trials already finished" in err
    after = json.loads((trained / "metrics.json").read_text())
    assert after["trials"][:2] == before["trials"] and len(after["trials"]) == 3


def test_rerun_with_another_config_refuses(trained, capsys):
    code, _, err = run(["train", "--epochs", "16", "--hidden", "16", "--seed", "3", "--output", str(trained)], capsys)
    assert code == 2 and "another configuration" in err and "train.epochs: " in err and "-> 16" in err


def test_predict_writes_probabilities_and_keeps_training_labels(trained, tmp_path, capsys):
    csv = tmp_path / "p.csv"
    code, out, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", "synth-ising+",
                        "--output", str(csv)], capsys)
    assert code == 0 and "evidence: train" in out
    rows = np.genfromtxt(csv, delimiter=",", names=True, dtype=None, encoding=None)
    assert len(rows) == 2601
    probs = np.stack([rows["p_0"], rows["p_1"]], 1)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    known = rows["known"] == 1
    assert known.sum() == round(0.3 * 2601)
    from gbpn.data import load_dataset
    y = load_dataset("synth-ising+").y.numpy()
    assert (probs[known].argmax(1) == y[known]).all()  # clamped labels stay clamped
    # the low-memory path (bfloat16 messages, in place, chunked) gives the same predictions
    half = tmp_path / "half.csv"
    code, _, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", "synth-ising+",
                      "--half-messages", "--edge-chunk", "1000", "--node-chunk", "500", "--output", str(half)], capsys)
    rows_h = np.genfromtxt(half, delimiter=",", names=True, dtype=None, encoding=None)
    assert code == 0 and np.abs(rows_h["p_0"] - rows["p_0"]).max() < 0.02
    assert (rows_h["prediction"] == rows["prediction"]).mean() > 0.99


def test_coupling_prints_matrix_and_saves_png(trained, tmp_path, capsys):
    code, out, _ = run(["coupling", "--checkpoint", str(trained / "model.pt"), "--output", str(tmp_path / "h")], capsys)
    assert code == 0 and "coupling H" in out
    assert (tmp_path / "h" / "coupling.png").read_bytes()[:4] == b"\x89PNG"  # --output is a folder, as for analyze
    assert (tmp_path / "h" / "coupling.csv").is_file()
    with pytest.raises(SystemExit):  # one coupling command, not two
        main(["analyze", "coupling", "--checkpoint", str(trained / "model.pt")])


def test_coupling_runs_without_loading_pyg(trained, tmp_path):
    """Reading a checkpoint's coupling needs no graph: PyG (seconds to import) stays unloaded."""
    code = (f"import sys; from gbpn.console import main; rc = main(['coupling', '--checkpoint', "
            f"{str(trained / 'model.pt')!r}, '--output', {str(tmp_path)!r}]); "
            "assert 'torch_geometric' not in sys.modules, 'PyG loaded'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and "coupling H" in proc.stdout, proc.stderr


def test_predict_on_your_own_graph_inductive(trained, tmp_path, capsys):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1], [1, 2], [2, 3]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.random.rand(4, 2), delimiter=",")
    code, out, _ = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g), "--known", "none",
                        "--output", str(tmp_path / "o.csv")], capsys)
    assert code == 0 and (tmp_path / "o.csv").read_text().count("\n") == 5


@pytest.mark.parametrize(
    "args,match",
    [
        (["train", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["train", "--dataset", "election", "--data-dir", "/nonexistent/dir"], "/nonexistent/dir"),
        (["train", "--epochs", "0"], "epochs"),
        (["train", "--device", "tpu"], "device 'tpu'"),
        (["train", "--device", "cuda:7"], "no such CUDA device"),
        (["predict", "--checkpoint", "/nonexistent.pt"], "does not exist"),
        (["coupling", "--checkpoint", "/nonexistent.pt"], "does not exist"),
        (["analyze", "convergence", "--checkpoint", "/"], "is a folder: give the checkpoint file in it"),
    ],
)
def test_user_errors_are_one_line_and_non_zero(args, match, capsys):
    code, _, err = run(args, capsys)
    assert code == 2
    assert match in err and "Traceback" not in err and err.count("\n") == 1


def test_corrupt_checkpoint(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    code, _, err = run(["coupling", "--checkpoint", str(bad)], capsys)
    assert code == 2 and "corrupt" in err
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    code, _, err = run(["predict", "--checkpoint", str(other)], capsys)
    assert code == 2 and "not a gbpn checkpoint" in err


def test_mismatched_features_and_labels(trained, tmp_path, capsys):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.random.rand(2, 5), delimiter=",")
    code, _, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g)], capsys)
    assert code == 2 and "5 features" in err
    np.savetxt(g / "features.csv", np.random.rand(2, 2), delimiter=",")
    np.savetxt(g / "labels.csv", np.array([0, 7]), fmt="%d")
    code, _, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--dataset", str(g)], capsys)
    assert code == 2 and "the checkpoint knows 2" in err


def test_console_script_runs_as_a_process(tmp_path):
    exe = Path(sys.executable).with_name("gbpn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gbpn.cli"]
    proc = subprocess.run(cmd + ["train", "--dataset", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "features,labels,match",
    [
        ([[1.0], [float("nan")], [0.0]], [0, 1, 0], "NaN"),
        ([[1.0], [2.0], [0.0]], [1, 0, 9, 0], "length 3"),
        ([[1.0], [2.0], [0.0]], [0, -2, 1], "labels must lie"),
    ],
)
def test_train_rejects_bad_graph_files_in_one_line(tmp_path, capsys, features, labels, match):
    g = tmp_path / "g"
    g.mkdir()
    np.savetxt(g / "edges.csv", np.array([[0, 1], [1, 2]]), fmt="%d", delimiter=",")
    np.savetxt(g / "features.csv", np.array(features), delimiter=",")
    np.savetxt(g / "labels.csv", np.array(labels), fmt="%d")
    code, _, err = run(["train", "--dataset", str(g), "--output", str(tmp_path / "o")], capsys)
    # one error line, the last; warnings about the same files (logging) may come before it
    last = err.splitlines()[-1]
    assert code == 2 and match in last and last.startswith("gbpn train: error:") and err.count("error:") == 1


def _graph_folder(path, n=60, seed=0, labels=True, classes=2):
    """A small homophilous bring-your-own graph: a ring plus chords, features that hint at the label."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    y = (np.arange(n) * classes // n).astype(int)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], 1)
    np.savetxt(path / "edges.csv", ring, fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(path / "features.csv", y[:, None] + rng.normal(0, 1.0, (n, 2)), delimiter=",")
    if labels:
        np.savetxt(path / "labels.csv", y, fmt="%d")
    return path, y


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"gbpn {__import__('gbpn').__version__}"


def test_predict_and_explain_need_only_the_checkpoint(trained, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # nothing may land in the current folder
    ckpt = trained / "model.pt"
    code, out, _ = run(["predict", "--checkpoint", str(ckpt)], capsys)
    assert code == 0 and (trained / "predictions.csv").is_file() and not list(tmp_path.iterdir())
    code, out, _ = run(["explain", "--checkpoint", str(ckpt), "--node", "5", "--json", str(tmp_path / "e.json")],
                       capsys)
    assert code == 0 and out.startswith("node 5 (")


def test_predict_on_another_graph_says_what_it_clamps(trained, tmp_path, capsys):
    ckpt = str(trained / "model.pt")
    code, _, err = run(["predict", "--checkpoint", ckpt, "--output", str(tmp_path / "a.csv")], capsys)
    assert code == 0 and "not the graph" not in err
    code, _, err = run(["predict", "--checkpoint", ckpt, "--dataset", "synth-ising-", "--output",
                        str(tmp_path / "b.csv")], capsys)
    assert code == 0 and "synth-ising- is not the graph the checkpoint was trained on" in err
    g, _ = _graph_folder(tmp_path / "g", labels=False)
    code, _, err = run(["predict", "--checkpoint", ckpt, "--dataset", str(g), "--known", "labeled", "--output",
                        str(tmp_path / "c.csv")], capsys)
    assert code == 0 and "has no labelled node, so nothing is clamped" in err


def test_predict_on_another_graph_checks_classes_and_node_tied_potentials(tmp_path, capsys):
    three, _ = _graph_folder(tmp_path / "three", classes=3)
    two, _ = _graph_folder(tmp_path / "two", seed=1)
    for potential in ("mlp", "linkx"):
        code, _, _ = run(["train", "--dataset", str(three), "--potential", potential, "--epochs", "2", "--hidden", "8",
                          "--output", str(tmp_path / potential), "-q"], capsys)
        assert code == 0
    code, _, err = run(["predict", "--checkpoint", str(tmp_path / "mlp" / "model.pt"), "--dataset", str(two),
                        "--output", str(tmp_path / "a.csv")], capsys)
    assert code == 0 and "knows 3 classes but" in err and "labels go up to class 1" in err
    # the same node count, so the shapes fit: linkx's per-node weights would silently read other nodes
    code, _, err = run(["predict", "--checkpoint", str(tmp_path / "linkx" / "model.pt"), "--dataset", str(two),
                        "--output", str(tmp_path / "b.csv")], capsys)
    assert code != 0 and f"trained on ({three})" in err and not (tmp_path / "b.csv").exists()
    code, _, err = run(["predict", "--checkpoint", str(tmp_path / "linkx" / "model.pt"), "--output",
                        str(tmp_path / "c.csv")], capsys)
    assert code == 0 and "classes" not in err


def test_explain_checks_its_json_path_before_printing(trained, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, out, err = run(["explain", "--checkpoint", str(trained / "model.pt"), "--node", "5", "--json",
                          str(tmp_path / "file" / "e.json")], capsys)
    assert code == 2 and out == "" and "cannot write" in err


def test_verbose_logs_the_thread_count_in_use(trained, tmp_path, capsys):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        code, _, err = run(["train", "--dataset", "synth-ising+", "--epochs", "1", "--hidden", "8", "--threads", "1",
                            "-v", "--output", str(tmp_path / "o")], capsys)
    finally:
        torch.set_num_threads(before)
    assert code == 0 and ", 1 threads;" in err


def test_more_threads_than_cpus_are_capped_with_a_warning(tmp_path, capsys, monkeypatch):
    from gbpn import cli

    monkeypatch.setattr(cli, "_usable_cpus", lambda: 2)
    before = torch.get_num_threads()
    try:
        code, _, err = run(["train", "--dataset", "synth-ising+", "--epochs", "1", "--hidden", "8", "--threads",
                            "100000", "-v", "--output", str(tmp_path / "o")], capsys)
    finally:
        torch.set_num_threads(before)
    assert code == 0 and "--threads 100000 is more than the 2 CPU(s)" in err and ", 2 threads;" in err


def test_more_threads_than_free_cores_are_warned_of_in_one_line(tmp_path, capsys, monkeypatch):
    import os

    from gbpn import cli
    from gbpn.cli.threads import busy_note

    monkeypatch.setattr(cli, "_usable_cpus", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.3, 5.1, 3.9))  # five jobs on two cores
    before = torch.get_num_threads()
    try:
        code, _, err = run(["train", "--dataset", "synth-ising+", "--epochs", "1", "--hidden", "8", "--threads", "2",
                            "--output", str(tmp_path / "o")], capsys)
    finally:
        torch.set_num_threads(before)
    said = [line for line in err.splitlines() if line.startswith("--threads")]
    assert code == 0 and said == ["--threads 2: the load average is 5.3 on 2 CPU(s), so about 1 is free; threads "
                                  "beyond the free cores wait on each other and can make the run several times "
                                  "slower than --threads 1 (docs/usage.md)"]
    assert busy_note(1, 2) is None  # one thread is never too many
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.2, 0.1))
    assert busy_note(2, 2) is None and busy_note(3, 4) is None
    monkeypatch.setattr(os, "getloadavg", lambda: (2.4, 2.0, 2.0))
    assert "about 2 are free" in busy_note(3, 4)


def test_explain_parts_add_up_for_free_and_clamped_nodes(trained, tmp_path, capsys):
    meta = torch.load(trained / "model.pt", weights_only=True)
    from gbpn.data import load_dataset
    from gbpn.data.splits import split_from_record
    train = split_from_record(load_dataset("synth-ising+"), meta["split"])[0]
    free, clamped = int((~train).nonzero()[0]), int(train.nonzero()[0])
    for node in (free, clamped):
        path = tmp_path / f"{node}.json"
        code, out, _ = run(["explain", "--checkpoint", str(trained / "model.pt"), "--node", str(node),
                            "--json", str(path)], capsys)
        ex = json.loads(path.read_text())
        parts = ex["self_contribution"] + sum(r["contribution"] for r in ex["neighbours"])
        assert code == 0 and ex["known"] == (node == clamped)
        assert ex["evidence_margin"] == pytest.approx(parts, abs=1e-4)  # the printed sum is exact
        if node == free:
            assert ex["margin"] == pytest.approx(parts, abs=1e-4)
        else:  # a clamped node's belief is the clamp; the output says so instead of a sum that does not add up
            assert ex["margin"] > 1000 and "belief is the clamp" in out
            assert f"{ex['evidence_margin']:+.3f} = own features {ex['self_contribution']:+.3f}" in out


def test_quiet_and_verbose_on_every_command(trained, tmp_path, capsys):
    base = ["train", "--epochs", "2", "--hidden", "8", "--dataset"]
    g, _ = _graph_folder(tmp_path / "g")
    code, out, err = run(base + [str(g), "--output", str(tmp_path / "a"), "-q"], capsys)
    assert code == 0 and err == "" and "test accuracy" in out
    code, out, err = run(base + [str(g), "--output", str(tmp_path / "b")], capsys)
    assert code == 0 and "trial 0 (seed 0)" in err
    for cmd in (["predict", "--output", str(tmp_path / "p.csv")], ["coupling", "--output", str(tmp_path)],
                ["explain", "--node", "0"], ["analyze", "degree"]):
        assert main(cmd[:1] + (cmd[1:2] if cmd[0] == "analyze" else []) + ["-q", "--checkpoint", str(trained / "model.pt")]
                    + cmd[2 if cmd[0] == "analyze" else 1:]) == 0
        assert capsys.readouterr().err == ""
    assert main(["sample-mrf", "--size", "5", "--samples", "1", "--burn-in", "2", "--thin", "1", "-v",
                 "--output", str(tmp_path / "m")]) == 0
    assert "torch" in capsys.readouterr().err  # -v: debug messages (versions, options) too


def test_no_progress_bars_in_a_redirected_log(tmp_path):
    g, _ = _graph_folder(tmp_path / "g")
    exe = Path(sys.executable).with_name("gbpn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gbpn.cli"]
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.run(cmd + ["train", "--dataset", str(g), "--epochs", "30", "--hidden", "8",
                                     "--output", str(tmp_path / "o")], stdout=log, stderr=subprocess.STDOUT)
    text = (tmp_path / "log").read_text()
    # what it will do, the trial's line, the summary: no bar in a file
    assert proc.returncode == 0 and "\r" not in text and "it/s" not in text and text.count("\n") == 3


def test_config_reruns_a_recorded_run_exactly(tmp_path, capsys):
    g, _ = _graph_folder(tmp_path / "g")
    assert main(["train", "--dataset", str(g), "--epochs", "20", "--hidden", "8", "--trials", "2", "--seed", "4",
                 "--variant", "gbpn-i", "--output", str(tmp_path / "a"), "-q"]) == 0
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["train"]["model"]["dropout"] == 0.3  # resolved by the rule (2 features, 18 training nodes), not null
    assert cfg["source"]["dataset"] == str(g.resolve())
    assert main(["train", "--config", str(tmp_path / "a" / "config.json"), "--output", str(tmp_path / "b"), "-q"]) == 0
    strip = lambda m: [{k: v for k, v in t.items() if not k.endswith("_seconds")} for t in m["trials"]]  # noqa: E731
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in "ab")
    assert strip(a) == strip(b) and len(a["trials"]) == 2
    out = capsys.readouterr().out
    assert "±" in out  # two trials: a spread
    # an option --config would ignore is refused, not dropped in silence
    assert main(["train", "--config", str(tmp_path / "a" / "config.json"), "--epochs", "3", "-K", "2",
                 "--output", str(tmp_path / "c"), "-q"]) == 2
    assert "--epochs, --steps would be ignored" in capsys.readouterr().err and not (tmp_path / "c").exists()
    # a run of two torchrun processes, rerun by one: said, as the mini-batches differ
    two = json.loads((tmp_path / "a" / "config.json").read_text())
    (tmp_path / "two.json").write_text(json.dumps({**two, "world_size": 2}))
    assert main(["train", "--config", str(tmp_path / "two.json"), "--output", str(tmp_path / "d"), "-q"]) == 0
    assert "was run by 2 process(es) and this rerun has 1" in capsys.readouterr().err
    # typed at its default value, an option is still one --config would ignore
    assert main(["train", "--config", str(tmp_path / "a" / "config.json"), "--seed", "0", "--epochs", "500",
                 "--output", str(tmp_path / "c"), "-q"]) == 2
    assert "--epochs, --seed would be ignored" in capsys.readouterr().err


def test_one_trial_reports_no_spread(tmp_path, capsys):
    g, _ = _graph_folder(tmp_path / "g")
    code, out, _ = run(["train", "--dataset", str(g), "--epochs", "2", "--hidden", "8", "--output",
                        str(tmp_path / "o"), "-q"], capsys)
    assert code == 0 and "(1 trial)" in out and "±" not in out


def test_save_trials_keeps_every_checkpoint_and_prediction(tmp_path, capsys):
    g, _ = _graph_folder(tmp_path / "g")
    run(["train", "--dataset", str(g), "--epochs", "5", "--hidden", "8", "--trials", "2", "--save-trials",
         "--output", str(tmp_path / "o"), "-q"], capsys)
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    for t in metrics["trials"]:
        saved = np.genfromtxt(tmp_path / "o" / t["predictions"], delimiter=",", names=True)
        code, _, _ = run(["predict", "--checkpoint", str(tmp_path / "o" / t["checkpoint"]), "--output",
                          str(tmp_path / "p.csv")], capsys)
        again = np.genfromtxt(tmp_path / "p.csv", delimiter=",", names=True)
        assert code == 0 and np.allclose(saved["p_0"], again["p_0"], atol=1e-5)
        assert np.array_equal(saved["known"], again["known"])


def test_your_own_splits_are_used_as_trial_mod_s(tmp_path, capsys):
    g, y = _graph_folder(tmp_path / "g")
    n = len(y)
    rng = np.random.default_rng(0)
    masks = np.zeros((3, 2, n), dtype=bool)
    for s in range(2):
        part = rng.permutation(n) % 3  # 0 train, 1 val, 2 test
        masks[:, s] = part[None] == np.arange(3)[:, None]
    np.savez(g / "splits.npz", train=masks[0], val=masks[1], test=masks[2])
    code, _, _ = run(["train", "--dataset", str(g), "--epochs", "2", "--hidden", "8", "--trials", "3",
                      "--output", str(tmp_path / "o"), "-q"], capsys)
    assert code == 0
    for trial, split in ((0, 0), (1, 1), (2, 0)):
        saved = np.load(tmp_path / "o" / "splits" / f"trial_{trial}.npz")
        assert np.array_equal(saved["train"], masks[0, split]) and np.array_equal(saved["test"], masks[2, split])
    np.savez(g / "splits.npz", train=masks[0, 0], val=masks[1, 0])
    code, _, err = run(["train", "--dataset", str(g), "--output", str(tmp_path / "x")], capsys)
    assert code == 2 and "test" in err and err.count("\n") == 1
    # an empty part would leave model selection or the score without nodes (NaN): refused, 0/1 masks too
    for empty in (1, 2):
        bad = masks.astype(np.int8)
        bad[empty, 1] = 0
        np.savez(g / "splits.npz", train=bad[0], val=bad[1], test=bad[2])
        code, _, err = run(["train", "--dataset", str(g), "--output", str(tmp_path / "x")], capsys)
        assert code == 2 and f"split 1 has no {('validation', 'test')[empty - 1]} node" in err


def test_file_name_mistakes_get_errors_that_name_them(tmp_path, capsys):
    g, y = _graph_folder(tmp_path / "g", labels=False)
    np.savetxt(g / "label.csv", y, fmt="%d")  # not labels.csv
    code, _, err = run(["train", "--dataset", str(g), "--output", str(tmp_path / "o")], capsys)
    assert code == 2 and "no labels file found" in err and "labels.csv" in err
    code, _, err = run(["train", "--dataset", str(tmp_path / "no" / "such"), "--output", str(tmp_path / "o")], capsys)
    assert code == 2 and "no such folder" in err


def test_known_labeled_warns_that_test_labels_leak(trained, tmp_path, capsys):
    code, out, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--known", "labeled",
                          "--output", str(tmp_path / "p.csv")], capsys)
    assert code == 0 and "test node(s)" in err and "--known train" in err
    code, out, err = run(["predict", "--checkpoint", str(trained / "model.pt"), "--output", str(tmp_path / "p.csv")],
                         capsys)
    assert code == 0 and "evidence: train" in out and err == ""


def test_checkpoint_remembers_its_data_folder(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GBPN_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", "election", "--data-dir", data_dir, "--epochs", "2", "--hidden", "8",
                 "--output", "run", "-q"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run(["predict", "--checkpoint", str(tmp_path / "run" / "model.pt")], capsys)
    assert code == 0 and "evidence: train" in out, err
    assert (tmp_path / "run" / "predictions.csv").read_text().count("\n") == 3106  # Election: 3105 nodes


def test_the_cli_leaves_library_logging_as_it_found_it(tmp_path, caplog, capsys):
    import logging

    before = logging.getLogger("gbpn").handlers[:], logging.getLogger("gbpn").propagate
    assert main(["coupling", "--checkpoint", str(tmp_path / "none.pt")]) == 2
    assert (logging.getLogger("gbpn").handlers, logging.getLogger("gbpn").propagate) == before
    from gbpn.data.byo import load_byo

    g, _ = _graph_folder(tmp_path / "g")
    (g / "edges.csv").write_text("source,target\n")
    with caplog.at_level(logging.WARNING):
        load_byo(g)  # a library warning still reaches the application's handlers
    assert "no edges" in caplog.text


def test_train_implicit_records_convergence(tmp_path, capsys):
    code, out, err = run(["train", "--dataset", "synth-ising+", "--epochs", "3", "--hidden", "8", "--backward",
                          "implicit", "--max-steps", "40", "--output", str(tmp_path / "imp")], capsys)
    assert code == 0 and "BP converged in" in err  # the trial's log line
    trial = json.loads((tmp_path / "imp" / "metrics.json").read_text())["trials"][0]
    assert 0 <= trial["implicit_forward_converged_frac"] <= 1 and trial["implicit_forward_steps_mean"] <= 40
    ckpt = torch.load(tmp_path / "imp" / "model.pt", weights_only=False)
    assert ckpt["model_args"]["backward"] == "implicit" and ckpt["model_args"]["max_steps"] == 40
    code, _, err = run(["train", "--dataset", "synth-ising+", "--backward", "implicit", "--tol", "0",
                        "--output", str(tmp_path / "bad")], capsys)
    last = err.splitlines()[-1]
    assert code == 2 and "tol > 0" in last and last.startswith("gbpn train: error:") and err.count("error:") == 1


def test_per_rank_parts_keep_a_csv_suffix():
    from gbpn.cli import _rank_output

    assert _rank_output("out/p.csv", 1, 2) == "out/p.rank1-of-2.csv"
    assert _rank_output("out/p", 0, 2) == "out/p.rank0-of-2.csv"


def test_a_folder_given_for_a_file_output_gets_the_file_inside(trained, tmp_path, capsys):
    ckpt = str(trained / "model.pt")
    assert run(["predict", "--checkpoint", ckpt, "--output", str(tmp_path / "p") + "/"], capsys)[0] == 0
    assert (tmp_path / "p" / "predictions.csv").is_file()
    code, _, err = run(["explain", "--checkpoint", ckpt, "--node", "3", "--json", str(tmp_path / "p")], capsys)
    assert code == 0 and (tmp_path / "p" / "explain-node3.json").is_file()


def test_coupling_checks_its_output_before_printing(trained, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, out, err = run(["coupling", "--checkpoint", str(trained / "model.pt"), "--output",
                          str(tmp_path / "file")], capsys)
    assert code == 2 and out == "" and "is a file, not a folder" in err


def test_a_checkpoint_keeps_its_sample_and_reads_other_graphs_without_its_public_split(tmp_path, capsys):
    run_dir = tmp_path / "s"
    assert main(["train", "--sample", "2", "--epochs", "2", "--hidden", "8", "--output", str(run_dir), "-q"]) == 0
    ckpt = str(run_dir / "model.pt")
    # naming the checkpoint's own data set keeps its sample (it used to reset it to 0: "labels changed")
    assert main(["predict", "--checkpoint", ckpt, "--dataset", "synth-ising+", "--output", str(tmp_path / "p.csv"),
                 "-q"]) == 0
    assert main(["predict", "--checkpoint", ckpt, "--sample", "1", "--output", str(tmp_path / "q.csv"), "-q"]) == 2
    assert "--sample 1 differs from the checkpoint's sample 2" in capsys.readouterr().err
    # a public split the other graph does not have is needed by --known train only
    g, y = _graph_folder(tmp_path / "g")
    masks = np.zeros((3, len(y)), dtype=bool)
    masks[0, ::3], masks[1, 1::3], masks[2, 2::3] = True, True, True
    np.savez(g / "splits.npz", train=masks[0], val=masks[1], test=masks[2])
    assert main(["train", "--dataset", str(g), "--epochs", "2", "--hidden", "8", "--output", str(tmp_path / "b"),
                 "-q"]) == 0
    other, _ = _graph_folder(tmp_path / "other", seed=1)
    for known in ("none", "labeled", "train"):
        assert main(["predict", "--checkpoint", str(tmp_path / "b" / "model.pt"), "--dataset", str(other), "--known",
                     known, "--output", str(tmp_path / f"{known}.csv"), "-q"]) == 0, known


def test_coupling_csv_quotes_class_names_and_sample_mrf_bounds_its_coupling(trained, tmp_path, capsys):
    import csv

    from gbpn.experiments.coupling import save_coupling_csv

    save_coupling_csv(tmp_path / "c.csv", np.eye(2) + 1, ["yes, really", 'say "hi"'])
    rows = list(csv.reader(open(tmp_path / "c.csv")))
    assert rows[0] == ["class", "yes, really", 'say "hi"'] and rows[1][0] == "yes, really" and len(rows[1]) == 3
    assert main(["sample-mrf", "--output", str(tmp_path / "m"), "--size", "5", "--coupling", "1e308", "1", "1",
                 "1e308"]) == 2
    assert "at most e^80" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_analyses_record_their_options_versions_and_results(trained, tmp_path, capsys):
    ckpt = str(trained / "model.pt")
    assert main(["analyze", "convergence", "--checkpoint", ckpt, "--steps", "3", "--no-layout", "-q",
                 "--output", str(tmp_path / "c")]) == 0
    rec = json.loads((tmp_path / "c" / "convergence.json").read_text())
    assert rec["args"]["num_steps"] == 3 and "torch" in rec["versions"] and rec["evidence"] == "train"
    assert len(rec["per_step"]["test_accuracy"]) == 4 and rec["per_step"]["step_change_max"][0] is None
    assert main(["analyze", "degree", "--checkpoint", ckpt, "-q", "--output", str(tmp_path / "d")]) == 0
    rec = json.loads((tmp_path / "d" / "degree.json").read_text())
    assert sum(rec["bins"]["count"]) > 0 and rec["command"] == "analyze degree"
    assert main(["analyze", "identifiability", "--kinds", "ising+", "--epochs", "1", "--seed", "3", "-q",
                 "--output", str(tmp_path / "i")]) == 0
    rec = json.loads((tmp_path / "i" / "identifiability.json").read_text())
    assert rec["args"]["seed"] == 3 and rec["args"]["epochs"] == 1 and set(rec["results"]) == {"ising+"}
    assert 0 <= rec["results"]["ising+"]["test_accuracy"] <= 1


def test_ctrl_c_while_the_command_loads_ends_it_with_one_line(monkeypatch, capsys):
    """Ctrl-C while ``gbpn`` imports the tool (PyTorch with it, seconds) exits 130 with one line, not
    a traceback; ``import gbpn`` itself loads no PyTorch, so the entry point can catch it."""
    import gbpn.console

    class Interrupted:  # a finder that the user interrupts just as the tool is imported
        def find_spec(self, name, path=None, target=None):
            if name == "gbpn.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "gbpn.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    assert gbpn.console.main(["train", "--help"]) == 130
    assert capsys.readouterr().err == "gbpn: interrupted while loading\n"
    light = subprocess.run([sys.executable, "-c", "import sys, gbpn; print('torch' in sys.modules, gbpn.GBPN.__name__,"
                            " 'torch' in sys.modules)"], capture_output=True, text=True, check=True)
    assert light.stdout.split() == ["False", "GBPN", "True"]
    version = subprocess.run([sys.executable, "-m", "gbpn", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"gbpn {gbpn.__version__}"


def test_version_answers_without_loading_torch():
    code = ("import sys; from gbpn.console import main; rc = main(['--version']); "
            "assert 'torch' not in sys.modules, 'torch loaded'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().startswith("gbpn ") and not proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["predict", "--help"], ["coupling", "--help"],
                                  ["train", "--weight-decay", "x"], ["train", "--weight-decay", "-1e-3"],
                                  ["train", "--lr", "-inf"], ["train", "--no-such-flag"],
                                  ["train", "--dataset", "no-such-set"], ["train", "--dataset", "./no/such/folder"]])
def test_help_and_argument_errors_answer_without_loading_torch(argv):
    """--help, usage errors and out-of-range values answer before PyTorch (and PyG) load: a second,
    not the seconds those take."""
    code = (f"import sys; from gbpn.console import main; rc = main({argv!r}); "
            "assert not {'torch', 'torch_geometric', 'numpy'} & set(sys.modules), 'loaded'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "loaded" not in proc.stderr, proc.stderr
    if "--help" in argv:
        assert proc.returncode == 0 and "usage: gbpn" in proc.stdout
    else:
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "error: " in proc.stderr.splitlines()[-1]


def test_negative_scientific_values_reach_the_range_check(capsys):
    """``--weight-decay -1e-3`` is a value, as ``-0.001`` is: the range check names the option."""
    from gbpn.cli import main

    assert main(["train", "--weight-decay", "-1e-3"]) == 2
    assert "--weight-decay) must be a finite number >= 0, got -0.001" in capsys.readouterr().err


def test_python_warnings_become_our_lines_or_nothing(monkeypatch, capsys):
    """A dependency's raw warning (NumPy's RuntimeWarning, torch's UserWarning) never reaches the user
    (-v shows it as a debug line); gbpn's own is one line of the log."""
    import warnings

    import gbpn.cli.coupling as coupling

    ours = str(Path(coupling.__file__).with_name("output.py"))

    def noisy(args):
        warnings.warn_explicit("overflow encountered in exp", RuntimeWarning, "/site-packages/numpy/core.py", 7)
        warnings.warn_explicit("GBPN_POOL_BYTES must be a number of bytes", RuntimeWarning, ours, 9)
        return 0

    monkeypatch.setattr(coupling, "run", noisy)
    assert main(["coupling", "--checkpoint", "x.pt"]) == 0
    err = capsys.readouterr().err
    assert err == "warning: GBPN_POOL_BYTES must be a number of bytes\n"
    assert main(["coupling", "--checkpoint", "x.pt", "-v"]) == 0
    assert "RuntimeWarning from /site-packages/numpy/core.py:7: overflow encountered in exp" in capsys.readouterr().err


def test_commands_writing_into_a_folder_another_run_holds_stop_or_wait(trained, tmp_path, capsys):
    """predict, coupling and analyze take the output folder's lock as train does: a second writer
    stops with one line naming the folder, or with --wait writes once the holder lets go."""
    import threading

    from gbpn.experiments.lock import FOLDER_LOCK

    hold = ("import sys, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
            "sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / FOLDER_LOCK)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    checkpoint = ["--checkpoint", str(trained / "model.pt")]
    try:
        for cmd in (["predict", "--output", str(tmp_path / "p.csv")], ["coupling", "--output", str(tmp_path)],
                    ["analyze", "convergence", "--steps", "2", "--no-layout", "--output", str(tmp_path)]):
            code, _, err = run([*cmd, *checkpoint], capsys)
            assert code == 2 and f"{tmp_path} is in use by another run" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == [FOLDER_LOCK]  # nothing written
        threading.Timer(0.5, holder.stdin.close).start()  # the holder ends half a second from now
        code, _, _ = run(["predict", "--output", str(tmp_path / "p.csv"), "--wait", *checkpoint], capsys)
        assert code == 0 and (tmp_path / "p.csv").is_file()
    finally:
        holder.kill()
        holder.wait()
