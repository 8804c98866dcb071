"""``gbpn sample-mrf``: sample a synthetic grid MRF data set into the bring-your-own format."""
from __future__ import annotations

import argparse
import io
import math
from pathlib import Path

from gbpn.cli.options import NON_NEGATIVE, POSITIVE, add_threads
from gbpn.errors import GBPNError


def add_parser(sub, common) -> None:
    m = sub.add_parser("sample-mrf", parents=common, help="sample a synthetic grid MRF data set into the bring-your-own format")
    m.add_argument("--kind", choices=["ising+", "ising-", "mrf+", "mrf-"], default="ising+",
                   help="Ising (2 classes) or Potts-like MRF (3), homophilous (+) or heterophilous (-) (default: ising+)")
    m.add_argument("--size", type=int, default=51, help="grid side n (n x n nodes; default: 51)")
    m.add_argument("--coupling", type=float, nargs="+", default=None,
                   help="coupling H row by row (c*c positive numbers; default: the kind's documented default)")
    m.add_argument("--triangle-coupling", type=float, default=None, metavar="S",
                   help="a triangular lattice (n x n nodes, every interior node in six triangles) with a triangle "
                        "factor of strength S instead of the grid: log T = S s_i s_j s_k (s = -1, +1) for the ising "
                        "kinds, which no pairwise coupling can express; log T = S [all three equal] for the mrf "
                        "kinds. No pairwise coupling unless --coupling; the field favours class a in the a-th "
                        "angular sector (default: the grid)")
    m.add_argument("--samples", type=POSITIVE, default=10, help="label samples to draw (default: 10)")
    m.add_argument("--sample", type=int, default=0, help="which sample becomes labels.csv (default: 0)")
    m.add_argument("--burn-in", type=NON_NEGATIVE, default=1000, help="sweeps discarded first (default: 1000)")
    m.add_argument("--thin", type=POSITIVE, default=100, help="sweeps between samples (default: 100)")
    m.add_argument("--seed", type=int, default=0, help="seed of the sampler and the features (default: 0)")
    m.add_argument("--output", required=True,
                   help="folder to write edges.csv, features.csv, labels.csv (the chosen sample), "
                        "label_samples.csv (every sample) and mrf.json (the coupling and settings) into")
    add_threads(m)


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from gbpn.data.mrf import make_synthetic
    from gbpn.io import atomic_write, write_json

    coupling = None
    if args.coupling is not None:
        c = int(round(len(args.coupling) ** 0.5))
        if c * c != len(args.coupling) or not all(0 < v < float("inf") for v in args.coupling):  # NaN fails too
            raise GBPNError("--coupling needs c*c positive finite numbers (the matrix row by row)")
        spread = math.log(max(args.coupling)) - math.log(min(args.coupling))
        if spread > 80:  # what gbpn's float32 BP computes exactly (and what mrf.json can record)
            raise GBPNError(f"--coupling spans a ratio of e^{spread:.0f} between its largest and smallest entries; at "
                            "most e^80 (float32 BP): keep the coupling milder")
        coupling = torch.tensor(args.coupling, dtype=torch.float64).view(c, c)
        want = 2 if args.kind.startswith("ising") else 3
        if c != want or not torch.allclose(coupling, coupling.T):
            raise GBPNError(f"--coupling for {args.kind} must be a symmetric {want}x{want} matrix")
    triangle = args.triangle_coupling
    if triangle is not None:
        from gbpn.data.triangle_mrf import make_triangle_mrf

        if not abs(triangle) <= 40:  # NaN fails too; |log T| of e^40 keeps float32 BP exact
            raise GBPNError(f"--triangle-coupling must be a number in [-40, 40], got {triangle}")
        data = make_triangle_mrf(args.size, args.size, 2 if args.kind.startswith("ising") else 3,
                                 triangle_strength=triangle, num_samples=args.samples, sample=args.sample,
                                 burn_in=args.burn_in, thin=args.thin, seed=args.seed,
                                 log_H=None if coupling is None else coupling.log())
    else:
        data = make_synthetic(args.kind, n=args.size, coupling=coupling, num_samples=args.samples,
                              sample=args.sample, burn_in=args.burn_in, thin=args.thin, seed=args.seed,
                              progress=not args.quiet)
    out = Path(args.output)
    und = data.edge_index[:, data.edge_index[0] < data.edge_index[1]].T.numpy()

    def table(arr, fmt, header):
        buf = io.StringIO()
        np.savetxt(buf, arr, fmt=fmt, delimiter=",", header=header, comments="")
        return buf.getvalue()

    atomic_write(out / "edges.csv", lambda fh: fh.write(table(und, "%d", "source,target")))
    atomic_write(out / "features.csv", lambda fh: fh.write(table(data.x.numpy(), "%.6f", "r1,r2")))
    atomic_write(out / "labels.csv", lambda fh: fh.write(table(data.y.numpy(), "%d", "label")))
    atomic_write(out / "label_samples.csv", lambda fh: fh.write(
        table(data.y_samples.T.numpy(), "%d", ",".join(f"sample_{k}" for k in range(args.samples)))))
    lattice = {} if triangle is None else {
        "lattice": "triangular", "triangle_coupling": triangle, "triangles": int(data.triangle_index.size(1)),
        "triangle_potential": data.true_T.tolist()}
    write_json(out / "mrf.json", {"kind": args.kind, "size": args.size, "coupling": data.true_H.tolist(), **lattice,
                                   "samples": args.samples, "sample": args.sample, "burn_in": args.burn_in,
                                   "thin": args.thin, "seed": args.seed})
    what = "grid" if triangle is None else "triangular lattice"
    extra = "" if triangle is None else f", {int(data.triangle_index.size(1))} triangles"
    print(f"wrote a {args.size}x{args.size} {args.kind} {what} ({data.num_nodes} nodes{extra}) to {out}")
    return 0
