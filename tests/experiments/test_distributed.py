import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_two_cpu_ranks_end_with_identical_parameters_and_the_loss_falls(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "examples" / "train_ddp.py"), "--epochs", "8", "--hidden", "32",
           "--batch-size", "128", "--params-out", str(tmp_path / "p")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    a, b = torch.load(tmp_path / "p.rank0.pt"), torch.load(tmp_path / "p.rank1.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert all(r["last_loss"] < r["first_loss"] for r in rows)
    assert next(r for r in rows if r["rank"] == 0)["test_accuracy"] > 0.6
