r"""Potential encoders: the network :math:`f` behind the self-potential
:math:`\log\phi = \mathrm{log\_softmax}(f(X, A))` of :class:`~gbpn.models.gbpn.GBPN`.

The paper's encoder is an MLP on each node's own features (``"mlp"``). Where the class
signal lies in the *neighbours' features* (heterophilous graphs such as Chameleon and
Squirrel) a potential that sees the neighbourhood does better, and the coupling and BP on
top are unchanged:

* ``"sign"`` (:class:`SIGNEncoder`): parameter-free propagated features
  :math:`[X, \hat A X, \dots, \hat A^H X]` computed once per graph, then a linear map per
  hop and an MLP. No message passing at train time, so it trains on sampled trees and on
  Products-sized graphs like the MLP.
* ``"gcn"``, ``"sage"``, ``"gat"`` (:class:`GNNEncoder`): PyG message-passing layers,
  trained full batch.
* ``"dagnn"`` (:class:`DAGNNEncoder`): the DAGNN baseline's adaptive deep propagation of an
  MLP's outputs (ten hops), trained full batch.
* ``"linkx"`` (:class:`LINKXEncoder`): separate maps of a node's features and of its
  adjacency row (which nodes it links to), trained full batch. It learns a weight per node,
  so it serves the graph it was trained on only.

Every encoder keeps a node's own ("ego") channel apart from its neighbours' by default
(``separate=True``), which is what serves heterophilous graphs: mixing them, as GCN's
:math:`\tilde A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2}` does, averages a node's evidence
with that of neighbours of other classes.

Encoders take ``(inputs, edge_index)`` where ``inputs`` is what :meth:`precompute` returned
for the graph (raw features for the MLP; :class:`Propagated` hops for SIGN; raw features and
a CSR adjacency for the GNNs). Raw features are accepted too and are then propagated on the
fly.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.utils import to_torch_csr_tensor

from gbpn.errors import GBPNError
from gbpn.models.mlp import MLP, dropout

ENCODERS = ("mlp", "sign", "gcn", "sage", "gat", "dagnn", "linkx")
# what `--potential auto` tries, per trial, picking on validation alone, from the simplest to
# the most complex: the paper's MLP, SIGN and SAGE with separate ego channels, a GNN that
# mixes a node into its neighbourhood (GCN with self-loops), DAGNN's deep adaptive propagation
# (homophilous graphs), and LINKX (which nodes a node links to, apart from its features; the
# duplicated nodes of unfiltered Squirrel). Other encoders (sign mixed, gat) are opt-in: each
# candidate costs a full training run.
AUTO_CANDIDATES: Sequence[Dict] = (
    {"potential": "mlp"},
    {"potential": "sign", "separate": True},
    {"potential": "sage", "separate": True},
    {"potential": "gcn", "separate": False},
    {"potential": "dagnn"},
    {"potential": "linkx"},
)


def _linear(x: Tensor, lin: nn.Linear) -> Tensor:
    """``lin(x)`` for a dense or sparse COO ``x`` (bag-of-words features stay sparse)."""
    if x.is_sparse:
        return torch.sparse.mm(x, lin.weight.T) + lin.bias
    return lin(x)


def _adjacency(edge_index: Tensor, num_nodes: int, weight: Optional[Tensor] = None,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """``[N, N]`` CSR adjacency with row = target, column = source (PyG's ``adj_t``), in ``dtype``."""
    if weight is None:
        weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    weight = weight.to(dtype)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": nothing for a user to act on
        warnings.simplefilter("ignore", UserWarning)
        return to_torch_csr_tensor(edge_index.flip(0), weight, size=(num_nodes, num_nodes))


def propagation_matrix(edge_index: Tensor, num_nodes: int, separate: bool = True,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The ``[N, N]`` operator :math:`\hat A` of the propagated features (sparse CSR).

    ``separate=True``: the neighbour mean :math:`D^{-1}A` without self-loops (isolated nodes
    get a zero row), so hop 0 (:math:`X`) is the only ego channel. ``separate=False``: GCN's
    :math:`\tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, which mixes each node into its neighbourhood.
    """
    src, dst = edge_index[0], edge_index[1]
    if not separate:
        loops = torch.arange(num_nodes, device=edge_index.device)
        src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    deg = torch.bincount(dst, minlength=num_nodes).float()
    if separate:
        w = deg.clamp_min(1).reciprocal()[dst]
    else:
        inv = deg.pow(-0.5)
        w = inv[src] * inv[dst]
    return _adjacency(torch.stack([src, dst]), num_nodes, w, dtype)


def propagate_features(x: Tensor, edge_index: Tensor, hops: int = 2, separate: bool = True,
                       max_density: float = 0.1) -> List[Tensor]:
    r"""Propagated features, one tensor per hop, computed in :math:`O(E F)` per hop.

    ``separate=True``: :math:`[X, \hat A X, \dots, \hat A^H X]` with the neighbour mean
    :math:`\hat A = D^{-1} A` (ego and neighbour channels apart). ``separate=False``:
    :math:`[\tilde A X, \dots, \tilde A^H X]` with GCN's normalisation (self-loops mixed in).
    Sparse COO features stay sparse while at most ``max_density`` of the entries are non-zero.
    """
    if hops < 1:
        raise GBPNError(f"propagated features need at least one hop, got {hops}")
    n = x.size(0)
    A = propagation_matrix(edge_index, n, separate, x.dtype)
    if x.is_sparse:  # sparse @ sparse keeps bag-of-words features sparse
        A = A.to_sparse_coo()
    out, h = ([x] if separate else []), x
    for _ in range(hops):
        h = torch.sparse.mm(A, h)
        if h.is_sparse:
            h = h.coalesce()
            if h._nnz() > max_density * h.numel():
                h = h.to_dense()
        out.append(h)
    return out


class Propagated:
    """Precomputed per-hop features of a graph: index them by node like a tensor
    (``index_select``, ``size``, ``to``), so sampled trees and node chunks take rows of it."""

    def __init__(self, hops: Sequence[Tensor]):
        self.hops = list(hops)

    def index_select(self, dim: int, index: Tensor) -> "Propagated":
        if dim != 0:
            raise ValueError("propagated features are indexed by node (dim 0)")
        return Propagated([h.index_select(0, index) for h in self.hops])

    def size(self, dim: Optional[int] = None):
        return self.hops[0].size() if dim is None else self.hops[0].size(dim)

    def to(self, *args, **kwargs) -> "Propagated":
        return Propagated([h.to(*args, **kwargs) for h in self.hops])

    @property
    def device(self) -> torch.device:
        return self.hops[0].device


class GraphInput:
    """Features with the adjacency a GNN encoder runs on. It cannot be cut into sampled trees:
    a GNN encoder's potential of a node depends on the whole graph around it."""

    def __init__(self, x: Tensor, graph: Tensor):
        self.x, self.graph = x, graph

    def index_select(self, dim: int, index: Tensor):
        raise GBPNError("graph potential encoders (gcn, sage, gat, dagnn, linkx) train full batch only: drop --batch-size, or "
                        "use --potential sign (precomputed neighbourhood features) or mlp for mini-batch training")

    def size(self, dim: Optional[int] = None):
        return self.x.size() if dim is None else self.x.size(dim)

    def to(self, *args, **kwargs) -> "GraphInput":
        return GraphInput(self.x.to(*args, **kwargs), self.graph.to(*args, **kwargs))

    @property
    def device(self) -> torch.device:
        return self.x.device


class MLPEncoder(MLP):
    """The paper's potential: an MLP on each node's own features (the graph is ignored)."""

    def precompute(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return x

    def forward(self, x: Tensor, edge_index: Optional[Tensor] = None) -> Tensor:  # type: ignore[override]
        return super().forward(x)


class SIGNEncoder(nn.Module):
    r"""SIGN-style encoder (Frasca et al. 2020) on precomputed propagated features:

    .. math::
        f(X, A) = \mathrm{MLP}\Big(\sigma\big(\big\Vert_{k} \hat A^k X\, W_k\big)\Big)

    with one linear map :math:`W_k` per hop (``hops + 1`` of them with ``separate=True``:
    :math:`k = 0, \dots, H`, the ego channel :math:`X` kept apart; ``hops`` with
    ``separate=False``: :math:`\tilde A^1 \dots \tilde A^H`), see :func:`propagate_features`.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        hidden_channels (int, optional): width of each hop's map and of the MLP. (default: ``256``)
        num_hidden (int, optional): hidden layers in all, the per-hop maps included. (default: ``2``)
        dropout (float, optional): dropout before every linear map. (default: ``0.0``)
        hops (int, optional): propagation hops :math:`H`. (default: ``2``)
        separate (bool, optional): keep ego and neighbour channels apart. (default: ``True``)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 256, num_hidden: int = 2,
                 dropout: float = 0.0, hops: int = 2, separate: bool = True):
        super().__init__()
        if num_hidden < 1 or hops < 1:
            raise GBPNError("the sign encoder needs num_hidden >= 1 and hops >= 1")
        self.in_channels, self.out_channels, self.hidden_channels = in_channels, out_channels, hidden_channels
        self.num_hidden, self.dropout, self.hops, self.separate = num_hidden, dropout, hops, separate
        n_channels = hops + 1 if separate else hops
        self.hop_lins = nn.ModuleList(nn.Linear(in_channels, hidden_channels) for _ in range(n_channels))
        self.mlp = MLP(n_channels * hidden_channels, hidden_channels, out_channels, num_hidden - 1, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.hop_lins:
            lin.reset_parameters()
        self.mlp.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> Propagated:
        return Propagated(propagate_features(x, edge_index, self.hops, self.separate))

    def forward(self, inputs: Union[Propagated, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, Propagated):
            if edge_index is None:
                raise GBPNError("the sign encoder needs edge_index (or precomputed features) for raw features")
            inputs = self.precompute(inputs, edge_index)
        h = torch.cat([_linear(dropout(x, self.dropout, self.training), lin)
                       for x, lin in zip(inputs.hops, self.hop_lins)], dim=-1)
        return self.mlp(F.relu(h))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, hidden={self.hidden_channels}, "
                f"num_hidden={self.num_hidden}, hops={self.hops}, separate={self.separate}, dropout={self.dropout})")


class GNNEncoder(nn.Module):
    r"""A stack of PyG message-passing layers between an input and an output linear map:

    .. math::
        h^{(0)} = X W_{in}, \qquad
        z^{(l)} = \sigma\big(\mathrm{Conv}_l(\mathrm{LN}(h^{(l-1)}), A) + \mathrm{LN}(h^{(l-1)}) W^{(l)}_{ego}\big),
        \qquad h^{(l)} = h^{(l-1)} + z^{(l)} \ \text{(residual)} \ \text{or}\ z^{(l)},

    and :math:`f = \mathrm{LN}(h^{(L)}) W_{out}`, with dropout before every linear map.
    With ``separate=True`` the convolution sees neighbours only (no self-loops) and a node's
    own representation enters through its own weight :math:`W_{ego}` (SAGE's root weight;
    an extra linear map for GCN and GAT), as the strongest GNNs on heterophilous graphs do.
    ``LN`` is LayerNorm when ``layer_norm`` is set, the identity otherwise.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        conv (str, optional): ``"gcn"``, ``"sage"`` (mean aggregator) or ``"gat"``. (default: ``"sage"``)
        hidden_channels (int, optional): width. (default: ``256``)
        num_layers (int, optional): message-passing layers :math:`L`. (default: ``2``)
        dropout (float, optional): dropout probability. (default: ``0.0``)
        residual (bool, optional): residual connections. (default: ``False``)
        layer_norm (bool, optional): LayerNorm before each layer and the output. (default: ``False``)
        separate (bool, optional): separate ego weights, no self-loops. (default: ``True``)
        heads (int, optional): GAT attention heads (``hidden_channels`` is their total width). (default: ``4``)
    """

    def __init__(self, in_channels: int, out_channels: int, conv: str = "sage", hidden_channels: int = 256,
                 num_layers: int = 2, dropout: float = 0.0, residual: bool = False, layer_norm: bool = False,
                 separate: bool = True, heads: int = 4):
        super().__init__()
        if conv not in ("gcn", "sage", "gat"):
            raise GBPNError(f"unknown GNN encoder {conv!r}; choose gcn, sage or gat")
        if num_layers < 1:
            raise GBPNError(f"a GNN encoder needs at least one layer, got {num_layers}")
        if conv == "sage" and not separate:
            raise GBPNError("SAGE keeps a node's own representation apart by design (its root weight): "
                            "separate=False applies to gcn and gat")
        if conv == "gat" and hidden_channels % heads:
            raise GBPNError(f"GAT hidden width {hidden_channels} is not a multiple of heads={heads}")
        self.in_channels, self.out_channels, self.conv, self.hidden_channels = in_channels, out_channels, conv, hidden_channels
        self.num_layers, self.dropout, self.residual, self.layer_norm = num_layers, dropout, residual, layer_norm
        self.separate, self.heads = separate, heads
        h = hidden_channels
        self.lin_in = nn.Linear(in_channels, h)
        if conv == "gcn":
            self.convs = nn.ModuleList(GCNConv(h, h, add_self_loops=not separate) for _ in range(num_layers))
        elif conv == "sage":
            self.convs = nn.ModuleList(SAGEConv(h, h) for _ in range(num_layers))
        else:
            self.convs = nn.ModuleList(GATConv(h, h // heads, heads=heads, add_self_loops=not separate, dropout=dropout)
                                       for _ in range(num_layers))
        # SAGE carries its own root weight; GCN and GAT get one here
        self.egos = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(num_layers)) \
            if separate and conv != "sage" else None
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(num_layers + 1)) if layer_norm else None
        self.lin_out = nn.Linear(h, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        # GCN and SAGE run one sparse-dense product per layer on a CSR adjacency (much faster on
        # CPU than gathering [E, hidden] messages); GAT needs per-edge attention.
        if self.conv == "gat":
            return GraphInput(x, edge_index)
        if self.conv == "sage" or not self.separate:
            graph = _adjacency(edge_index, x.size(0), dtype=x.dtype)
        else:  # GCN without self-loops: normalise once here (D^-1/2 A D^-1/2)
            deg = torch.bincount(edge_index[1], minlength=x.size(0)).float()
            inv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
            graph = _adjacency(edge_index, x.size(0), inv[edge_index[0]] * inv[edge_index[1]], x.dtype)
        return GraphInput(x, graph)

    def _norm(self, h: Tensor, layer: int) -> Tensor:
        return self.norms[layer](h) if self.norms is not None else h

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError(f"the {self.conv} encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        x, graph = inputs.x, inputs.graph
        pre_normalised = self.conv == "gcn" and self.separate and graph.layout == torch.sparse_csr
        h = _linear(dropout(x, self.dropout, self.training), self.lin_in)
        for i, conv in enumerate(self.convs):
            z = F.dropout(self._norm(h, i), self.dropout, self.training)
            if pre_normalised:
                out = conv.lin(torch.sparse.mm(graph, z)) + conv.bias  # GCNConv on the normalised A
            else:
                out = conv(z, graph)
            if self.egos is not None:
                out = out + self.egos[i](z)
            z = F.relu(out)
            h = h + z if self.residual else z
        return self.lin_out(F.dropout(self._norm(h, self.num_layers), self.dropout, self.training))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, conv={self.conv!r}, "
                f"hidden={self.hidden_channels}, num_layers={self.num_layers}, residual={self.residual}, "
                f"layer_norm={self.layer_norm}, separate={self.separate}, dropout={self.dropout})")


class DAGNNEncoder(nn.Module):
    r"""DAGNN (Liu, Gao & Ji 2020) as the potential: an MLP's outputs propagated over :math:`K`
    hops of GCN's :math:`\hat A = \tilde D^{-1/2}(A + I)\tilde D^{-1/2}`, each hop kept by a
    learned, per-node retention score,

    .. math::
        H_\ell = \hat A^\ell\, \mathrm{MLP}(X), \qquad
        f(X, A) = \sum_{\ell=0}^{K} \sigma(H_\ell\, s)\odot H_\ell,

    the :class:`gbpn.models.dagnn.DAGNN` baseline's own module without its final log-softmax
    (the GBPN normalises). Its MLP has one hidden layer, as in the DAGNN paper.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        hidden_channels (int, optional): MLP width. (default: ``256``)
        dropout (float, optional): MLP dropout. (default: ``0.0``)
        K (int, optional): propagation hops. (default: ``10``)
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 256, dropout: float = 0.0,
                 K: int = 10):
        super().__init__()
        from gbpn.models.dagnn import DAGNN

        self.in_channels, self.out_channels, self.hidden_channels = in_channels, out_channels, hidden_channels
        self.dropout, self.K = dropout, K
        self.dagnn = DAGNN(in_channels, out_channels, hidden_channels, num_hidden=1, K=K, dropout=dropout)

    def reset_parameters(self) -> None:
        self.dagnn.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        from gbpn.models.dagnn import normalized_adjacency

        return GraphInput(x, normalized_adjacency(edge_index, x.size(0)).to(x.dtype))

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError("the dagnn encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        return self.dagnn.combine(self.dagnn.hops(inputs.x, adj=inputs.graph))[0]

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, hidden={self.hidden_channels}, "
                f"K={self.K}, dropout={self.dropout})")


class LINKXEncoder(nn.Module):
    r"""LINKX-style encoder (Lim et al. 2021): a node's features and its adjacency row, mapped apart,

    .. math::
        h_A = A\,W_A, \qquad h_X = X W_X, \qquad
        f(X, A) = \mathrm{MLP}\big(\sigma\big([h_A \Vert h_X]\,W + h_A + h_X\big)\big),

    where row :math:`i` of :math:`A` marks the nodes that link to :math:`i`, so :math:`h_A` sums one
    learned vector per neighbour: nodes with the same neighbours get the same neighbour channel,
    whatever their features. No message passing beyond one sparse product per step.
    :math:`W_A` has a row per node: the encoder is tied to a graph of ``num_nodes`` nodes.

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        num_nodes (int): nodes of the graph (rows of :math:`W_A`).
        hidden_channels (int, optional): width. (default: ``256``)
        num_hidden (int, optional): hidden layers in all, the two input maps counted as one.
            (default: ``2``)
        dropout (float, optional): dropout before every linear map. (default: ``0.0``)
    """

    def __init__(self, in_channels: int, out_channels: int, num_nodes: int, hidden_channels: int = 256,
                 num_hidden: int = 2, dropout: float = 0.0):
        super().__init__()
        if num_hidden < 1 or num_nodes < 1:
            raise GBPNError("the linkx encoder needs num_hidden >= 1 and a graph with nodes")
        self.in_channels, self.out_channels, self.num_nodes = in_channels, out_channels, num_nodes
        self.hidden_channels, self.num_hidden, self.dropout = hidden_channels, num_hidden, dropout
        self.lin_adj = nn.Linear(num_nodes, hidden_channels)
        self.lin_x = nn.Linear(in_channels, hidden_channels)
        self.lin_cat = nn.Linear(2 * hidden_channels, hidden_channels)
        self.mlp = MLP(hidden_channels, hidden_channels, out_channels, num_hidden - 1, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_adj, self.lin_x, self.lin_cat, self.mlp):
            lin.reset_parameters()

    def precompute(self, x: Tensor, edge_index: Tensor) -> GraphInput:
        return GraphInput(x, _adjacency(edge_index, x.size(0), dtype=x.dtype))

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None:
                raise GBPNError("the linkx encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        if inputs.x.size(0) != self.num_nodes:
            raise GBPNError(f"the linkx potential learns a weight per node of the {self.num_nodes}-node graph it was "
                            f"built for; this graph has {inputs.x.size(0)} nodes. Retrain it on this graph, or use "
                            "an encoder that does not depend on node identities (mlp, sign, gcn, sage, gat)")
        h_a = torch.sparse.mm(inputs.graph, self.lin_adj.weight.T) + self.lin_adj.bias
        h_x = _linear(dropout(inputs.x, self.dropout, self.training), self.lin_x)
        h = self.lin_cat(torch.cat([h_a, h_x], dim=-1)) + h_a + h_x
        return self.mlp(F.relu(h))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, num_nodes={self.num_nodes}, "
                f"hidden={self.hidden_channels}, num_hidden={self.num_hidden}, dropout={self.dropout})")


def build_encoder(potential: str, in_channels: int, num_classes: int, hidden_channels: int = 256,
                  num_hidden: int = 2, dropout: float = 0.0, precision: str = "fp32",
                  **options) -> nn.Module:
    """The encoder named ``potential`` (one of :data:`ENCODERS`). ``options``: ``hops`` and
    ``separate`` for ``sign``; ``num_layers``, ``residual``, ``layer_norm``, ``separate`` and
    ``heads`` for the GNNs; ``K`` for ``dagnn``; ``num_nodes`` for ``linkx``. ``num_hidden`` is the
    MLP's, SIGN's and LINKX's depth (DAGNN's MLP has one hidden layer, as in its paper)."""
    if potential == "mlp":
        if options:
            raise GBPNError(f"the mlp potential takes no options, got {sorted(options)}")
        return MLPEncoder(in_channels, hidden_channels, num_classes, num_hidden, dropout, precision)
    if precision != "fp32":
        raise GBPNError(f"--precision {precision} is implemented for the mlp potential only")
    allowed = {"sign": {"hops", "separate"}, "dagnn": {"K"}, "linkx": {"num_nodes"}}.get(
        potential, {"num_layers", "residual", "layer_norm", "separate", "heads"})
    if potential in ENCODERS and set(options) - allowed:
        raise GBPNError(f"the {potential} potential takes {', '.join(sorted(allowed))}; got "
                        f"{', '.join(sorted(set(options) - allowed))}")
    if potential == "sign":
        return SIGNEncoder(in_channels, num_classes, hidden_channels, num_hidden, dropout, **options)
    if potential in ("gcn", "sage", "gat"):
        return GNNEncoder(in_channels, num_classes, potential, hidden_channels, dropout=dropout, **options)
    if potential == "dagnn":
        return DAGNNEncoder(in_channels, num_classes, hidden_channels, dropout, **options)
    if potential == "linkx":
        if "num_nodes" not in options:  # W_A has a row per node
            raise GBPNError("the linkx potential is tied to one graph: give its node count, "
                            "potential_options={'num_nodes': N}")
        return LINKXEncoder(in_channels, num_classes, hidden_channels=hidden_channels, num_hidden=num_hidden,
                            dropout=dropout, **options)
    raise GBPNError(f"unknown potential {potential!r}; choose one of {', '.join(ENCODERS)} or auto")
