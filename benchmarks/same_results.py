"""Same seed, same numbers: two source trees of gbpn compared bit for bit (issue 63, "Proof").

Each side runs ``PYTHONPATH=SRC python -m gbpn ...`` in subprocesses (CPU, one thread, seed 0, its
own ``GBPN_CACHE``) from a copy of its tree made when the pass starts (``OUT/<side>/src``; edits
made meanwhile do not mix in). The cases (few epochs, K = 5, ``--save-trials``):

* ``gbpn train`` on cora, sexual and ising+ (reference data under ``--data-dir``), mlp and sign
  potentials, variants gbpn and gbpn-i; ``--backward implicit`` once per data set;
* two tree mini-batch runs (uniform on cora, exp3 with gbpn-i on sexual);
* ``gbpn predict`` on two of those checkpoints (one with ``--edge-chunk``/``--node-chunk``), and
  ``compat-predict-*``: the new tree predicts from the old tree's checkpoint (compared with the old
  tree's own prediction from it).

Compared bit for bit, case by case: every number and string of ``metrics.json``, every column of
every CSV (predictions, history), every tensor of every ``.pt`` file (``model.pt``, ``checkpoints/``)
and every array of ``splits/*.npz``. Keys and CSV columns named like timings or versions (``SKIP``),
and keys holding a path (``PATH``), are skipped (the report lists those met). Where the layout may
change, nothing is counted: ``config.json`` is not compared, and differences in the other values of a
``.pt`` file (``model_args``, ...) are reported as notes.

    python benchmarks/same_results.py --old /tmp/base/src --new src --out runs/proof             # both, compare
    python benchmarks/same_results.py --old /tmp/base/src --new src --out runs/proof --only old  # record old

``runs/proof/old`` holds the old side of issue 63: 9d8c38b (``git archive 9d8c38b src | tar -x -C
/tmp/base``; fingerprint 50dbed168bb5 in ``tree.json``), recorded when ``runs/proof/READY`` exists.
Engineers reuse it and run only their new side (``--old`` is then not read)::

    cp -r runs/proof/old runs/proof-X/old && \\
    python benchmarks/same_results.py --old /tmp/exp/src --new src --out runs/proof-X --only new

``--only new`` runs the new side and compares; ``--only compare`` compares what is there;
``--cases REGEX`` (re)runs and compares only the matching cases. Exit status: 0 when every case
ran and is equal, 1 on any difference or failed run, 2 when ``OUT/old`` is missing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SKIP = re.compile(r"(seconds|secs|_time|^time|times|duration|elapsed|timestamp|date|versions?|hostname|pid)$", re.I)
PATH = re.compile(r"(path|_dir|^split|^checkpoint|^predictions)$", re.I)  # skipped where they hold a string
SKIPPED: set = set()
NOTES: list = []  # differences outside the tensors of .pt files: reported, not counted
COMPAT = {"compat-predict-cora-mlp-gbpn": "predict-cora-mlp-gbpn"}  # compared with the old side's ref


def cases(data_dir: str) -> dict:
    """name -> ``gbpn`` arguments; ``{OUT}`` is the side's folder, ``{OLD}`` the old side's."""
    common = ["--data-dir", data_dir, "--steps", "5", "--trials", "1", "--seed", "0", "--threads", "1",
              "--save-trials", "-q"]

    def train(ds, pot="mlp", var="gbpn", *extra, epochs="4"):
        return ["train", "--dataset", ds, "--potential", pot, "--variant", var, "--epochs", epochs, *extra, *common]

    out = {}
    for ds in ("cora", "sexual", "ising+"):
        for pot in ("mlp", "sign"):
            for var in ("gbpn", "gbpn-i"):
                out[f"train-{ds}-{pot}-{var}"] = train(ds, pot, var)
        out[f"train-{ds}-mlp-gbpn-implicit"] = train(ds, "mlp", "gbpn", "--backward", "implicit")
    tree = ["--batch-size", "128", "--fanout", "3"]
    out["train-cora-tree-uniform"] = train("cora", "mlp", "gbpn", *tree, "--hops", "2", epochs="2")
    out["train-sexual-tree-exp3-gbpn-i"] = train("sexual", "mlp", "gbpn-i", *tree, "--sampler", "exp3", epochs="2")
    predict = ["--data-dir", data_dir, "--threads", "1", "-q"]
    chunked = ["--edge-chunk", "1000", "--node-chunk", "500", "--known", "none"]
    out["predict-cora-mlp-gbpn"] = ["predict", "--checkpoint", "{OUT}/train-cora-mlp-gbpn/model.pt", *predict]
    out["predict-ising+-sign-gbpn-chunked"] = ["predict", "--checkpoint", "{OUT}/train-ising+-sign-gbpn/model.pt",
                                               *chunked, *predict]
    for name, ref in COMPAT.items():  # the new tree reads the old tree's checkpoint
        out[name] = [a.replace("{OUT}", "{OLD}") for a in out[ref]]
    return out


def fingerprint(src: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((src / "gbpn").rglob("*.py")):
        h.update(p.relative_to(src).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


def run_side(side: str, src: Path, out: Path, data_dir: str, pattern: re.Pattern | None) -> None:
    side_dir = out / side
    if pattern is None and side_dir.exists():
        shutil.rmtree(side_dir)
    (side_dir / "logs").mkdir(parents=True, exist_ok=True)
    copy = side_dir / "src"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    tree = {"copied_from": str(src), "head": head, "fingerprint": fingerprint(copy)}
    (side_dir / "tree.json").write_text(json.dumps(tree, indent=1))
    print(f"{side}: {src} (HEAD {head[:10]}, fingerprint {tree['fingerprint']})", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GBPN_")}
    env.update(PYTHONPATH=str(copy), GBPN_CACHE=str(side_dir / "cache"), CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    runs_file = side_dir / "runs.json"
    runs = json.loads(runs_file.read_text()) if runs_file.is_file() else {}
    for name, args in cases(data_dir).items():
        if (pattern and not pattern.search(name)) or (name in COMPAT and side == "old"):
            continue
        shutil.rmtree(side_dir / name, ignore_errors=True)
        args = [a.replace("{OUT}", str(side_dir)).replace("{OLD}", str(out / "old")) for a in args]
        target = side_dir / name / ("predictions.csv" if args[0] == "predict" else "")
        start = time.perf_counter()
        with open(side_dir / "logs" / f"{name}.log", "w") as log:
            rc = subprocess.call([sys.executable, "-m", "gbpn", *args, "--output", str(target)], env=env,
                                 cwd=side_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        runs[name] = {"rc": rc, "seconds": round(time.perf_counter() - start, 1)}
        print(f"  {name}: rc {rc}, {runs[name]['seconds']} s", flush=True)
        runs_file.write_text(json.dumps(runs, indent=1))
    print(f"{side}: {sum(r['seconds'] for r in runs.values()):.0f} s in all", flush=True)


class Diff(Exception):
    pass


def leaves(obj, path=""):
    """(path, value) for every leaf of nested dicts and lists, keys matching ``SKIP`` left out."""
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            if SKIP.search(str(k)) or (PATH.search(str(k)) and isinstance(obj[k], str)):
                SKIPPED.add(str(k))
            else:
                yield from leaves(obj[k], f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        yield f"{path}#len", len(obj)
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, obj


def same(a, b, where: str) -> int:
    """How many numbers ``a`` and ``b`` hold; raises :class:`Diff` unless they are the same bits."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
        a, b = (a.float(), b.float()) if a.dtype == torch.bfloat16 else (a, b)
        a, b = a.numpy(), b.numpy()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            raise Diff(f"{where}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        if a.dtype.hasobject:
            a, b = a.astype(str), b.astype(str)
        if a.tobytes() != b.tobytes():
            bad = np.nonzero(a.ravel() != b.ravel())[0]
            i = int(bad[0]) if bad.size else 0
            raise Diff(f"{where}[{i}]: {a.ravel()[i]!r} vs {b.ravel()[i]!r} ({bad.size} of {a.size} differ)")
        return int(a.size)
    if type(a) is not type(b) or repr(a) != repr(b):  # repr: -0.0 and 0.0 differ, nan equals nan
        raise Diff(f"{where}: {a!r} vs {b!r}")
    return int(isinstance(a, (int, float)))


def compare_tree(a, b, where: str, tensors_only: bool = False) -> int:
    """Every leaf (``tensors_only``: every tensor; the other leaves' differences go to ``NOTES``) bit for bit."""
    la, lb = dict(leaves(a)), dict(leaves(b))
    if tensors_only:
        import torch

        other = sorted(k for k in la.keys() | lb.keys() if not isinstance(la.get(k, lb.get(k)), torch.Tensor)
                       and (k not in la or k not in lb or repr(la[k]) != repr(lb[k])))
        NOTES.extend(f"{where}{k}: {la.get(k, '(none)')!r} vs {lb.get(k, '(none)')!r}" for k in other)
        la, lb = ({k: v for k, v in d.items() if isinstance(v, torch.Tensor)} for d in (la, lb))
    if la.keys() != lb.keys():
        raise Diff(f"{where}: keys only in old {sorted(la.keys() - lb.keys())[:3]}, "
                   f"only in new {sorted(lb.keys() - la.keys())[:3]}")
    return sum(same(la[k], lb[k], where + k) for k in la)


def load(path: Path):
    import numpy as np
    import pandas as pd
    import torch

    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".csv":  # column name -> the column's text, cell by cell
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        return {c: frame[c].to_numpy() for c in frame.columns}
    if path.suffix == ".npz":
        with np.load(path) as z:
            return dict(z)
    return torch.load(path, map_location="cpu", weights_only=False)


def compare_case(old: Path, new: Path) -> int:
    def files(folder):
        return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
                if p.is_file() and p.suffix in (".json", ".csv", ".pt", ".npz") and p.name != "config.json"}

    fa, fb = files(old), files(new)
    if fa != fb or not fa:
        raise Diff(f"files only in old {sorted(fa - fb)[:3]}, only in new {sorted(fb - fa)[:3]}")
    return sum(compare_tree(load(old / f), load(new / f), f"{f}:", f.endswith(".pt")) for f in sorted(fa))


def compare(out: Path, data_dir: str, pattern: re.Pattern | None) -> int:
    runs = {side: json.loads(f.read_text()) if (f := out / side / "runs.json").is_file() else {}
            for side in ("old", "new")}
    print("\n| case | numbers | equal | first difference |\n|---|---:|---|---|")
    bad = 0
    for name in cases(data_dir):
        if pattern and not pattern.search(name):
            continue
        ref = COMPAT.get(name, name)
        rcs = (runs["old"].get(ref, {}).get("rc"), runs["new"].get(name, {}).get("rc"))
        try:
            if rcs != (0, 0):
                raise Diff(f"run failed (rc old, new: {rcs}; see OUT/<side>/logs/{name}.log)")
            n, diff = compare_case(out / "old" / ref, out / "new" / name), ""
        except Diff as d:
            n, diff, bad = "-", str(d).replace("|", "/"), bad + 1
        print(f"| {name} | {n} | {'NO' if diff else 'yes'} | {diff} |", flush=True)
    for note in NOTES[:10]:
        print(f"note (not counted): {note}")
    print(f"\nskipped keys/columns: {', '.join(sorted(SKIPPED)) or 'none'}\n"
          + ("every case equal" if not bad else f"{bad} cases differ or failed"))
    return int(bad > 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, help="the old tree's src folder (e.g. /tmp/base/src)")
    ap.add_argument("--new", type=Path, help="the new tree's src folder (e.g. src)")
    ap.add_argument("--out", type=Path, required=True, help="results: OUT/old, OUT/new")
    ap.add_argument("--only", choices=("old", "new", "compare"), help="one pass (default: old, new, compare)")
    ap.add_argument("--cases", type=re.compile, help="only the cases whose name matches this regex")
    ap.add_argument("--data-dir", default=os.environ.get("GBPN_SAME_DATA", "/work/shared/datasets"))
    args = ap.parse_args()
    out = args.out.resolve()
    for side, src in (("old", args.old), ("new", args.new)):
        if args.only in (None, side) and src is None:
            ap.error(f"--{side} is required")
    if args.only in (None, "old"):
        run_side("old", args.old.resolve(), out, args.data_dir, args.cases)
        if args.only == "old":
            return 0
    if not (out / "old" / "runs.json").is_file():
        print(f"no old pass in {out / 'old'}: run --only old first", file=sys.stderr)
        return 2
    if args.only in (None, "new"):
        run_side("new", args.new.resolve(), out, args.data_dir, args.cases)
    return compare(out, args.data_dir, args.cases)


if __name__ == "__main__":
    sys.exit(main())
