"""Long commands as a user runs them: progress in a log (benchmark, the analyses that train), -q, a
benchmark's default folders and absent data sets."""
import os
import subprocess
import sys

import pytest

from gbpn.cli import main

pytestmark = pytest.mark.slow  # whole (tiny) grids, and a process

GRID = ["benchmark", "--models", "mlp", "--datasets", "synth-ising+", "--trials", "2", "--epochs", "2",
        "--threads", "1"]


def test_a_grid_logged_to_a_file_gets_one_line_per_finished_run_with_elapsed_and_left(tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w") as fh:  # as nohup or CI run it: stderr is a file, not a terminal
        proc = subprocess.run([sys.executable, "-m", "gbpn", *GRID], cwd=tmp_path, stdout=fh, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "2 runs to do (1 data set(s) x 1 model(s) x 2 trial(s)), 0 already finished" in text
    lines = [line for line in text.splitlines() if line.startswith("benchmark: run ")]
    assert len(lines) == 2, text
    assert lines[0].startswith("benchmark: run 1/2 done (synth-ising+ mlp trial 0, test accuracy ")
    assert "%) in " in lines[0] and " elapsed, about " in lines[0] and " left (from the first run)" in lines[0]
    assert lines[1].startswith("benchmark: run 2/2 done (synth-ising+ mlp trial 1") and lines[1].endswith("all done")
    assert "\r" not in text  # no bar redrawn into the file


def test_quiet_silences_the_progress_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*GRID, "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "| synth-ising+ |" in captured.out


def test_two_default_grids_with_other_settings_get_their_own_folders(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*GRID, "-q"]) == 0
    assert main([*GRID, "--epochs", "3", "-q"]) == 0  # refused before: "holds a grid with other epochs"
    out = capsys.readouterr().out
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    # every option given another value than its default is in the name, --trials 2 included
    assert folders == ["benchmark-mlp-on-synth-ising+-trials2-epochs2", "benchmark-mlp-on-synth-ising+-trials2-epochs3"]
    assert "in runs/benchmark-mlp-on-synth-ising+-trials2-epochs3" in out
    # the same line again resumes its own folder
    assert main([*GRID]) == 0
    assert "0 runs to do" in capsys.readouterr().err


def test_a_preset_with_a_missing_data_set_stops_with_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["benchmark", "--preset", "table2", "--quick", "--data-dir", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 2 and "set --data-dir or GBPN_DATA" in err and "--skip-missing" in err
    assert "runs to do" not in err and not (tmp_path / "runs").exists()  # stopped before anything ran
    # --skip-missing runs without them: here none is left, which is an error of its own
    code = main(["benchmark", "--preset", "table2", "--quick", "--data-dir", str(tmp_path / "empty"),
                 "--skip-missing"])
    err = capsys.readouterr().err
    assert code == 2 and "skipping ising+" in err and "every data set of the grid was skipped" in err


def test_a_study_says_what_it_will_do_and_each_trained_model_in_a_log(tmp_path, capsys):
    out = str(tmp_path / "i")
    assert main(["analyze", "identifiability", "--kinds", "ising+", "--epochs", "1", "--output", out]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "identifiability: 1 grid(s) to do (ising+: each sampled, then trained for 1 epochs)" in err
    done = [line for line in err if line.startswith("identifiability: grid 1/1 done (ising+) in ")]
    assert len(done) == 1 and done[0].endswith("elapsed, all done")
    assert main(["analyze", "identifiability", "--kinds", "ising+", "--epochs", "1", "--output", out, "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_train_and_benchmark_number_trials_from_0_as_their_files_do(tmp_path, monkeypatch, capsys):
    import re

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--trials", "2", "--epochs", "2", "--hidden", "8", "--output", "t"]) == 0
    said = {int(k) for k in re.findall(r"\btrial (\d+)", capsys.readouterr().err)}
    files = {int(p.stem.split("_")[1]) for p in (tmp_path / "t" / "splits").glob("trial_*.npz")}
    assert said == files == {0, 1}
    assert main(GRID) == 0
    said = {int(k) for k in re.findall(r"\btrial (\d+)", capsys.readouterr().err)}
    rows = {int(p.stem.rsplit("__", 1)[1]) for p in tmp_path.glob("runs/*/rows/*.json")}
    assert said == rows == {0, 1}
