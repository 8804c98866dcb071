import contextlib
import itertools
import os
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def _fused_skip_reason():
    from gbpn.bp.backends.cpu_fused import fused_unavailable

    return fused_unavailable(torch.float64)


FUSED_SKIP = _fused_skip_reason()
# both BP kernels (gbpn.bp.backends.cpu_fused needs numba: its cases skip, with the reason, where it cannot run)
KERNELS = ["eager", pytest.param("fused", marks=pytest.mark.skipif(FUSED_SKIP is not None, reason=str(FUSED_SKIP)))]


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
    e = torch.tensor(edges, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], dim=1)


def random_graph(n, p, seed):
    """An Erdos-Renyi graph with its directed edges in random order (neither CSR nor paired)."""
    g = torch.Generator().manual_seed(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if float(torch.rand(1, generator=g)) < p]
    ei = undirected(pairs)
    return ei[:, torch.randperm(ei.size(1), generator=g)]


@contextlib.contextmanager
def num_threads(k):
    """torch (and with it the fused kernels' node blocks) on ``k`` threads inside the block, however
    small the graph: the kernels' least work per thread is lifted meanwhile."""
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
