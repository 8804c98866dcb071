"""Same seed, same numbers: two source trees of gbpn compared bit for bit (issue 46, "Proof").

Runs the same commands under each tree (``PYTHONPATH=SRC python -m gbpn ...`` in subprocesses,
CPU, ``--threads 1``, one thread for OpenMP/MKL/numba, seed 0, each tree with its own
``GBPN_CACHE``) and compares what they wrote:

* ``gbpn train`` on cora, sexual and ising+ (the reference grid under ``--data-dir``) with the
  mlp and sign potentials, both variants, K = 5; ``--backward implicit`` once per data set; the
  generated ``synth-ising+``; two tree mini-batch runs (uniform, exp3); a two-trial run. Every run
  keeps ``--save-trials``, so each also writes per-trial checkpoints and prediction rows.
* ``gbpn predict`` on three of those checkpoints (one with ``--edge-chunk``/``--node-chunk``).
* A library check run in-process under each tree (``--lib-dump``): seeded ``BeliefPropagation``
  and ``GBPN`` calls in float32 and float64 (the CLI has no float64 option) on small random
  graphs, and one graph past the fused kernels' renumbering threshold; beliefs, residuals,
  messages, gradients and parameters after a few AdamW steps, saved and compared bitwise.
* Old writes, new reads (``compat-*``): the new tree's ``predict --checkpoint OLD/model.pt``,
  ``train --config OLD/config.json``, and resume (a copy of an old one-trial folder rerun by the
  new tree with ``--trials 2`` must resume after trial 1 and end equal to the old two-trial run; a
  copy of a finished folder rerun with the same command must be left as it was).

Compared, bit for bit: every number (and string) in ``metrics.json``; every tensor and number of
every ``.pt`` file (``model.pt``, ``checkpoints/``); every row of every predictions CSV; the split
masks (``splits/*.npz``); the library dumps. Keys that are timings, durations, versions, dates or
file paths are skipped by name (``IGNORED_KEY_RE`` and ``PATH_KEYS`` below; the run prints which it
met). ``config.json`` is compared too but only reported (the restructuring may nest its fields;
``--strict-config`` makes it count).

    .venv/bin/python benchmarks/same_results.py --old /tmp/base/src --new src --out /tmp/equiv
    .venv/bin/python benchmarks/same_results.py --old /tmp/base/src --new src --out /tmp/equiv --only old
    .venv/bin/python benchmarks/same_results.py --old /tmp/base/src --new src --out /tmp/equiv --only new
    .venv/bin/python benchmarks/same_results.py --old /tmp/base/src --new src --out /tmp/equiv --only compare

Each pass runs from a copy of its tree made when the pass starts (``OUT/<side>/src``, so that edits
made meanwhile do not mix versions; ``--no-snapshot`` runs in place); ``OUT/<side>/tree.json``
records its fingerprint and git HEAD, ``OUT/<side>/runs.json`` each command and its time, and
``OUT/<side>/logs`` their output. ``--cases REGEX`` reruns only the matching cases of a pass.

``--only new`` also runs the compat cases (it reads ``OUT/old``) and then compares. Exit status:
0 when everything compared is equal, 1 on any difference or failed run, 3 when a tree's ``gbpn``
does not import. ``/tmp/base/src`` is e.g. ``git archive 2cbaa7b | tar -x -C /tmp/base``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DATA = "/work/shared/datasets"
SEED = "0"

# Keys skipped by name wherever they occur (metrics.json, config.json, checkpoint metadata).
IGNORED_KEY_RE = re.compile(r"(seconds|secs|_time|^time|times|duration|elapsed|timestamp|date|versions?|"
                            r"data_dir|path|cache_dir|hostname|pid)$", re.IGNORECASE)
# Keys that hold a file name relative to the run folder: skipped where their value is a string
# (a trial row's "split" is a path; a checkpoint's "split" is a dict and is compared).
PATH_KEYS = {"split", "checkpoint", "predictions"}
IGNORED_SEEN: set = set()


# --------------------------------------------------------------------------- the cases

def common(data_dir: str, epochs: str = "30", trials: str = "1") -> list:
    return ["--data-dir", data_dir, "--steps", "5", "--epochs", epochs, "--trials", trials, "--seed", SEED,
            "--threads", "1", "--save-trials", "-q"]


def train_cases(data_dir: str) -> dict:
    """name -> gbpn train arguments (without --output)."""
    cases = {}
    for ds in ("cora", "sexual", "ising+"):
        for pot in ("mlp", "sign"):
            for var in ("gbpn", "gbpn-i"):
                cases[f"train-{ds}-{pot}-{var}"] = ["--dataset", ds, "--potential", pot, "--variant", var,
                                                    *common(data_dir)]
        cases[f"train-{ds}-mlp-gbpn-implicit"] = ["--dataset", ds, "--potential", "mlp", "--variant", "gbpn",
                                                  "--backward", "implicit", *common(data_dir)]
    cases["train-synth-ising+-mlp-gbpn"] = ["--dataset", "synth-ising+", "--potential", "mlp", "--variant", "gbpn",
                                            *common(data_dir)]
    cases["train-cora-tree-uniform"] = ["--dataset", "cora", "--potential", "mlp", "--variant", "gbpn",
                                        "--batch-size", "128", "--fanout", "3", "--hops", "2",
                                        *common(data_dir, epochs="5")]
    cases["train-sexual-tree-exp3-gbpn-i"] = ["--dataset", "sexual", "--potential", "mlp", "--variant", "gbpn-i",
                                              "--batch-size", "128", "--fanout", "3", "--sampler", "exp3",
                                              *common(data_dir, epochs="5")]
    cases["train-cora-mlp-gbpn-trials2"] = ["--dataset", "cora", "--potential", "mlp", "--variant", "gbpn",
                                            *common(data_dir, trials="2")]
    return cases


# name -> (the train case whose model.pt it reads, extra predict arguments)
PREDICT_CASES = {
    "predict-cora-mlp-gbpn": ("train-cora-mlp-gbpn", []),
    "predict-sexual-mlp-gbpn-i": ("train-sexual-mlp-gbpn-i", []),
    "predict-ising+-sign-gbpn-chunked": ("train-ising+-sign-gbpn",
                                         ["--edge-chunk", "1000", "--node-chunk", "500", "--known", "none"]),
}
# old-written checkpoints the new tree predicts from: name -> the old predict case to match
COMPAT_PREDICT = {"compat-predict-cora-mlp-gbpn": "predict-cora-mlp-gbpn",
                  "compat-predict-ising+-sign-gbpn-chunked": "predict-ising+-sign-gbpn-chunked"}
# old run folders whose config.json the new tree reruns: name -> the old train case to match
COMPAT_CONFIG = {"compat-config-cora-sign-gbpn": "train-cora-sign-gbpn",
                 "compat-config-cora-tree-uniform": "train-cora-tree-uniform",
                 "compat-config-sexual-mlp-gbpn-implicit": "train-sexual-mlp-gbpn-implicit"}
# resume: name -> (old one-trial folder copied, --trials of the rerun, the old run to match)
COMPAT_RESUME = {"compat-resume-cora-mlp-gbpn": ("train-cora-mlp-gbpn", "2", "train-cora-mlp-gbpn-trials2"),
                 "compat-resume-finished-sexual-mlp-gbpn": ("train-sexual-mlp-gbpn", "1", "train-sexual-mlp-gbpn")}


# --------------------------------------------------------------------------- running a tree

def tree_env(src: Path, side_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GBPN_")}
    env.update(PYTHONPATH=str(src), GBPN_CACHE=str(side_dir / "cache"), CUDA_VISIBLE_DEVICES="",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    return env


def run_logged(name: str, cmd: list, env: dict, side_dir: Path, fresh: bool = True) -> dict:
    if fresh and (side_dir / name).exists():  # a case rerun with --cases starts from nothing
        shutil.rmtree(side_dir / name)
    logs = side_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(logs / f"{name}.out", "w") as out, open(logs / f"{name}.err", "w") as err:
        rc = subprocess.call(cmd, env=env, cwd=side_dir, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    tail = (logs / f"{name}.err").read_text(errors="replace").strip().splitlines()[-1:]
    print(f"  {name}: rc {rc}, {seconds:.1f} s" + (f"  ({tail[0][:150]})" if rc and tail else ""), flush=True)
    return {"rc": rc, "seconds": round(seconds, 2), "cmd": cmd[1:], "stderr_tail": tail[0] if tail else ""}


def gbpn_cmd(*args: str) -> list:
    return [sys.executable, "-m", "gbpn", *args]


def fingerprint(src: Path) -> str:
    """SHA-256 of every file under ``src/gbpn`` but caches: tells whether the tree changed during a pass."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted((src / "gbpn").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".nbi", ".nbc"):
            h.update(p.relative_to(src).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def check_tree(src: Path, side_dir: Path) -> dict:
    """Where ``import gbpn`` resolves under this PYTHONPATH, and the tree's git state."""
    env = tree_env(src, side_dir)
    code = ("import os, importlib.util, gbpn, gbpn.cli; assert importlib.util.find_spec('gbpn.__main__'); "
            "print(os.path.realpath(gbpn.__file__))")
    probe = subprocess.run([sys.executable, "-c", code], env=env, cwd=side_dir, capture_output=True, text=True,
                           check=False)
    info = {"src": str(src), "fingerprint": fingerprint(src)}
    if probe.returncode != 0:
        info["import_error"] = probe.stderr.strip().splitlines()[-1:] or ["(no message)"]
        return info
    where = probe.stdout.strip()
    info["gbpn_file"] = where
    if not where.startswith(str(src.resolve()) + os.sep):
        info["import_error"] = [f"gbpn imported from {where}, not from {src}"]

    def git(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(src), *a], capture_output=True, text=True, check=False)

    head = git("rev-parse", "HEAD")
    if head.returncode == 0:
        info["head"] = head.stdout.strip()
        info["dirty_files_under_src"] = len(git("status", "--porcelain", "--", ".").stdout.splitlines())
    return info


def run_side(side: str, src: Path, out: Path, data_dir: str, only_cases: re.Pattern | None,
             snapshot: bool = True) -> bool:
    side_dir = out / side
    earlier = {}
    if only_cases is None:  # a whole pass starts clean
        if side_dir.exists():
            shutil.rmtree(side_dir)
    elif (side_dir / "runs.json").is_file():  # --cases: rerun those, keep the other cases' results
        earlier = json.loads((side_dir / "runs.json").read_text())
    side_dir.mkdir(parents=True, exist_ok=True)
    info = check_tree(src, side_dir)
    if snapshot and "import_error" not in info:
        # a tree being edited: every case of the pass runs one copy of it, the one fingerprinted
        copy = side_dir / "src"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        copied = check_tree(copy, side_dir)
        if copied.get("fingerprint") != info["fingerprint"]:
            print(f"WARNING: {src} changed while it was copied; rerun the pass", flush=True)
        info = {**copied, "copied_from": str(src), "head": info.get("head"),
                "dirty_files_under_src": info.get("dirty_files_under_src")}
        src = copy
    (side_dir / "tree.json").write_text(json.dumps(info, indent=1))
    if "import_error" in info:
        print(f"{side} tree {src}: gbpn does not import: {info['import_error'][-1]}", file=sys.stderr)
        return False
    print(f"{side}: gbpn from {info['gbpn_file']}" + (f" (copy of {info['copied_from']}" if snapshot else "")
          + (f", HEAD {info['head'][:10]} + {info['dirty_files_under_src']} changed files under src"
             if info.get("head") else "") + (")" if snapshot else "")
          + f", fingerprint {info['fingerprint'][:12]}", flush=True)
    env = tree_env(src, side_dir)
    runs = {}

    def want(name: str) -> bool:
        return only_cases is None or bool(only_cases.search(name))

    start = time.perf_counter()
    if want("lib-dump"):
        runs["lib-dump"] = run_logged("lib-dump", [sys.executable, str(Path(__file__).resolve()), "--lib-dump",
                                                   str(side_dir / "lib-dump")], env, side_dir)
    for name, args in train_cases(data_dir).items():
        if want(name):
            runs[name] = run_logged(name, gbpn_cmd("train", *args, "--output", str(side_dir / name)), env, side_dir)
    for name, (trained, extra) in PREDICT_CASES.items():
        if want(name):
            runs[name] = run_logged(name, gbpn_cmd("predict", "--checkpoint", str(side_dir / trained / "model.pt"),
                                                   *extra, "--threads", "1", "-q", "--output",
                                                   str(side_dir / name / "predictions.csv")), env, side_dir)
    if side == "new":
        runs.update(run_compat(out, side_dir, env, data_dir, want))
    total = time.perf_counter() - start
    print(f"{side}: {len(runs)} runs in {total:.0f} s", flush=True)
    info["fingerprint_at_end"] = fingerprint(Path(info.get("copied_from", src)))
    (side_dir / "tree.json").write_text(json.dumps(info, indent=1))
    if info["fingerprint_at_end"] != info["fingerprint"]:
        print(f"note: {info.get('copied_from', src)} changed during the {side} pass; the pass ran the copy made at "
              f"its start" if snapshot else f"WARNING: {src} changed during the {side} pass: its runs may mix "
              "versions; rerun it", flush=True)
    runs = {**earlier.get("runs", {}), **runs}
    (side_dir / "runs.json").write_text(json.dumps({"total_seconds": round(sum(r["seconds"] for r in runs.values()), 1),
                                                    "runs": runs}, indent=1))
    return True


def run_compat(out: Path, side_dir: Path, env: dict, data_dir: str, want) -> dict:
    """Old writes, new reads: the new tree on run folders the old tree wrote (in ``OUT/old``)."""
    old = out / "old"
    runs = {}
    for name, ref in COMPAT_PREDICT.items():
        if want(name):
            trained, extra = PREDICT_CASES[ref]
            runs[name] = run_logged(name, gbpn_cmd("predict", "--checkpoint", str(old / trained / "model.pt"), *extra,
                                                   "--threads", "1", "-q", "--output",
                                                   str(side_dir / name / "predictions.csv")), env, side_dir)
    for name, ref in COMPAT_CONFIG.items():
        if want(name):
            runs[name] = run_logged(name, gbpn_cmd("train", "--config", str(old / ref / "config.json"),
                                                   "--data-dir", data_dir, "--threads", "1", "--save-trials", "-q",
                                                   "--output", str(side_dir / name)), env, side_dir)
    cases = train_cases(data_dir)
    for name, (copied, trials, _) in COMPAT_RESUME.items():
        if want(name):
            if (side_dir / name).exists():
                shutil.rmtree(side_dir / name)
            if (old / copied).is_dir():
                shutil.copytree(old / copied, side_dir / name)
            args = list(cases[copied])
            args[args.index("--trials") + 1] = trials
            args.remove("-q")  # the "resuming ..." line is an info message
            runs[name] = run_logged(name, gbpn_cmd("train", *args, "--output", str(side_dir / name)), env, side_dir,
                                    fresh=False)
    return runs


# --------------------------------------------------------------------------- the library check (in-process)

def lib_dump(out_dir: str) -> None:
    """Run under one tree's PYTHONPATH: seeded BP and GBPN calls in float32 and float64, every result
    saved (``lib.pt``: name -> tensor; ``lib.json``: the calls that raised, and where gbpn came from)."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    import gbpn
    from gbpn import GBPN, BeliefPropagation

    tensors, errors, kernels = {}, {}, {}

    def record(name, fn):
        try:
            for key, value in fn().items():
                if value is not None:
                    tensors[f"{name}/{key}"] = value.detach().clone().cpu()
        except Exception as exc:  # noqa: BLE001  (a call one tree refuses is itself a difference)
            errors[name] = f"{type(exc).__name__}: {exc}"

    def graph(n, avg_degree, seed, shuffled):
        g = torch.Generator().manual_seed(seed)
        m = n * avg_degree // 2
        a, b = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
        keep = a != b
        lo, hi = torch.minimum(a[keep], b[keep]), torch.maximum(a[keep], b[keep])
        key = torch.unique(lo * n + hi)
        lo, hi = key // n, key % n
        ei = torch.cat([torch.stack([lo, hi]), torch.stack([hi, lo])], 1)
        if shuffled:
            ei = ei[:, torch.randperm(ei.size(1), generator=g)]
        return ei

    def symmetric_weight(ei, dtype):  # the same weight on both directions of an edge
        lo, hi = torch.minimum(ei[0], ei[1]), torch.maximum(ei[0], ei[1])
        return (0.5 + ((lo * 7919 + hi * 104729) % 1000).double() / 1000).to(dtype)

    def coupling(c, seed, dtype):
        g = torch.Generator().manual_seed(seed)
        a = torch.rand(c, c, generator=g, dtype=torch.float64)
        return torch.exp(1.5 * (a + a.T)).to(dtype)

    def bp_call(name, n, ei, c, dtype, seed, *, known=False, ew=False, mw=False, damping=0.0, backward="unroll",
                steps=5, tol=None, kernel=None, grad=True, residuals=False, messages=False, edge_chunk=None):
        def fn():
            g = torch.Generator().manual_seed(seed)
            log_self = torch.randn(n, c, generator=g, dtype=torch.float64).to(dtype).requires_grad_(grad)
            init = {"kernel": kernel} if kernel else {}
            if tol is not None:
                init["tol"] = tol
            bp = BeliefPropagation(c, steps, damping=damping, coupling_init=coupling(c, seed, dtype),
                                   backward=backward, **init).to(dtype)
            kw = {}
            if known:
                kw.update(known_labels=torch.randint(0, c, (n,), generator=g),
                          known_mask=torch.rand(n, generator=g) < 0.3)
            if mw:
                kw["message_weight"] = (0.5 + torch.rand(ei.size(1), generator=g, dtype=torch.float64)).to(dtype)
            if residuals:
                kw["return_residuals"] = True
            if messages:
                kw["return_messages"] = True
            if edge_chunk is not None:
                kw["edge_chunk"] = edge_chunk
            weight = symmetric_weight(ei, dtype) if ew else None
            with torch.enable_grad() if grad else torch.no_grad():
                out = bp(log_self, ei, weight, **kw)
            kernels[name] = {a: str(getattr(bp, a)) for a in ("last_kernel", "last_backend") if hasattr(bp, a)}
            outs = out if isinstance(out, tuple) else (out,)
            res = {"beliefs": outs[0]}
            if residuals:
                res["residuals"] = torch.stack(list(outs[1])) if isinstance(outs[1], (list, tuple)) else outs[1]
            if messages:
                res["messages"] = outs[-1]
            if grad:
                w = torch.randn(n, c, generator=g, dtype=torch.float64).to(dtype)
                loss = (outs[0].exp() * w).sum()
                g_self, g_w = torch.autograd.grad(loss, [log_self, bp.coupling.weight])
                res.update(grad_log_self=g_self, grad_coupling=g_w)
            return res
        return fn

    def bp_record(name, *args, **kwargs):
        record(name, bp_call(name, *args, **kwargs))

    for dtype in (torch.float32, torch.float64):
        dt = str(dtype).replace("torch.", "")
        for c in (2, 3, 9):
            for order in ("paired", "shuffled"):
                n, seed = 300, 100 * c + (order == "shuffled")
                ei = graph(n, 6, seed, order == "shuffled")
                p = f"bp-{dt}/c{c}/{order}"

                def call(name, p=p, n=n, ei=ei, c=c, dtype=dtype, seed=seed, **kw):
                    bp_record(f"{p}/{name}", n, ei, c, dtype, seed, **kw)

                call("unroll")
                call("unroll-known", known=True)
                call("unroll-known-ew-mw-damped", known=True, ew=True, mw=True, damping=0.3)
                call("unroll-known-eager", known=True, kernel="eager")
                call("implicit-known", known=True, backward="implicit", steps=50)
                call("implicit-ew", ew=True, backward="implicit", steps=50)
                call("infer-known", known=True, grad=False, residuals=True, messages=True)
                call("infer-chunked", known=True, grad=False, edge_chunk=97)
                call("infer-damped-tol", grad=False, damping=0.5, steps=20, tol=1e-3, residuals=True)
    # past the fused kernels' renumbering threshold (2^16 nodes at 2cbaa7b)
    big = graph(70_000, 4, 7, True)
    for dtype in (torch.float32, torch.float64):
        dt = str(dtype).replace("torch.", "")
        for c in (2, 3):
            bp_record(f"large-{dt}/c{c}/unroll-known", 70_000, big, c, dtype, 7 + c, known=True)
            bp_record(f"large-{dt}/c{c}/infer", 70_000, big, c, dtype, 7 + c, grad=False)

    def gbpn_call(dtype, potential, known, backward, c=4, n=400, features=24, seed=5):
        def fn():
            g = torch.Generator().manual_seed(seed)
            ei = graph(n, 6, seed, True)
            x = torch.randn(n, features, generator=g, dtype=torch.float64).to(dtype)
            y = torch.randint(0, c, (n,), generator=g)
            mask = torch.rand(n, generator=g) < 0.3
            kw = {"known_labels": y, "known_mask": mask} if known else {}
            torch.manual_seed(seed)
            model = GBPN(features, c, hidden_channels=32, num_hidden=2, dropout=0.3, num_steps=5,
                         potential=potential, backward=backward).to(dtype)
            res = {f"init/{k}": v for k, v in model.state_dict().items()}
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=2.5e-4)
            model.train()
            for step in range(3):
                torch.manual_seed(1000 + step)  # dropout
                out = model(x, ei, **kw)
                loss = F.nll_loss(out[~mask], y[~mask])
                opt.zero_grad()
                loss.backward()
                if step == 0:
                    res["step0/out"] = out
                    res.update({f"step0/grad/{k}": q.grad for k, q in model.named_parameters()})
                res[f"loss{step}"] = loss
                opt.step()
            res.update({f"final/{k}": v for k, v in model.state_dict().items()})
            model.eval()
            with torch.no_grad():
                res["eval/out"] = model(x, ei, **kw)
                res["eval/self_potential"] = model.self_potential(x, ei)
            return res
        return fn

    for dtype in (torch.float32, torch.float64):
        dt = str(dtype).replace("torch.", "")
        for potential in ("mlp", "sign"):
            for known in (False, True):
                record(f"gbpn-{dt}/{potential}/{'known' if known else 'inductive'}/unroll",
                       gbpn_call(dtype, potential, known, "unroll"))
            record(f"gbpn-{dt}/{potential}/known/implicit", gbpn_call(dtype, potential, True, "implicit"))
        record(f"gbpn-{dt}/mlp/binary/known/unroll", gbpn_call(dtype, "mlp", True, "unroll", c=2))

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, out / "lib.pt")
    (out / "lib.json").write_text(json.dumps({"errors": errors, "kernels": kernels, "gbpn_file": os.path.realpath(gbpn.__file__),
                                              "count": len(tensors)}, indent=1))
    print(f"{len(tensors)} tensors, {len(errors)} calls raised", file=sys.stderr)


# --------------------------------------------------------------------------- comparing

class Diff(Exception):
    pass


def ignored(key, value) -> bool:
    if IGNORED_KEY_RE.search(str(key)) or (key in PATH_KEYS and isinstance(value, str)):
        IGNORED_SEEN.add(str(key))
        return True
    return False


def leaves(obj, path="", skip=True):
    """(path, scalar or array) for every leaf of nested dicts / lists."""
    import numpy as np
    import torch

    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            if skip and ignored(k, obj[k]):
                continue
            yield from leaves(obj[k], f"{path}.{k}" if path else str(k), skip)
    elif isinstance(obj, (list, tuple)):
        yield f"{path}#len", len(obj)
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]", skip)
    elif isinstance(obj, (torch.Tensor, np.ndarray)) or obj is None or isinstance(obj, (bool, int, float, str)):
        yield path, obj
    else:
        yield path, repr(obj)


def compare_values(a, b, path: str) -> int:
    """How many numbers ``a`` and ``b`` hold; raises :class:`Diff` unless they are the same bits."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            raise Diff(f"{path}: {type(a).__name__} vs {type(b).__name__}")
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.dtype != b.dtype or a.shape != b.shape:
            raise Diff(f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        if a.is_sparse or b.is_sparse:
            a, b = a.to_dense(), b.to_dense()
        return compare_values(a.contiguous().numpy() if a.dtype != torch.bfloat16 else a.float().numpy(),
                              b.contiguous().numpy() if b.dtype != torch.bfloat16 else b.float().numpy(), path)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise Diff(f"{path}: {type(a).__name__} vs {type(b).__name__}")
        if a.dtype != b.dtype or a.shape != b.shape:
            raise Diff(f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        if a.dtype == object:
            for i, (u, v) in enumerate(zip(a.ravel(), b.ravel())):
                if u != v:
                    raise Diff(f"{path}[{i}]: {u!r} vs {v!r}")
            return a.size
        ab, bb = np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)
        if a.size and not np.array_equal(ab, bb):
            av, bv = a.ravel(), b.ravel()
            rows = np.nonzero((np.ascontiguousarray(av).view(np.uint8).reshape(av.size, -1)
                               != np.ascontiguousarray(bv).view(np.uint8).reshape(bv.size, -1)).any(1))[0]
            i = int(rows[0])
            idx = np.unravel_index(i, a.shape) if a.ndim else ()
            raise Diff(f"{path}{list(map(int, idx))}: {av[i].item()!r} vs {bv[i].item()!r} "
                       f"({rows.size} of {a.size} differ)")
        return int(a.size)
    if type(a) is not type(b):
        raise Diff(f"{path}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})")
    if isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            raise Diff(f"{path}: {a!r} vs {b!r}")
        return 1
    if a != b:
        raise Diff(f"{path}: {a!r} vs {b!r}")
    return 1 if isinstance(a, (int, bool)) else 0


def compare_trees(a, b, prefix: str, skip: bool = True) -> int:
    la, lb = dict(leaves(a, skip=skip)), dict(leaves(b, skip=skip))
    n = 0
    for key in list(la) + [k for k in lb if k not in la]:
        if key not in lb:
            raise Diff(f"{prefix}{key}: only in old")
        if key not in la:
            raise Diff(f"{prefix}{key}: only in new")
        n += compare_values(la[key], lb[key], prefix + key)
    return n


def load_pt(path: Path):
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001  (a pickled object the safe loader refuses)
        return torch.load(path, map_location="cpu", weights_only=False)


def compare_csv(a: Path, b: Path, prefix: str) -> int:
    ra, rb = a.read_text().splitlines(), b.read_text().splitlines()
    header = ra[0].split(",") if ra else []
    n = 0
    for i in range(max(len(ra), len(rb))):
        if i >= len(ra) or i >= len(rb):
            raise Diff(f"{prefix}: {len(ra) - 1} rows vs {len(rb) - 1}")
        if ra[i] != rb[i]:
            fa, fb = ra[i].split(","), rb[i].split(",")
            j = next((j for j, (u, v) in enumerate(zip(fa, fb)) if u != v), min(len(fa), len(fb)))
            col = header[j] if j < len(header) else f"column {j}"
            raise Diff(f"{prefix} row {i} ({col}): {ra[i][:80]!r} vs {rb[i][:80]!r}")
        if i:
            n += sum(1 for f in ra[i].split(",") if re.fullmatch(r"[-+0-9.eE]+|nan|inf|-inf", f))
    return n


def compare_file(a: Path, b: Path, rel: str) -> int:
    import numpy as np

    if rel.endswith(".json"):
        return compare_trees(json.loads(a.read_text()), json.loads(b.read_text()), f"{rel}:")
    if rel.endswith(".pt"):
        return compare_trees(load_pt(a), load_pt(b), f"{rel}:")
    if rel.endswith(".csv"):
        return compare_csv(a, b, rel)
    if rel.endswith(".npz"):
        with np.load(a) as za, np.load(b) as zb:
            return compare_trees(dict(za), dict(zb), f"{rel}:")
    if a.read_bytes() != b.read_bytes():
        raise Diff(f"{rel}: the bytes differ")
    return 0


def result_files(folder: Path) -> set:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and p.name != "config.json" and not p.name.startswith(".")}


def compare_folders(old: Path, new: Path) -> int:
    fa, fb = result_files(old), result_files(new)
    if fa != fb:
        raise Diff(f"files only in old: {sorted(fa - fb)[:3]}, only in new: {sorted(fb - fa)[:3]}")
    if not fa:
        raise Diff("no result files")
    return sum(compare_file(old / rel, new / rel, rel) for rel in sorted(fa))


def compare_lib(old: Path, new: Path) -> list:
    """One row per group of library calls (``bp-float32``, ``gbpn-float64``, ...)."""
    ta, tb = load_pt(old / "lib.pt"), load_pt(new / "lib.pt")
    ea, eb = json.loads((old / "lib.json").read_text())["errors"], json.loads((new / "lib.json").read_text())["errors"]
    groups: dict = {}
    for name in sorted(set(ta) | set(tb) | set(ea) | set(eb)):
        groups.setdefault("lib " + name.split("/")[0], []).append(name)
    rows = []
    for group, names in groups.items():
        n, diff = 0, None
        try:
            for name in names:
                if name in ea or name in eb:
                    if ea.get(name) != eb.get(name):
                        raise Diff(f"{name}: raised {ea.get(name)!r} vs {eb.get(name)!r}")
                    continue
                if name not in ta or name not in tb:
                    raise Diff(f"{name}: only in {'old' if name in ta else 'new'}")
                n += compare_values(ta[name], tb[name], name)
        except Diff as d:
            diff = str(d)
        rows.append((group, n, diff))
    ka = json.loads((old / "lib.json").read_text()).get("kernels", {})
    kb = json.loads((new / "lib.json").read_text()).get("kernels", {})
    moved = [k for k in ka if any(kb.get(k, {}).get(attr, v) != v for attr, v in ka[k].items())]
    if moved:
        print(f"note: {len(moved)} BP calls report another kernel, e.g. {moved[0]}: {ka[moved[0]]} -> "
              f"{kb.get(moved[0])}")
    for side, kernels in (("old", ka), ("new", kb)):
        used: dict = {}
        for attrs in kernels.values():
            name = attrs.get("last_backend", attrs.get("last_kernel"))
            used[name] = used.get(name, 0) + 1
        print(f"library calls by kernel ({side}): {', '.join(f'{k} {v}' for k, v in sorted(used.items()))}")
    errs = sorted(set(ea) & set(eb))
    if errs:
        print(f"note: {len(errs)} library calls raised alike in both trees, e.g. {errs[0]}: {ea[errs[0]][:120]}")
    return rows


def compare(out: Path, data_dir: str, strict_config: bool, only_cases: re.Pattern | None) -> int:
    old, new = out / "old", out / "new"
    runs_old = json.loads((old / "runs.json").read_text())["runs"] if (old / "runs.json").is_file() else {}
    runs_new = json.loads((new / "runs.json").read_text())["runs"] if (new / "runs.json").is_file() else {}

    def want(name: str) -> bool:
        return only_cases is None or bool(only_cases.search(name))

    rows, info_rows = [], []

    def failed(*pairs) -> str | None:
        bad = [f"{side} rc {r.get('rc')}: {r.get('stderr_tail', '')[:120]}" for side, r in pairs
               if r is None or r.get("rc") != 0]
        return "; ".join(bad) if bad else None

    def row(name, old_run, new_run, old_dir, new_dir, extra=None):
        why = failed(("old", old_run), ("new", new_run))
        if why:
            rows.append((name, 0, "run failed: " + why))
            return
        try:
            n = compare_folders(old_dir, new_dir)
            if extra:
                n += extra()
            rows.append((name, n, None))
        except Diff as d:
            rows.append((name, 0, str(d)))
        ca, cb = old_dir / "config.json", new_dir / "config.json"
        if ca.is_file() and cb.is_file():
            try:
                info_rows.append((f"{name} config.json", compare_trees(json.loads(ca.read_text()),
                                                                       json.loads(cb.read_text()), "config.json:"),
                                  None))
            except Diff as d:
                info_rows.append((f"{name} config.json", 0, str(d)))

    if want("lib-dump"):
        why = failed(("old", runs_old.get("lib-dump")), ("new", runs_new.get("lib-dump")))
        rows.extend([("lib-dump", 0, "run failed: " + why)] if why else compare_lib(old / "lib-dump", new / "lib-dump"))
    for name in [*train_cases(data_dir), *PREDICT_CASES]:
        if want(name):
            row(name, runs_old.get(name), runs_new.get(name), old / name, new / name)
    for name, ref in {**COMPAT_PREDICT, **COMPAT_CONFIG}.items():
        if want(name):
            row(name + " (old wrote)", runs_old.get(ref), runs_new.get(name), old / ref, new / name)
    for name, (copied, trials, ref) in COMPAT_RESUME.items():
        if not want(name):
            continue

        def resumed(name=name, copied=copied) -> int:
            """The copied trial was not trained again: its row, timing included, is the old one's."""
            before = json.loads((old / copied / "metrics.json").read_text())["trials"]
            after = json.loads((new / name / "metrics.json").read_text())["trials"]
            n = compare_trees(before, after[:len(before)], "metrics.json (kept rows, timings too):", skip=False)
            if name.startswith("compat-resume-finished"):
                if (old / copied / "model.pt").read_bytes() != (new / name / "model.pt").read_bytes():
                    raise Diff("model.pt was rewritten")
            elif "resuming" not in (new / "logs" / f"{name}.err").read_text():
                raise Diff("no 'resuming' line in the log")
            return n

        row(name + " (old wrote)", runs_old.get(ref), runs_new.get(name), old / ref, new / name, resumed)

    def table(title, body):
        print(f"\n{title}\n\n| case | numbers compared | equal | first difference |\n|---|---:|---|---|")
        for name, n, diff in body:
            print(f"| {name} | {n if diff is None else '-'} | {'yes' if diff is None else 'NO'} | "
                  f"{'' if diff is None else diff.replace('|', '/')} |")

    table("Compared bit for bit (old vs new):", rows)
    table("config.json (reported" + (", counted" if strict_config else " only: its layout may change") + "):",
          info_rows)
    print(f"\nkeys skipped by name: {', '.join(sorted(IGNORED_SEEN)) or 'none'}")
    for side, runs_file in (("old", old / "runs.json"), ("new", new / "runs.json")):
        if runs_file.is_file():
            print(f"{side} pass: {json.loads(runs_file.read_text())['total_seconds']} s")
    bad = [r for r in rows + (info_rows if strict_config else []) if r[2] is not None]
    summary = {"rows": rows, "config_rows": info_rows, "ignored_keys": sorted(IGNORED_SEEN), "differences": len(bad)}
    (out / "comparison.json").write_text(json.dumps(summary, indent=1))
    print(f"\n{len(rows) - len([r for r in rows if r[2]])} of {len(rows)} cases equal" +
          ("" if not bad else f"; {len(bad)} differ"))
    return 1 if bad else 0


# --------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, help="the old tree's src folder (e.g. /tmp/base/src)")
    ap.add_argument("--new", type=Path, help="the new tree's src folder (e.g. src)")
    ap.add_argument("--out", type=Path, help="results: OUT/old, OUT/new, OUT/comparison.json")
    ap.add_argument("--only", choices=("old", "new", "compare"), help="one pass (default: old, new, compare)")
    ap.add_argument("--data-dir", default=os.environ.get("GBPN_SAME_DATA", DEFAULT_DATA))
    ap.add_argument("--cases", type=re.compile, help="only the cases whose name matches this regex (debugging)")
    ap.add_argument("--strict-config", action="store_true", help="config.json differences count as differences")
    ap.add_argument("--no-snapshot", dest="snapshot", action="store_false",
                    help="run each tree in place (default: from a copy in OUT/<side>/src made when its pass starts, "
                         "so that edits during the pass do not mix versions)")
    ap.add_argument("--lib-dump", metavar="DIR", help=argparse.SUPPRESS)  # internal: run under a tree's PYTHONPATH
    args = ap.parse_args()
    if args.lib_dump:
        lib_dump(args.lib_dump)
        return 0
    if args.out is None:
        ap.error("--out is required")
    out = args.out.resolve()
    if args.only in (None, "old"):
        if args.old is None:
            ap.error("--old is required")
        if not run_side("old", args.old.resolve(), out, args.data_dir, args.cases, args.snapshot):
            return 3
    if args.only in (None, "new"):
        if args.new is None:
            ap.error("--new is required")
        if not (out / "old" / "runs.json").is_file():
            print(f"no old pass in {out / 'old'}: run --only old first", file=sys.stderr)
            return 2
        if not run_side("new", args.new.resolve(), out, args.data_dir, args.cases, args.snapshot):
            return 3
    return compare(out, args.data_dir, args.strict_config, args.cases) if args.only != "old" else 0


if __name__ == "__main__":
    sys.exit(main())
