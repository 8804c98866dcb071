"""What the budgeted search sees at its first rung: each admitted configuration's validation score and lowest
validation loss after the first rung's epochs, ranked both ways, with the loss of predicting the training class
frequencies beside them. Runs ``gbpn train --potential auto --budget B`` up to the end of its first rung (its
admissions and that rung exactly as the search runs them) and stops there.

    python benchmarks/first_rung.py --output runs/first-rung/squirrel-0.json -- --dataset squirrel \\
        --budget 4 --patience 100 --data-dir ../shared/datasets --threads 1

Everything after ``--`` is passed to ``gbpn train`` (``--potential auto`` and one trial are added; ``--seed S`` picks
the trial's seed and split as trial ``S`` of a benchmark with ``--trials`` > S does on a random split; a public split
is always the first here).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

import gbpn.train.auto as auto
from gbpn.cli import main as gbpn_main
from gbpn.train import search
from gbpn.train.loop import validation_loss


class _FirstRungDone(BaseException):  # not an Exception: the CLI reports those as internal errors
    pass


def _prior_loss(session) -> float:
    """Validation cross-entropy of predicting the training labels' class frequencies (add-one smoothed)."""
    y, (train, val, _) = session.selection.y, session.selection.masks
    freq = torch.bincount(y[train], minlength=int(y.max()) + 1).float() + 1
    return validation_loss((freq / freq.sum()).log().expand(y.numel(), -1), y, val)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, required=True, help="a JSON file for the rung's records")
    ap.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then gbpn train's arguments")
    args = ap.parse_args()
    out = {}

    def first_rung_only(configs, start, schedule, units=None, desc="", progress=False, measure=None, anchors=0):
        s = search._Search(configs, start, schedule, None, desc)
        s.admit(measure, anchors)
        s.rungs = s.schedule.rungs(len(s.admitted))
        epoch = s.rungs[0][1] if s.rungs else 1
        rows = []
        for i in s.admitted:
            session = s.session(i, epoch).advance(epoch)
            out.setdefault("prior_loss", _prior_loss(session))
            rows.append({"id": i, "params": configs[i], "cost": s.records[i]["cost"], "val": session.val,
                         "val_loss": session.val_loss})
            del s.sessions[i]
        by_loss = sorted(rows, key=lambda r: r["val_loss"])
        by_score = sorted(rows, key=lambda r: -r["val"])
        for r in rows:
            r["rank_loss"], r["rank_score"] = by_loss.index(r) + 1, by_score.index(r) + 1
        out.update(epoch=epoch, rungs=s.rungs, hedge=s.schedule.hedge, configurations=rows)
        raise _FirstRungDone

    auto.successive_halving = first_rung_only  # the search's admissions and first rung, nothing after
    extra = [a for a in args.train_args if a != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            gbpn_main(["train", "--potential", "auto", "--trials", "1", "--output", tmp, *extra])
        except _FirstRungDone:
            pass
    if not out:
        raise SystemExit("gbpn train stopped before the search's first rung (its log says why)")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1, default=str))
    print(f"first rung: epoch {out['epoch']}, rungs {out['rungs']}, loss of the class frequencies "
          f"{out['prior_loss']:.3f}")
    print(f"{'id':>3} {'encoder':15} {'val score':>9} {'val loss':>8} {'by loss':>7} {'by score':>8}")
    for r in out["configurations"]:
        name = r["params"].get("potential", "?") + (" (H lr 0.1)" if r["params"].get("coupling_lr") == 0.1 else "")
        print(f"{r['id']:>3} {name:15} {100 * r['val']:9.2f} {r['val_loss']:8.3f} {r['rank_loss']:7d} "
              f"{r['rank_score']:8d}")


if __name__ == "__main__":
    main()
