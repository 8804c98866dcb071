"""Neighbour-agreement rates of our MRF sampler beside the reference grid files.

For each synthetic model, samples 10 grids (51 x 51) for a few coupling strengths s
(``gbpn.data.mrf.coupling_family``: Potts ``exp(s (2I - 1))`` for Ising, ``exp(s P)`` with the
documented pattern P for MRF) and prints the mean fraction of edges whose end points agree,
next to the same rate in the reference files (<data-dir>/gbpn/<kind>/label).

    python benchmarks/mrf_agreement.py --data-dir ../shared/datasets
"""
from __future__ import annotations

import argparse

from gbpn.data import load_dataset, neighbour_agreement
from gbpn.data.mrf import (
    DEFAULT_STRENGTH,
    SYNTHETIC_KINDS,
    coupling_family,
    make_synthetic,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--scales", nargs="+", type=float, default=[0.8, 1.0, 1.2],
                    help="strengths tried, as multiples of the default strength")
    ap.add_argument("--burn-in", type=int, default=1000)
    ap.add_argument("--thin", type=int, default=100)
    args = ap.parse_args()
    for kind in SYNTHETIC_KINDS:
        ref = load_dataset(kind, args.data_dir)
        ref_rates = [neighbour_agreement(ref.edge_index, load_dataset(kind, args.data_dir, sample=k).y) for k in range(10)]
        print(f"{kind}: reference files agreement {sum(ref_rates) / 10:.3f}")
        for scale in args.scales:
            s = scale * DEFAULT_STRENGTH[kind]
            d = make_synthetic(kind, coupling=coupling_family(kind, s), burn_in=args.burn_in, thin=args.thin)
            rates = [neighbour_agreement(d.edge_index, y) for y in d.y_samples]
            default = " (default)" if scale == 1.0 else ""
            print(f"  ours, strength {s:+.3f}: agreement {sum(rates) / len(rates):.3f}{default}")


if __name__ == "__main__":
    main()
