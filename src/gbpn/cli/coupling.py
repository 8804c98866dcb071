"""``gbpn coupling``: print a checkpoint's learned coupling H and write it as CSV; a heatmap (PNG, SVG) where
matplotlib is installed."""
from __future__ import annotations

import argparse
from pathlib import Path

from gbpn.cli.options import add_threads, add_wait
from gbpn.cli.output import locked


def add_parser(sub, common) -> None:
    c = sub.add_parser("coupling", parents=common, help="print the learned coupling H; heatmap (PNG, SVG) and CSV")
    c.add_argument("--checkpoint", required=True, help="model.pt written by gbpn train")
    c.add_argument("--output", default=None, help="folder for coupling.png/.svg/.csv (default: the checkpoint's)")
    add_wait(c)
    add_threads(c)


def run(args: argparse.Namespace) -> int:
    from gbpn.train.checkpoint import load_checkpoint

    model, meta = load_checkpoint(args.checkpoint)
    out = Path(args.output or Path(args.checkpoint).parent) / "coupling.png"
    with locked(out.parent, args.wait):
        return _report(model, meta, out)


def _report(model, meta: dict, out: Path) -> int:
    """Print the coupling, write its heatmaps and CSV (and the triangle factor's, for a motif model)."""
    import numpy as np

    from gbpn.experiments.coupling import compare_couplings, plot_couplings, save_coupling_csv

    H = model.bp.coupling.normalized().numpy()
    names = meta.get("class_names") or [str(k) for k in range(model.num_classes)]
    panels = {f"learned ({meta.get('variant', '')})": H}
    true_H = meta.get("true_coupling")
    if true_H is not None:
        true_H = np.asarray(true_H)
        panels = {"true": true_H, **panels}
    # the files first: an unwritable --output fails before anything is printed
    save_coupling_csv(out.with_suffix(".csv"), H, names)
    no_figure = _cannot_draw()
    if no_figure is None:
        plot_couplings(panels, out, names, suptitle=f"coupling H: {meta.get('dataset', '')}")
        plot_couplings(panels, out.with_suffix(".svg"), names, suptitle=f"coupling H: {meta.get('dataset', '')}")
    width = max(8, max(len(n) for n in names) + 1)
    print(f"coupling H of {meta.get('dataset', '?')} ({meta.get('variant', '?')}), scaled so mean(log H) = 0:")
    print(" " * width + "".join(f"{n:>{width}}" for n in names))
    for n, row in zip(names, H):
        print(f"{n:>{width}}" + "".join(f"{v:>{width}.3f}" for v in row))
    if true_H is not None:
        cmp = compare_couplings(H, true_H)
        print(f"against the true coupling (scale removed): relative error {cmp['relative_error']:.3f}, "
              f"correlation {cmp['correlation']:.3f}")
    print(f"heatmap saved to {out} (and .svg), values to {out.with_suffix('.csv')}" if no_figure is None else
          f"values saved to {out.with_suffix('.csv')}; no heatmap: {no_figure}")
    triangle = getattr(model.bp, "triangle", None)
    if triangle is not None:  # a --motifs triangle model
        _show_triangle(triangle, H, names, meta, out.with_name("triangle.png"), no_figure is None)
    return 0


def _cannot_draw():
    """Why no figure can be drawn (matplotlib is missing, with the command that installs it), or None."""
    from gbpn.errors import GBPNError
    from gbpn.io import pyplot

    try:
        pyplot()
    except GBPNError as err:
        return str(err)
    return None


def _show_triangle(triangle, H, names, meta, out: Path, draw: bool = True) -> None:
    """The learned triangle factor: what :func:`~gbpn.experiments.coupling.triangle_report` says, its
    slices as heatmaps (the CP factors for more than 12 classes; with ``draw``) and its entries as CSV."""
    import numpy as np

    from gbpn.experiments.coupling import plot_cp_factors, plot_triangle, save_triangle_csv, triangle_report

    T, c = triangle.T.double().numpy(), triangle.num_classes
    true_T = None if meta.get("true_triangle") is None else np.asarray(meta["true_triangle"])
    title = f"triangle factor T ({triangle.form} form): {meta.get('dataset', '')}"
    save_triangle_csv(out.with_suffix(".csv"), T, names)
    for path in (out, out.with_suffix(".svg")) if draw else ():
        if c <= 12:
            plot_triangle(T, path, names, true_T, suptitle=title)
        else:
            plot_cp_factors(triangle.log_factors.detach().double().numpy(), path, names, suptitle=title)
    print("\n".join(triangle_report(T, H, names, true_T)))
    print(f"triangle factor {'slices' if c <= 12 else 'CP factors'} saved to {out} (and .svg), values to "
          f"{out.with_suffix('.csv')}" if draw else f"triangle factor values saved to {out.with_suffix('.csv')}")
