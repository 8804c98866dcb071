"""Neighbour-agreement rates of our MRF sampler beside the reference grid files.

For each synthetic model, samples 10 grids (51 x 51) for a few coupling strengths s
(H = exp(s * (2I - 1))) and prints the mean fraction of edges whose end points agree,
next to the same rate in the reference files (<data-dir>/gbpn/<kind>/label).

    python benchmarks/mrf_agreement.py --data-dir ../shared/datasets
"""
from __future__ import annotations

import argparse

import torch

from gbpn.data import load_dataset, neighbour_agreement
from gbpn.data.mrf import DEFAULT_COUPLING, SYNTHETIC_KINDS, _potts, make_synthetic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--strengths", nargs="+", type=float, default=[0.2, 0.3, 0.35, 0.4, 0.5])
    ap.add_argument("--burn-in", type=int, default=1000)
    ap.add_argument("--thin", type=int, default=100)
    args = ap.parse_args()
    for kind in SYNTHETIC_KINDS:
        ref = load_dataset(kind, args.data_dir)
        ref_rates = [neighbour_agreement(ref.edge_index, load_dataset(kind, args.data_dir, sample=k).y) for k in range(10)]
        print(f"{kind}: reference files agreement {sum(ref_rates) / 10:.3f}")
        sign = 1 if kind.endswith("+") else -1
        for s in args.strengths:
            d = make_synthetic(kind, coupling=_potts(ref.num_classes, sign * s), burn_in=args.burn_in, thin=args.thin)
            rates = [neighbour_agreement(d.edge_index, y) for y in d.y_samples]
            default = " (default)" if torch.allclose(DEFAULT_COUPLING[kind], _potts(ref.num_classes, sign * s)) else ""
            print(f"  ours, strength {sign * s:+.2f}: agreement {sum(rates) / len(rates):.3f}{default}")


if __name__ == "__main__":
    main()
