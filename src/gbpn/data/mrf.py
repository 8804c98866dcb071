"""Synthetic data from a pairwise MRF on a grid (paper section 3 and appendix A.3).

Labels are drawn from :math:`p(y) \\propto \\prod_i h_i(y_i) \\prod_{(i,j)\\in E} H_{y_i y_j}`
by MCMC; the features are the grid coordinates.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from tqdm.auto import tqdm

from gbpn.data.names import SYNTHETIC_KINDS
from gbpn.errors import GBPNError



def _potts(c: int, strength: float) -> Tensor:
    """``H = exp(strength * (2 I - 1))``: homophilous for strength > 0, heterophilous for < 0."""
    return torch.exp(strength * (2 * torch.eye(c, dtype=torch.float64) - 1))


# log H patterns of the 3-class models, read off the label co-occurrence of the reference
# files: in MRF+ classes 0 and 1 repel and each attracts itself; in MRF- class 1 repels
# both others while 0 and 2 attract each other (so MRF- is heterophilous between classes
# 0 and 2, yet its neighbour agreement is 0.61 because class 1 clusters).
MRF_PATTERN = {
    "mrf+": torch.tensor([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64),
    "mrf-": torch.tensor([[0.0, -1.0, 1.0], [-1.0, 1.0, -1.0], [1.0, -1.0, 0.0]], dtype=torch.float64),
}

# Default couplings, strengths chosen so that samples have neighbour-agreement rates close
# to the reference files (benchmarks/mrf_agreement.py prints both side by side):
# Ising+ 0.738, Ising- 0.281, MRF+ 0.565, MRF- 0.611.
DEFAULT_STRENGTH = {"ising+": 0.31, "ising-": -0.35, "mrf+": 0.52, "mrf-": 0.48}
DEFAULT_COUPLING = {
    "ising+": _potts(2, DEFAULT_STRENGTH["ising+"]),
    "ising-": _potts(2, DEFAULT_STRENGTH["ising-"]),
    "mrf+": torch.exp(DEFAULT_STRENGTH["mrf+"] * MRF_PATTERN["mrf+"]),
    "mrf-": torch.exp(DEFAULT_STRENGTH["mrf-"] * MRF_PATTERN["mrf-"]),
}


def coupling_family(kind: str, strength: float) -> Tensor:
    """The coupling of ``kind`` at another ``strength`` (the default is ``DEFAULT_STRENGTH[kind]``)."""
    if kind.startswith("ising"):
        return _potts(2, strength)
    return torch.exp(strength * MRF_PATTERN[kind])


def grid_graph(n: int) -> tuple[Tensor, Tensor]:
    """4-neighbour ``n x n`` grid: ``edge_index`` ``[2, 4n(n-1)]`` (both directions) and
    coordinates ``[n*n, 2]`` scaled to ``[-1, 1]`` (node ``k`` is row ``k // n``, column ``k % n``)."""
    if n < 2:
        raise GBPNError(f"grid size must be at least 2, got {n}")
    idx = torch.arange(n * n).view(n, n)
    right = torch.stack([idx[:, :-1].reshape(-1), idx[:, 1:].reshape(-1)])
    down = torch.stack([idx[:-1, :].reshape(-1), idx[1:, :].reshape(-1)])
    und = torch.cat([right, down], dim=1)
    edge_index = torch.cat([und, und.flip(0)], dim=1)
    r = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    coords = torch.stack([r.repeat(n), r.repeat_interleave(n)], dim=1)
    return edge_index, coords


def synthetic_log_self_potential(kind: str, coords: Tensor) -> Tensor:
    """Log self-potentials ``[N, c]`` of the appendix for ``kind`` in :data:`SYNTHETIC_KINDS`."""
    r1, r2 = coords[:, 0], coords[:, 1]
    if kind in ("ising+", "ising-"):
        a = 0.35 * r1 * r2
        return torch.stack([-a, a], dim=1)
    if kind in ("mrf+", "mrf-"):
        k, b = (0.2, 0.65) if kind == "mrf+" else (0.6, 0.0)
        s1 = r1**2 + r2**2 - b
        s = torch.stack([torch.zeros_like(s1), s1, -s1], dim=1)
        return torch.nn.functional.logsigmoid(k * s)
    raise GBPNError(f"unknown synthetic model {kind!r}; choose one of {', '.join(SYNTHETIC_KINDS)}")


def greedy_coloring(edge_index: Tensor, num_nodes: int) -> Tensor:
    """A proper vertex colouring (no edge inside a colour), so each colour class can be
    resampled in one vectorised step. Runs once per graph; grids get 2 colours."""
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    order = torch.argsort(edge_index[0], stable=True)
    nbr = edge_index[1][order].numpy()
    ptr[1:] = torch.cumsum(torch.bincount(edge_index[0], minlength=num_nodes), 0)
    ptr = ptr.numpy()
    color = np.full(num_nodes, -1, dtype=np.int64)
    for i in range(num_nodes):  # one-off set-up, not on the sampling path
        used = set(color[nbr[ptr[i] : ptr[i + 1]]].tolist())
        c = 0
        while c in used:
            c += 1
        color[i] = c
    return torch.from_numpy(color)


def sample_mrf(
    edge_index: Tensor,
    log_self: Tensor,
    log_H: Tensor,
    num_samples: int = 10,
    burn_in: int = 1000,
    thin: int = 100,
    method: str = "auto",
    generator: Optional[torch.Generator] = None,
    colors: Optional[Tensor] = None,
    progress: bool = False,
) -> Tensor:
    r"""Draw label configurations of the pairwise MRF by MCMC, vectorised per colour class.

    The local field of node :math:`i` is :math:`f_i(y) = \log h_i(y) + \sum_{j\in N(i)} \log H_{y, y_j}`.
    ``method="gibbs"`` draws :math:`y_i \sim \mathrm{softmax}(f_i)`;
    ``method="metropolis"`` (two classes) proposes the flip :math:`y_i \to 1 - y_i` and accepts it
    with probability :math:`\min(1, e^{f_i(1-y_i) - f_i(y_i)})`. ``"auto"`` picks Metropolis for
    two classes and Gibbs otherwise, as in the paper. One sweep updates every colour class once.

    Args:
        edge_index: ``[2, E]`` symmetric edge list.
        log_self: ``[N, c]`` log self-potentials :math:`\log h_i`.
        log_H: ``[c, c]`` symmetric log coupling.
        num_samples: configurations to return.
        burn_in: sweeps discarded first.
        thin: sweeps between returned samples.
        generator: seeded ``torch.Generator`` (every random draw comes from it).
        colors: a proper colouring ``[N]``; computed with :func:`greedy_coloring` if ``None``.
        progress: a progress bar over the sweeps (on a terminal only).

    Returns:
        ``[num_samples, N]`` integer labels.
    """
    n, c = log_self.shape
    if method == "auto":
        method = "metropolis" if c == 2 else "gibbs"
    if method == "metropolis" and c != 2:
        raise GBPNError("Metropolis flips need exactly two classes; use method='gibbs'")
    if method not in ("metropolis", "gibbs"):
        raise GBPNError(f"unknown sampling method {method!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    log_self = log_self.double()
    log_H = log_H.double()
    src, dst = edge_index[0], edge_index[1]
    if colors is None:
        colors = greedy_coloring(edge_index, n)
    classes = [(colors == k).nonzero().view(-1) for k in range(int(colors.max()) + 1)] if n else []
    y = torch.randint(0, c, (n,), generator=gen)
    out = []
    total = burn_in + num_samples * thin
    for sweep in tqdm(range(1, total + 1), desc=f"{method} sweeps", disable=None if progress else True, leave=False,
                      dynamic_ncols=True):
        for nodes in classes:
            field = log_self.index_add(0, dst, log_H[:, y[src]].T)[nodes]
            if method == "gibbs":  # Gumbel-max: argmax(f + G) ~ softmax(f)
                u = torch.rand(field.shape, generator=gen, dtype=torch.float64).clamp_min(1e-300)
                y[nodes] = (field - (-u.log()).log()).argmax(1)
            else:
                cur = y[nodes]
                delta = field.gather(1, (1 - cur).view(-1, 1)) - field.gather(1, cur.view(-1, 1))
                u = torch.rand(nodes.numel(), generator=gen, dtype=torch.float64)
                y[nodes] = torch.where(u.log() < delta.view(-1), 1 - cur, cur)
        if sweep > burn_in and (sweep - burn_in) % thin == 0:
            out.append(y.clone())
    return torch.stack(out) if out else torch.empty(0, n, dtype=torch.long)


def make_synthetic(
    kind: str = "ising+",
    n: int = 51,
    coupling: Optional[Tensor] = None,
    num_samples: int = 10,
    sample: int = 0,
    burn_in: int = 1000,
    thin: int = 100,
    seed: int = 0,
    progress: bool = False,
) -> Data:
    """A grid MRF data set of the paper's kind, generated here: ``Data(x=coords, y, edge_index)``.

    ``y`` is sample number ``sample`` of ``num_samples``; all samples are kept in
    ``data.y_samples`` and the true coupling in ``data.true_H``.
    """
    if not 0 <= sample < num_samples:
        raise GBPNError(f"sample index must be in 0..{num_samples - 1}, got {sample}")
    edge_index, coords = grid_graph(n)
    log_self = synthetic_log_self_potential(kind, coords)
    H = DEFAULT_COUPLING[kind] if coupling is None else torch.as_tensor(coupling, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    colors = (torch.arange(n * n) // n + torch.arange(n * n) % n) % 2  # checkerboard
    ys = sample_mrf(edge_index, log_self, H.log(), num_samples, burn_in, thin, generator=gen, colors=colors,
                    progress=progress)
    data = Data(x=coords.float(), y=ys[sample], edge_index=edge_index)
    data.y_samples = ys
    data.true_H = H.float()
    data.num_classes = H.size(0)
    data.name = f"synth-{kind}"
    return data


def neighbour_agreement(edge_index: Tensor, y: Tensor) -> float:
    """Fraction of edges whose two end points share a label."""
    return float((y[edge_index[0]] == y[edge_index[1]]).double().mean()) if edge_index.numel() else math.nan
