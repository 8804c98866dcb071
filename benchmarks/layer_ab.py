"""The BP layer of two source trees side by side: seconds per call of ``BeliefPropagation`` (a K-step
training call, forward and backward, and an inference call) on the same graphs, each tree in its own
process, in alternating order for ``--rounds`` rounds. A ratio is the median of the per-round ratios
new/old (these machines drift by 20-50% between runs), so dispatch overhead and kernel changes show
up against a baseline measured minutes apart at most.

    git archive 2cbaa7b | tar -x -C /tmp/base
    python benchmarks/layer_ab.py --old /tmp/base/src --new src --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = [("small c=2", 2708, 5278, 2), ("small c=7", 2708, 5278, 7), ("medium c=2", 50_000, 250_000, 2),
         ("medium c=7", 50_000, 250_000, 7), ("medium c=40", 50_000, 250_000, 40)]


def child(reps: int) -> None:
    import torch

    from gbpn import BeliefPropagation

    torch.set_num_threads(1)
    out = {}
    for name, n, m, c in CASES:
        g = torch.Generator().manual_seed(0)
        pairs = torch.randint(0, n, (2, m), generator=g)
        pairs = pairs[:, pairs[0] != pairs[1]]
        ei = torch.unique(torch.cat([pairs, pairs.flip(0)], 1), dim=1)
        layer = BeliefPropagation(c, num_steps=5)
        phi = torch.randn(n, c, generator=g).log_softmax(-1).requires_grad_()
        known = torch.rand(n, generator=g) < 0.3
        labels = torch.randint(0, c, (n,), generator=g)

        def train():
            layer(phi, ei, known_labels=labels, known_mask=known).sum().backward()

        def infer():
            with torch.no_grad():
                layer(phi, ei, known_labels=labels, known_mask=known)

        for label, fn in (("train", train), ("infer", infer)):
            fn()  # kernels loaded, layouts cached
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            out[f"{name} {label}"] = statistics.median(times)
    print(json.dumps(out))


def run(src: str, reps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    proc = subprocess.run([sys.executable, __file__, "--child", "--reps", str(reps)], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        sys.exit(f"the {src} process failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="the baseline tree's src folder")
    ap.add_argument("--new", help="the tree under test's src folder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.reps)
    if not (args.old and args.new):
        ap.error("give --old and --new")
    ratios, olds, news = {}, {}, {}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        got = {side: run(getattr(args, side), args.reps) for side in order}
        for key in got["old"]:
            ratios.setdefault(key, []).append(got["new"][key] / got["old"][key])
            olds.setdefault(key, []).append(got["old"][key])
            news.setdefault(key, []).append(got["new"][key])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'case':<24}{'old s':>10}{'new s':>10}{'new/old':>9}  per-round ratios")
    for key, rs in ratios.items():
        print(f"{key:<24}{statistics.median(olds[key]):>10.4f}{statistics.median(news[key]):>10.4f}"
              f"{statistics.median(rs):>9.2f}  {' '.join(f'{x:.2f}' for x in rs)}")


if __name__ == "__main__":
    main()
