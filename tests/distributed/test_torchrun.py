"""``gbpn train`` and ``gbpn predict`` under ``torchrun`` with 2 CPU ranks (gloo)."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gbpn.cli import main

TRAIN = ["train", "--batch-size", "128", "--hidden", "32", "--epochs", "8"]


def torchrun(args, **kw):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gbpn", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                          timeout=600, **kw)


def probabilities(path):
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    cols = [k for k in rows[0] if k.startswith("p_")]
    return [[float(r[k]) for k in cols] for r in rows]


@pytest.mark.slow
def test_data_parallel_training_and_partitioned_inference(tmp_path):
    run = tmp_path / "run"
    proc = torchrun([*TRAIN, "--output", str(run)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["world_size"] == 2
    trial = json.loads((run / "metrics.json").read_text())["trials"][0]
    digests = trial["rank_parameter_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]  # both ranks end with the same parameters
    assert trial["last_loss"] < trial["first_loss"]
    assert trial["test_accuracy"] > 0.6

    parts = tmp_path / "parts.pt"
    proc = torchrun(["predict", "--checkpoint", str(run / "model.pt"), "--output", str(tmp_path / "two.csv"),
                     "--parts-file", str(parts)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "partition: 2 part(s)" in proc.stderr and "sent per BP step" in proc.stderr
    assert parts.is_file() and "read from" not in proc.stderr
    report = json.loads((tmp_path / "two.json").read_text())
    assert report["partition"]["parts"] == 2 and 0 < report["partition"]["cut_fraction"] < 1
    assert all(b > 0 for b in report["bytes_sent_per_step"])
    assert main(["predict", "--checkpoint", str(run / "model.pt"), "--output", str(tmp_path / "one.csv")]) == 0
    # --per-rank: no gather, every rank writes its own nodes' rows under their graph ids
    # (and the parts of the first run, read from its file: partitioning is skipped)
    proc = torchrun(["predict", "--checkpoint", str(run / "model.pt"), "--per-rank", "--output",
                     str(tmp_path / "parts.csv"), "--parts-file", str(parts)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"read from {parts}" in proc.stderr
    files = json.loads((tmp_path / "parts.json").read_text())["files"]
    assert [os.path.basename(f) for f in files] == ["parts.rank0-of-2.csv", "parts.rank1-of-2.csv"]
    assert not (tmp_path / "parts.csv").exists()
    merged = {}
    for f in files:
        rows = probabilities(f)
        with open(f) as fh:
            ids = [int(r["node"]) for r in csv.DictReader(fh)]
        assert ids == sorted(ids) and not merged.keys() & set(ids)  # each node in exactly one part
        merged.update(zip(ids, rows))
    one = probabilities(tmp_path / "one.csv")
    # (the refined partitioner's ranks sharing their halves: tests/distributed/test_partition.py, in one process)
    for two in (probabilities(tmp_path / "two.csv"), [merged[i] for i in range(len(merged))]):
        assert len(one) == len(two)
        worst = max(abs(a - b) for ra, rb in zip(one, two) for a, b in zip(ra, rb))
        assert worst < 1e-5  # partitioned equals single-process inference (the CSV keeps 6 decimals)
    with open(tmp_path / "one.csv") as a, open(files[0]) as b:  # the same evidence column
        known = {r["node"]: r["known"] for r in csv.DictReader(a)}
        assert all(known[r["node"]] == r["known"] for r in csv.DictReader(b))


@pytest.mark.slow
def test_interrupted_distributed_training_resumes(tmp_path):
    run = tmp_path / "run"
    args = [*TRAIN[:-1], "12", "--trials", "3", "--output", str(run)]  # a trial takes seconds: SIGINT lands in trial 2
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "gbpn", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    metrics = run / "metrics.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.is_file() and len(json.loads(metrics.read_text())["trials"]) >= 1:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # torchrun passes it on to both ranks
    proc.communicate(timeout=120)
    first = json.loads(metrics.read_text())["trials"]
    if len(first) == 3:
        pytest.skip("every trial finished before the interruption arrived")
    again = torchrun(args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming {run}: {len(first)} of 3 trials already finished" in again.stderr
    done = json.loads(metrics.read_text())["trials"]
    assert [t["trial"] for t in done] == [0, 1, 2]
    assert done[0] == first[0]  # the finished trial was kept, not retrained


@pytest.mark.slow
def test_full_batch_training_under_torchrun_is_refused(tmp_path):
    proc = torchrun(["train", "--epochs", "2", "--output", str(tmp_path / "run")])
    assert proc.returncode != 0  # torchrun exits 1 whatever its ranks' codes (each rank exits 2)
    error = "gbpn train: error: training under torchrun is data-parallel"
    # said once (rank 0; the others ran the same checks), not once per rank
    ours = [line for line in proc.stderr.splitlines() if line.startswith("gbpn train")]
    assert len(ours) == 1 and ours[0].startswith(error), proc.stderr[-3000:]
    # torchrun's launcher prints its own traceback of the failed children; none comes from gbpn, and its summary
    # names the ranks' error (from the error file torchrun gives each rank), not a pointer to torchrun's docs
    assert "gbpn/cli" not in proc.stderr and "GBPNError" not in proc.stderr
    assert f"traceback : {error}" in proc.stderr and "To enable traceback see" not in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag", [["--per-rank"], ["--parts-file", "parts.pt"]])
def test_partitioned_inference_options_need_torchrun(flag, capsys):
    assert main(["predict", "--checkpoint", "nowhere.pt", *flag]) == 2
    assert f"{flag[0]} is for partitioned inference over the ranks of torchrun" in capsys.readouterr().err


def test_single_process_commands_refuse_torchrun(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["coupling", "--checkpoint", "nowhere.pt"]) == 2
    assert "does not run under torchrun" in capsys.readouterr().err


def test_a_rank_other_than_0_leaves_its_error_to_torchrun_s_summary(tmp_path, monkeypatch, capsys):
    """Rank 0 says an error every rank has; each rank writes it to the error file torchrun gives it (its summary
    shows a failed rank's message from there): an error of one rank alone reaches the user too."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / f"error{rank}.json"))
        assert main(["coupling", "--checkpoint", "nowhere.pt"]) == 2
        err = capsys.readouterr().err
        assert ("does not run under torchrun" in err) == (rank == "0"), err
        recorded = json.loads((tmp_path / f"error{rank}.json").read_text())["message"]
        assert recorded["message"].startswith("gbpn coupling: does not run under torchrun")
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        failure = ProcessFailure(local_rank=int(rank), pid=1, exitcode=2, error_file=str(tmp_path / f"error{rank}.json"))
        assert failure.message["extraInfo"]["py_callstack"] == recorded["message"]  # what its summary prints
