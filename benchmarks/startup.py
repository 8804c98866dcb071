"""How long each ``gbpn`` command takes to answer, whole process, for two source trees side by side.

Each command runs as a fresh process (``python -m gbpn ...`` with the tree on ``PYTHONPATH``), old
and new in alternating order for ``--rounds`` rounds after one warm-up each; the table gives each
one's median wall seconds and the median of the per-round ratios new/old (these machines drift by
20-50% between runs). The light commands read a small checkpoint trained here with the old tree.

    git archive 2cbaa7b | tar -x -C /tmp/base
    python benchmarks/startup.py --old /tmp/base/src --new src --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def commands(run: Path, out: Path) -> list:
    ckpt = ["--checkpoint", str(run / "model.pt")]
    return [("--version", ["--version"]),
            ("--help", ["--help"]),
            ("train --help", ["train", "--help"]),
            ("usage error (--weight-decay -1e-3)", ["train", "--weight-decay", "-1e-3"]),
            ("unknown data set", ["train", "--dataset", "no-such-set"]),
            ("coupling", ["coupling", *ckpt, "--output", str(out)]),
            ("explain", ["explain", *ckpt, "--node", "0"]),
            ("predict (2,601 nodes)", ["predict", *ckpt, "--output", str(out / "p.csv")])]


def timed(src: str, argv: list) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gbpn", *argv], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="src folder of the baseline tree")
    parser.add_argument("--new", required=True, help="src folder of the tree measured")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run, out = Path(tmp) / "run", Path(tmp) / "out"
        env = {**os.environ, "PYTHONPATH": str(Path(args.old).resolve())}
        subprocess.run([sys.executable, "-m", "gbpn", "train", "--dataset", "synth-ising+", "--epochs", "3",
                        "--hidden", "8", "-q", "--output", str(run)], env=env, check=True, stdout=subprocess.DEVNULL)
        print(f"{'command':<36} {'old s':>7} {'new s':>7} {'new/old':>8}")
        for name, argv in commands(run, out):
            timed(args.old, argv), timed(args.new, argv)  # warm-up (the file cache), not counted
            old, new = [], []
            for _ in range(args.rounds):
                old.append(timed(args.old, argv))
                new.append(timed(args.new, argv))
            ratio = statistics.median(n / o for n, o in zip(new, old))
            print(f"{name:<36} {statistics.median(old):>7.2f} {statistics.median(new):>7.2f} {ratio:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
