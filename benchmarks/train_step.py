"""Seconds per full-batch GBPN training step (forward + backward + AdamW, K = 5, transductive) and peak memory.

Each (dataset, threads, kernel) cell runs in its own process so that peak RSS is its own.
``lean`` is the library's kernel (float32 throughout; the fused numba BP kernel where it applies);
``eager`` the same step with ``kernel="eager"`` (today's reference path); ``plain`` swaps in the E x c x c
log-sum-exp form, measured in the same run as the in-run baseline; ``bf16`` is the lean kernel
with the MLP's hidden layers in bfloat16 (``--precision bf16``; BP stays float32); ``mlp`` is the
same step with K = 0 (the MLP alone: a floor no BP kernel can go under); ``depth1`` is the lean step with a
one-hidden-layer MLP (``--mlp-layers 1``, F-256-c instead of F-256-256-c). ``lean/MLP`` divides
the lean process's step by the ``mlp`` process's; ``paired`` is the median of the per-iteration
ratios of the lean step and the K = 0 step of the same model, taken in turn in the lean process
(on small graphs the K = 0 step moves by more than BP costs between processes). No figure of another
implementation is quoted here: only what this script measures in the same run is compared.

    python benchmarks/train_step.py [--datasets cora citeseer ...] [--steps 60] [--warmup 10]

Needs GBPN_DATA (or --data-dir) for the real datasets.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

DATASETS = ["cora", "citeseer", "election", "sexual", "ising+"]


def time_steps(model, x, data, train, steps: int, warmup: int, schedule=(None,)) -> list:
    """Seconds of each of ``steps`` transductive training steps (after ``warmup`` untimed ones): half
    the training labels clamped, the degree-tempered loss on the other half, backward, AdamW.

    ``schedule`` lists the BP step counts to time (``None``: the model's K; ``0``: the MLP alone).
    Each iteration takes one step with each, starting at a different entry every iteration, so the
    entries are timed seconds apart and in no fixed order; returns one list per entry."""
    import torch

    from gbpn.train.objective import degree_temperature, marginal_nll

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=2.5e-4)
    train_idx = train.nonzero().view(-1)
    alpha = degree_temperature(data.edge_index, data.num_nodes)
    gen = torch.Generator().manual_seed(0)
    times = [[] for _ in schedule]
    model.train()
    for it in range(warmup + steps):
        for j in range(len(schedule)):
            slot = (it + j) % len(schedule)
            t0 = time.perf_counter()
            perm = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
            known = torch.zeros_like(train)
            known[perm[: perm.numel() // 2]] = True
            loss_idx = perm[perm.numel() // 2 :]
            out = model(x, data.edge_index, rev_index=data.rev_index, known_labels=data.y, known_mask=known,
                        num_steps=schedule[slot])
            loss = marginal_nll(out[loss_idx], data.y[loss_idx], alpha[loss_idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if it >= warmup:
                times[slot].append(time.perf_counter() - t0)
    return times


def measure(dataset: str, kernel: str, steps: int, warmup: int, data_dir: str | None) -> dict:
    import torch

    import gbpn.bp.layer as bp
    from gbpn.train.config import TrainConfig, default_dropout
    from gbpn.data import load_dataset, random_split
    from gbpn import GBPN
    from gbpn.bp.functional import log_matmul_exp_dense, log_normalize
    from gbpn.train.fit import model_args
    from gbpn.data.features import prepare_features

    if kernel == "plain":
        bp.normalized_message = lambda v, log_H: log_normalize(log_matmul_exp_dense(v, log_H))
    data = load_dataset(dataset, data_dir)
    cfg = TrainConfig(precision="bf16" if kernel == "bf16" else "fp32", num_hidden=1 if kernel == "depth1" else 2)
    train, _, _ = random_split(data.y, seed=0)
    torch.manual_seed(0)
    dropout = default_dropout(data.num_features, int(train.sum()))
    model = GBPN(**model_args(data.num_features, int(data.num_classes), cfg, dropout))
    if kernel in ("eager", "plain"):  # the plain form replaces a function of the eager path
        model.bp.kernel = "eager"
    x = prepare_features(data.x)
    # the lean process also times the K = 0 step in turn with its own: the ratio of two steps of one
    # process, taken seconds apart (separate processes drift apart by more than BP costs here)
    schedule = (0,) if kernel == "mlp" else (None, 0) if kernel == "lean" else (None,)
    times = time_steps(model, x, data, train, steps, warmup, schedule)
    out = {
        "seconds_per_step": statistics.median(times[0]),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }
    if kernel == "lean":
        out["over_mlp_paired"] = statistics.median(a / b for a, b in zip(*times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", nargs="+", default=["1", "default"])
    ap.add_argument("--child", nargs=3, metavar=("DATASET", "KERNEL", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        ds, kernel, threads = args.child
        if threads != "default":
            import torch

            torch.set_num_threads(int(threads))
        print(json.dumps(measure(ds, kernel, args.steps, args.warmup, args.data_dir)))
        return

    print(f"{'dataset':<10} {'threads':>7} {'lean s/step':>12} {'eager s/step':>13} {'eager/lean':>10} "
          f"{'lean/MLP':>9} {'paired':>7} {'plain s/step':>13} {'plain/lean':>10} "
          f"{'bf16 s/step':>12} {'depth1 s/step':>14} {'MLP-only':>9} {'lean MB':>8} {'plain MB':>9}")
    for ds in args.datasets:
        for threads in args.threads:
            row = {}
            for kernel in ("lean", "eager", "plain", "bf16", "depth1", "mlp"):
                env = dict(os.environ)
                cmd = [sys.executable, __file__, "--child", ds, kernel, threads, "--steps", str(args.steps),
                       "--warmup", str(args.warmup)] + (["--data-dir", args.data_dir] if args.data_dir else [])
                if threads == "1":
                    env["OMP_NUM_THREADS"] = "1"
                    cmd = ["taskset", "-c", "0"] + cmd
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                row[kernel] = json.loads(out.stdout.strip().splitlines()[-1])
            lean, plain = row["lean"], row["plain"]
            eager, mlp = row["eager"]["seconds_per_step"], row["mlp"]["seconds_per_step"]
            print(f"{ds:<10} {lean['threads']:>7} {lean['seconds_per_step']:>12.4f} {eager:>13.4f} "
                  f"{eager / lean['seconds_per_step']:>10.2f} {lean['seconds_per_step'] / mlp:>9.2f} "
                  f"{lean['over_mlp_paired']:>7.2f} "
                  f"{plain['seconds_per_step']:>13.4f} "
                  f"{plain['seconds_per_step'] / lean['seconds_per_step']:>10.2f} "
                  f"{row['bf16']['seconds_per_step']:>12.4f} {row['depth1']['seconds_per_step']:>14.4f} "
                  f"{row['mlp']['seconds_per_step']:>9.4f} "
                  f"{lean['peak_rss_mb']:>8.0f} {plain['peak_rss_mb']:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
