r"""Synthetic data from an MRF with triangle interactions on a triangular lattice (issue 50).

Labels are drawn from

.. math::
    p(y) \propto \prod_i \phi_i(y_i) \prod_{\{i,j\} \in E} H_{y_i y_j} \prod_{\{i,j,k\} \in \mathcal{T}} T_{y_i y_j y_k}

by Gibbs sampling, one colour class of a proper colouring at a time: no edge and no triangle holds two
nodes of one colour, so the nodes of a class are conditionally independent given the rest and are
redrawn together, exactly, in one vectorised step. The conditional of node :math:`i` is

.. math::
    \log p(y_i = a \mid y_{-i}) \cong \log\phi_i(a) + \sum_{j \in N(i)} \log H_{a y_j}
        + \sum_{\{i,j,k\} \ni i} \log T_{a y_j y_k}.

The triangular lattice has every interior node in six triangles and 3-colours as ``(row + col) mod 3``.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from gbpn.data.mrf import greedy_coloring
from gbpn.errors import GBPNError


class TriangularLattice(NamedTuple):
    """A triangular lattice: ``edge_index`` ``[2, E]`` (both directions), ``coords`` ``[N, 2]`` in
    ``[-1, 1]``, ``triangles`` ``[3, T]`` (``i < j < k``) and a proper 3-colouring ``colors`` ``[N]``."""

    edge_index: Tensor
    coords: Tensor
    triangles: Tensor
    colors: Tensor


def triangular_lattice(rows: int, cols: int) -> TriangularLattice:
    r"""The ``rows x cols`` triangular lattice: node ``r * cols + c`` is joined to its right
    ``(r, c+1)``, lower ``(r+1, c)`` and lower-right ``(r+1, c+1)`` neighbours, so every unit square
    splits into the triangles :math:`\{(r,c), (r,c+1), (r+1,c+1)\}` and :math:`\{(r,c), (r+1,c), (r+1,c+1)\}`:
    :math:`3RC - 2R - 2C + 1` edges and :math:`2(R-1)(C-1)` triangles. Coordinates are the lattice's
    planar positions (row :math:`r` shifted by :math:`r/2`, rows :math:`\sqrt3/2` apart), scaled to
    ``[-1, 1]``; ``colors`` is ``(r + c) mod 3`` (each edge steps the colour by 1 or 2).

    Shapes:
        -> ``edge_index`` ``[2, E]``, ``coords`` ``[R C, 2]``, ``triangles`` ``[3, T]``, ``colors`` ``[R C]``
    """
    if rows < 2 or cols < 2:
        raise GBPNError(f"a triangular lattice needs at least 2 rows and 2 columns, got {rows} x {cols}")
    idx = torch.arange(rows * cols).view(rows, cols)
    right = torch.stack([idx[:, :-1].reshape(-1), idx[:, 1:].reshape(-1)])
    down = torch.stack([idx[:-1, :].reshape(-1), idx[1:, :].reshape(-1)])
    diag = torch.stack([idx[:-1, :-1].reshape(-1), idx[1:, 1:].reshape(-1)])
    und = torch.cat([right, down, diag], dim=1)
    edge_index = torch.cat([und, und.flip(0)], dim=1)
    a, b = idx[:-1, :-1].reshape(-1), idx[:-1, 1:].reshape(-1)
    c, d = idx[1:, :-1].reshape(-1), idx[1:, 1:].reshape(-1)
    # upper triangle (a, b, d) and lower triangle (a, c, d); a < b < c < d as node ids
    triangles = torch.cat([torch.stack([a, b, d]), torch.stack([a, c, d])], dim=1)
    triangles = triangles[:, torch.argsort(triangles[0] * rows * cols + triangles[1], stable=True)]
    r = torch.arange(rows, dtype=torch.float64).repeat_interleave(cols)
    q = torch.arange(cols, dtype=torch.float64).repeat(rows)
    xy = torch.stack([q + r / 2, r * math.sqrt(3) / 2], dim=1)
    lo, hi = xy.amin(0), xy.amax(0)
    coords = 2 * (xy - lo) / (hi - lo) - 1
    colors = (r.long() + q.long()) % 3
    return TriangularLattice(edge_index, coords, triangles, colors)


def potts_triangle(num_classes: int, strength: float) -> Tensor:
    r"""The triangle Potts log-potential :math:`\log T_{abk} = s\,[a = b = k]` ``[c, c, c]`` (float64):
    a triangle whose three labels agree gets :math:`e^s`, independently of what its pairs say."""
    log_T = torch.zeros(num_classes, num_classes, num_classes, dtype=torch.float64)
    r = torch.arange(num_classes)
    log_T[r, r, r] = strength
    return log_T


def three_spin_triangle(strength: float) -> Tensor:
    r"""The two-class three-spin log-potential :math:`\log T_{abk} = s\,\sigma_a\sigma_b\sigma_k` ``[2, 2, 2]``
    (float64), :math:`\sigma = (-1, +1)`: it favours (:math:`s > 0`) triangles with an even number of class-0
    nodes. Summing :math:`T` over any one corner gives a constant (:math:`2\cosh s`), so a lone triangle
    induces no interaction between its other two corners: a pairwise coupling can mimic little of it
    (on ``synth-triangle`` pairwise GBPN ends 14 points below triangle GBPN; ``results/motifs``)."""
    sigma = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    return strength * sigma[:, None, None] * sigma[None, :, None] * sigma[None, None, :]


def default_triangle(num_classes: int, strength: float) -> Tensor:
    """The triangle log-potential of :func:`make_triangle_mrf` and ``gbpn sample-mrf --triangle-coupling``:
    :func:`three_spin_triangle` for two classes (what no pairwise model can express), :func:`potts_triangle`
    for more."""
    return three_spin_triangle(strength) if num_classes == 2 else potts_triangle(num_classes, strength)


def angular_field(coords: Tensor, num_classes: int, strength: float) -> Tensor:
    r"""Smooth log self-potentials from positions: :math:`\log\phi_i(a) = s \cos(\theta_i - 2\pi a / c)`,
    :math:`\theta_i` the angle of node :math:`i` about the origin, so class :math:`a` is favoured in the
    :math:`a`-th angular sector (a field an MLP on the coordinates can learn).

    Shapes:
        coords: ``[N, 2]`` -> ``[N, c]``
    """
    theta = torch.atan2(coords[:, 1].double(), coords[:, 0].double())
    centres = 2 * math.pi * torch.arange(num_classes, dtype=torch.float64) / num_classes
    return strength * torch.cos(theta[:, None] - centres[None, :])


def _check_coloring(colors: Tensor, edge_index: Tensor, triangles: Tensor) -> None:
    if edge_index.numel() and bool((colors[edge_index[0]] == colors[edge_index[1]]).any()):
        raise GBPNError("colors is not a proper colouring: some edge joins two nodes of one colour")
    if triangles.numel():
        cc = colors[triangles]
        if bool(((cc[0] == cc[1]) | (cc[1] == cc[2]) | (cc[0] == cc[2])).any()):
            raise GBPNError("colors puts two corners of some triangle in one colour class")


def _color_plan(colors: Tensor, edge_index: Tensor, triangles: Tensor) -> List[Tuple[Tensor, ...]]:
    """Per colour class: its nodes, the edges into it (source, position of the target in the class) and
    its triangle corners (the two other corners, position of the corner in the class)."""
    n = colors.numel()
    plan = []
    src, dst = edge_index[0].long(), edge_index[1].long()
    corners = triangles.long()
    for k in range(int(colors.max()) + 1 if n else 0):
        nodes = (colors == k).nonzero().view(-1)
        local = torch.full((n,), -1, dtype=torch.long)
        local[nodes] = torch.arange(nodes.numel())
        into = colors[dst] == k
        e_src, e_dst = src[into], local[dst[into]]
        o1, o2, at = [], [], []
        for s, (p, q) in enumerate(((1, 2), (0, 2), (0, 1))):
            hit = colors[corners[s]] == k
            o1.append(corners[p][hit])
            o2.append(corners[q][hit])
            at.append(local[corners[s][hit]])
        plan.append((nodes, e_src, e_dst, torch.cat(o1), torch.cat(o2), torch.cat(at)))
    return plan


def sample_triangle_mrf(
    edge_index: Tensor,
    triangles: Tensor,
    log_self: Tensor,
    log_H: Tensor,
    log_T: Tensor,
    num_samples: int = 10,
    burn_in: int = 1000,
    thin: int = 100,
    generator: Optional[torch.Generator] = None,
    colors: Optional[Tensor] = None,
    num_chains: Optional[int] = None,
) -> Tensor:
    r"""Draw label configurations of the MRF with unary, pairwise and triangle potentials by Gibbs
    sampling (the conditional of :mod:`gbpn.data.triangle_mrf`), one colour class at a time.

    One sweep redraws every colour class once, by Gumbel-max (:math:`\arg\max_a f_a + G_a`,
    :math:`G_a` Gumbel, is a draw from :math:`\mathrm{softmax}(f)`). ``num_chains`` independent chains
    run side by side in one batch (for marginals: many short chains mix better than one long one).

    Args:
        edge_index (Tensor): ``[2, E]`` symmetric edge list, no duplicates (each :math:`H` factor once
            per undirected edge).
        triangles (Tensor): ``[3, T]`` the triangles carrying :math:`T` (three distinct nodes each).
        log_self (Tensor): ``[N, c]`` :math:`\log\phi`.
        log_H (Tensor): ``[c, c]`` symmetric :math:`\log H`.
        log_T (Tensor): ``[c, c, c]`` :math:`\log T`, symmetric under permutations of its axes.
        num_samples (int, optional): configurations returned per chain. (default: ``10``)
        burn_in (int, optional): sweeps discarded first. (default: ``1000``)
        thin (int, optional): sweeps between returned samples. (default: ``100``)
        generator (torch.Generator, optional): every random draw comes from it.
            (default: a generator seeded with 0)
        colors (Tensor, optional): ``[N]`` a colouring with no edge or triangle inside a class; from
            :func:`~gbpn.data.mrf.greedy_coloring` of the edges and the triangles' sides if ``None``.
            (default: ``None``)
        num_chains (int, optional): ``None`` runs one chain. (default: ``None``)

    Returns:
        ``[num_samples, N]`` integer labels, or ``[num_samples, num_chains, N]`` with ``num_chains``.
    """
    n, c = log_self.shape
    if log_H.shape != (c, c) or log_T.shape != (c, c, c):
        raise GBPNError(f"log_H must be [{c}, {c}] and log_T [{c}, {c}, {c}] for {c} classes, got "
                        f"{list(log_H.shape)} and {list(log_T.shape)}")
    if triangles.dim() != 2 or triangles.size(0) != 3:
        raise GBPNError(f"triangles must have shape [3, T], got {list(triangles.shape)}")
    if not torch.allclose(log_T, log_T.permute(1, 0, 2)) or not torch.allclose(log_T, log_T.permute(0, 2, 1)):
        raise GBPNError("log_T must be symmetric under every permutation of its three axes")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    log_self, log_H, log_T = log_self.double(), log_H.double(), log_T.double()
    if colors is None:
        t = triangles.long()
        sides = torch.cat([t[[0, 1]], t[[1, 2]], t[[0, 2]]], dim=1)
        colors = greedy_coloring(torch.cat([edge_index.long(), sides, sides.flip(0)], dim=1), n)
    _check_coloring(colors, edge_index, triangles)
    plan = _color_plan(colors, edge_index, triangles)
    b = 1 if num_chains is None else num_chains
    y = torch.randint(0, c, (b, n), generator=gen)
    out = []
    for sweep in range(1, burn_in + num_samples * thin + 1):
        for nodes, e_src, e_dst, o1, o2, at in plan:
            field = log_self[nodes].expand(b, -1, -1)
            field = field.index_add(1, e_dst, log_H[y[:, e_src]])  # log H[y_j, a] = log H[a, y_j]
            field = field.index_add(1, at, log_T[y[:, o1], y[:, o2]])  # log T[y_j, y_k, a] by symmetry
            u = torch.rand(field.shape, generator=gen, dtype=torch.float64).clamp_min(1e-300)
            y[:, nodes] = (field - (-u.log()).log()).argmax(-1)
        if sweep > burn_in and (sweep - burn_in) % thin == 0:
            out.append(y.clone())
    ys = torch.stack(out) if out else torch.empty(0, b, n, dtype=torch.long)
    return ys[:, 0] if num_chains is None else ys


def make_triangle_mrf(
    rows: int = 32,
    cols: int = 32,
    num_classes: int = 3,
    pair_strength: float = 0.0,
    triangle_strength: float = 1.0,
    field_strength: float = 0.5,
    num_samples: int = 10,
    sample: int = 0,
    burn_in: int = 1000,
    thin: int = 100,
    seed: int = 0,
    log_H: Optional[Tensor] = None,
) -> Data:
    r"""A triangle-MRF data set on a ``rows x cols`` triangular lattice: ``Data(x=coords, y, edge_index,
    triangle_index)``, with the Potts coupling :math:`\log H = s_2\,[a = b]`, the triangle potential of
    :func:`default_triangle` (strength :math:`s_3`: the three-spin one for two classes, the Potts triangle
    :math:`\log T = s_3\,[a = b = k]` for more) and the field of :func:`angular_field`.

    ``y`` is sample ``sample`` of ``num_samples`` (all in ``data.y_samples``); ``log_H`` ``[c, c]`` (symmetric)
    replaces the Potts coupling when given. The true factors are in ``data.true_H`` and ``data.true_T``, the
    true log self-potentials in ``data.true_log_self``. ``triangle_index`` ``[3, T]`` is offset like
    ``edge_index`` when PyG batches graphs (its name ends in ``index``).
    """
    if not 0 <= sample < num_samples:
        raise GBPNError(f"sample index must be in 0..{num_samples - 1}, got {sample}")
    lattice = triangular_lattice(rows, cols)
    log_self = angular_field(lattice.coords, num_classes, field_strength)
    if log_H is None:
        log_H = pair_strength * torch.eye(num_classes, dtype=torch.float64)
    log_H = torch.as_tensor(log_H, dtype=torch.float64)
    log_T = default_triangle(num_classes, triangle_strength)
    gen = torch.Generator().manual_seed(seed)
    ys = sample_triangle_mrf(lattice.edge_index, lattice.triangles, log_self, log_H, log_T, num_samples, burn_in,
                             thin, generator=gen, colors=lattice.colors)
    data = Data(x=lattice.coords.float(), y=ys[sample], edge_index=lattice.edge_index,
                triangle_index=lattice.triangles)
    data.y_samples = ys
    data.true_H = log_H.exp().float()
    data.true_T = log_T.exp().float()
    data.true_log_self = log_self.float()
    data.num_classes = num_classes
    data.name = f"triangle-mrf-{rows}x{cols}"
    return data
