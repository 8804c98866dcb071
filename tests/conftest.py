"""Shared helpers and the suite's set-up.

The suite runs in parallel with pytest-xdist unless told otherwise (``-n 0``, ``-p no:xdist``):
:func:`pytest_cmdline_main` asks for ``-n auto --dist worksteal``: each worker starts with half of
the tests, the long ones (``slow``) first, and takes over the other's queue once its own is done;
torch gets the worker's share of the CPUs. A module-scoped fixture (a trained run folder) is then
built once per worker that runs tests of its module, so no test may rely on another having run
(none changes such a fixture in a way another test reads). Without a GPU, ``TRITON_INTERPRET=1``
(set before triton is imported) lets the Triton kernels' tests run them on the CPU. torch and gbpn
are imported on first use, not here: the xdist controller never needs them.
"""
import contextlib
import itertools
import os
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``-n auto --dist worksteal`` unless ``-n`` was given (or xdist is off, or this is a worker)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None:
        config.option.numprocesses = "auto"
    if config.option.dist == "no" and config.option.numprocesses != 0:
        config.option.dist = "worksteal"


def pytest_configure(config):
    if not (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)):
        return  # the xdist controller: it runs no test
    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        # without a GPU, the Triton kernels run in Triton's interpreter (tests/bp/test_fused_triton.py); the
        # variable is read when triton and the kernels are defined, so it is set before anything imports them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if hasattr(config, "workerinput") and workers > 1:  # one BLAS / OpenMP pool per worker, not one per CPU each
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cpus // workers))


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # long tests first: none is left to run alone at the end
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _fused_skip_reason():
    import torch

    from gbpn.bp.backends.cpu_fused import fused_unavailable

    return fused_unavailable(torch.float64)


def __getattr__(name):
    """``FUSED_SKIP`` (why the fused CPU kernels cannot run here, or None) and ``KERNELS`` (both BP kernels
    as test parameters; the fused one skips, with the reason, where it cannot run), computed on first use."""
    if name == "FUSED_SKIP":
        globals()[name] = _fused_skip_reason()
    elif name == "KERNELS":
        skip = __getattr__("FUSED_SKIP")
        globals()[name] = ["eager", pytest.param("fused", marks=pytest.mark.skipif(skip is not None, reason=str(skip)))]
    else:
        raise AttributeError(name)
    return globals()[name]


@pytest.fixture(scope="session")
def data_dir():
    """Folder with the raw dataset files: $GBPN_DATA, else ../shared/datasets beside the checkout."""
    d = Path(os.environ.get("GBPN_DATA") or SHARED)
    if not d.is_dir():
        pytest.skip(f"raw dataset files not available (set GBPN_DATA); looked in {d}")
    return str(d.resolve())  # absolute: tests may change the working directory


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GBPN_CACHE", str(tmp_path_factory.getbasetemp() / "gbpn-cache"))


def brute_force_marginals(num_nodes, edges, log_phi, log_H, evidence=None):
    """Exact marginals of p(y) ∝ Π φ_i(y_i) Π_{(i,j)} H[y_i, y_j] by enumerating every configuration.

    ``edges`` lists each undirected edge once; ``evidence`` maps node -> fixed label.
    """
    import torch

    c = log_phi.shape[1]
    marg = torch.zeros(num_nodes, c, dtype=torch.float64)
    for ys in itertools.product(range(c), repeat=num_nodes):
        if evidence and any(ys[i] != v for i, v in evidence.items()):
            continue
        lp = sum(float(log_phi[i, ys[i]]) for i in range(num_nodes))
        lp += sum(float(log_H[ys[i], ys[j]]) for i, j in edges)
        w = torch.tensor(lp, dtype=torch.float64).exp()
        for i in range(num_nodes):
            marg[i, ys[i]] += w
    return marg / marg.sum(1, keepdim=True)


def undirected(edges):
    import torch

    e = torch.tensor(edges, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], dim=1)


def random_graph(n, p, seed):
    """An Erdos-Renyi graph with its directed edges in random order (neither CSR nor paired)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if float(torch.rand(1, generator=g)) < p]
    ei = undirected(pairs)
    return ei[:, torch.randperm(ei.size(1), generator=g)]


@contextlib.contextmanager
def num_threads(k):
    """torch (and with it the fused kernels' node blocks) on ``k`` threads inside the block, however
    small the graph: the kernels' least work per thread is lifted meanwhile."""
    import torch

    import gbpn.bp.backends.cpu_binary as binary
    import gbpn.bp.backends._numba.runtime as runtime

    threads, work, pairs = torch.get_num_threads(), runtime.MIN_WORK_PER_THREAD, binary.MIN_PAIRS_PER_THREAD
    torch.set_num_threads(k)
    runtime.MIN_WORK_PER_THREAD = binary.MIN_PAIRS_PER_THREAD = 1
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        runtime.MIN_WORK_PER_THREAD, binary.MIN_PAIRS_PER_THREAD = work, pairs
