"""Seconds per full-batch training step (forward, backward, AdamW) of the published GNN encoders against PyG's own
convolutions at the same width and depth, and each one's peak memory.

Pairs: ``res-sage`` / ``res-gcn`` / ``res-gat-sep`` / ``res-gt-sep`` (Platonov et al.'s residual blocks, their
aggregation on CSR products) against :class:`~gbpn.models.encoders.gnn.GNNEncoder` with PyG's ``SAGEConv`` /
``GCNConv`` / ``GATConv`` (residual, LayerNorm, separate ego weight), and ``classic-gcn`` / ``classic-sage`` (Luo et
al.'s deep classic GNNs) against the same. Every cell runs in its own process (its peak RSS is its own); the cells
of a data set run in turn, ``--rounds`` times, alternating their order, and the ratio is each encoder's median step
over its PyG reference's median step measured in the same run.

    python benchmarks/published_encoders.py [--datasets chameleon-filtered squirrel-filtered] [--steps 10]

Needs GBPN_DATA (or --data-dir).
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

PAIRS = [("res-sage", "sage"), ("res-gcn", "gcn"), ("res-gat-sep", "gat"), ("res-gt-sep", "gat"),
         ("classic-gcn", "gcn"), ("classic-sage", "sage")]


def _cell(dataset: str, encoder: str, hidden: int, depth: int, steps: int, warmup: int, data_dir: str) -> dict:
    import torch

    from gbpn.data import load_dataset
    from gbpn.data.features import prepare_features
    from gbpn.models.encoders import build_encoder

    torch.set_num_threads(1)
    data = load_dataset(dataset, data_dir)
    if encoder.startswith(("res", "classic")):
        options = {"blocks": depth} if encoder.startswith("res") else {"num_layers": depth, "residual": True,
                                                                        "batch_norm": True}
    else:  # PyG's convolutions in the tuned baselines' stack, as close to a residual normalised block as it gets
        options = {"num_layers": depth, "residual": True, "layer_norm": True}
    model = build_encoder(encoder, data.num_features, int(data.num_classes), hidden, 2, 0.2, **options)
    inputs = model.precompute(prepare_features(data.x), data.edge_index)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = data.public_splits[0, 0] if getattr(data, "public_splits", None) is not None else torch.ones(
        data.num_nodes, dtype=torch.bool)
    times = []
    for it in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs)[train], data.y[train]).backward()
        opt.step()
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    return {"times": times, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["chameleon-filtered", "squirrel-filtered"])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", default=os.environ.get("GBPN_DATA"))
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cell:
        dataset, encoder = args.cell.split("|")
        print(json.dumps(_cell(dataset, encoder, args.hidden, args.depth, args.steps, args.warmup, args.data_dir)))
        return
    encoders = list(dict.fromkeys(e for pair in PAIRS for e in pair))
    print(f"width {args.hidden}, depth {args.depth}, {args.steps} steps x {args.rounds} rounds, one thread")
    print("| data set | encoder | s/step (median) | PyG reference | s/step | ratio | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for dataset in args.datasets:
        times = {e: [] for e in encoders}
        peak = {}
        for r in range(args.rounds):
            for e in (encoders if r % 2 == 0 else encoders[::-1]):
                cmd = [sys.executable, __file__, "--cell", f"{dataset}|{e}", "--hidden", str(args.hidden),
                       "--depth", str(args.depth), "--steps", str(args.steps), "--warmup", str(args.warmup),
                       "--data-dir", args.data_dir or ""]
                out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                                env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout.splitlines()[-1])
                times[e] += out["times"]
                peak[e] = max(peak.get(e, 0.0), out["peak_mib"])
        med = {e: statistics.median(t) for e, t in times.items()}
        for enc, ref in PAIRS:
            print(f"| {dataset} | {enc} | {med[enc]:.3f} | {ref} | {med[ref]:.3f} | {med[enc] / med[ref]:.2f} | "
                  f"{peak[enc]:.0f} (PyG {peak[ref]:.0f}) |", flush=True)


if __name__ == "__main__":
    main()
