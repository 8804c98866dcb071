r"""``resnet``, ``res-gcn``, ``res-sage``, ``res-gat``, ``res-gat-sep``, ``res-gt``, ``res-gt-sep``: pre-normalised
residual blocks around a graph aggregation, the GNNs of Platonov et al. (ICLR 2023, *A critical look at the
evaluation of GNNs under heterophily*), written from the paper's description.

They are not PyG's convolutions with a residual switch: every block normalises, aggregates, runs a two-layer GELU
feed-forward network and adds the result back. On heterophilous graphs with a public protocol these are the
published state of the art among classic GNNs.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import add_remaining_self_loops, remove_self_loops, softmax

from gbpn.errors import GBPNError
from gbpn.graph.adjacency import csr_adjacency
from gbpn.models.encoders.base import GraphInput, linear_map, reset_children
from gbpn.models.encoders.sign import propagation_matrix
from gbpn.models.encoders.options import BlockOptions  # noqa: F401  (its options, with the encoder)

# aggregation -> (attention kind, ego channel concatenated to the neighbours' aggregate)
AGGREGATIONS = {"none": (None, False), "gcn": (None, False), "sage": (None, True), "gat": ("gat", False),
                "gat-sep": ("gat", True), "gt": ("gt", False), "gt-sep": ("gt", True)}
# the aggregations that mix a node into its own neighbourhood (self-loops), as published; the others keep it apart
SELF_LOOPS = ("gcn", "gat", "gt")


class _Attention(nn.Module):
    r"""Multi-head attention over a node's neighbours, as sums over edges (never an :math:`N \times N` matrix).

    ``gat``: :math:`e_{ij} = \mathrm{LeakyReLU}(a_s^\top W z_j + a_d^\top W z_i)`, values :math:`W z_j`;
    ``gt``: :math:`e_{ij} = (W_q z_i)^\top (W_k z_j) / \sqrt{d_h}`, values :math:`W_v z_j`. Per head,
    :math:`m_i = \sum_{j \in N(i)} \mathrm{softmax}_j(e_{ij})\, v_j`; the heads are concatenated.
    """

    def __init__(self, kind: str, dim: int, heads: int):
        super().__init__()
        self.kind, self.heads, self.head_dim = kind, heads, dim // heads
        if kind == "gat":
            self.value = nn.Linear(dim, dim)
            self.score_src = nn.Linear(dim, heads)
            self.score_dst = nn.Linear(dim, heads, bias=False)
        else:
            self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, z: Tensor, graph: Tensor) -> Tuple[Tensor, Tensor]:
        """The values :math:`v` ``[N, d]`` (GAT: the projected nodes) and the aggregated messages ``[N, d]``;
        ``graph``: the CSR adjacency (row = target), whose order the edge scores follow."""
        n, h, d = z.size(0), self.heads, self.head_dim
        crow, src = graph.crow_indices(), graph.col_indices()
        dst = torch.repeat_interleave(torch.arange(n, device=z.device), crow.diff())
        v = self.value(z)
        if self.kind == "gat":
            scores = F.leaky_relu(self.score_src(v)[src] + self.score_dst(v)[dst], 0.2)
        else:
            q, k = self.query(z).view(n, h, d), self.key(z).view(n, h, d)
            scores = (q[dst] * k[src]).sum(-1) / math.sqrt(d)
        alpha = softmax(scores, ptr=crow, num_nodes=n)  # [E, heads], normalised over each target's edges
        # one CSR product per head: 3x faster than gathering [E, d] messages on a CPU, and no [E, d] tensor
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "CSR support is in beta"
            heads = [torch.sparse.mm(torch.sparse_csr_tensor(crow, src, alpha[:, i].contiguous(), (n, n)),
                                     v[:, i * d:(i + 1) * d]) for i in range(h)]
        return v, torch.cat(heads, dim=-1)


class _Block(nn.Module):
    r"""One residual block: :math:`h + \mathrm{Drop}(W_2\, \mathrm{Drop}(\mathrm{GELU}(W_1 m)))` with
    :math:`m = \mathrm{Agg}(\mathrm{LN}(h))` (``[LN(h), Agg(LN(h))]`` for the ``-sep`` aggregations). A graph
    transformer block (``gt``, ``gt-sep``) adds its attention's output map as a residual step of its own
    before the feed-forward one, as a transformer layer does."""

    def __init__(self, aggregation: str, dim: int, dropout: float, heads: int, ffn_multiplier: int):
        super().__init__()
        attention, self.sep = AGGREGATIONS[aggregation]
        self.aggregation, self.dropout = aggregation, dropout
        self.norm = nn.LayerNorm(dim)
        self.attention = _Attention(attention, dim, heads) if attention else None
        width = 2 * dim if self.sep else dim
        if attention == "gt":  # attention as a residual step of its own, then a plain feed-forward block
            self.attn_out = nn.Linear(width, dim)
            self.ffn_norm = nn.LayerNorm(dim)
            width = dim
        self.ffn_in = nn.Linear(width, ffn_multiplier * dim)
        self.ffn_out = nn.Linear(ffn_multiplier * dim, dim)

    def _ffn(self, m: Tensor) -> Tensor:
        m = F.dropout(F.gelu(self.ffn_in(m)), self.dropout, self.training)
        return F.dropout(self.ffn_out(m), self.dropout, self.training)

    def forward(self, h: Tensor, graph: Tensor) -> Tensor:
        z = self.norm(h)
        if self.attention is not None:
            v, m = self.attention(z, graph)
            if self.attention.kind == "gat":  # GAT-sep's ego channel is the projected node, as its messages are
                z = v
        elif self.aggregation == "none":
            m = z
        else:  # gcn: the normalised adjacency; sage: the mean over neighbours (rows scaled in the CSR)
            m = torch.sparse.mm(graph, z)
        if self.sep:
            m = torch.cat([z, m], dim=-1)
        if self.attention is not None and self.attention.kind == "gt":
            h = h + F.dropout(self.attn_out(m), self.dropout, self.training)
            return h + self._ffn(self.ffn_norm(h))
        return h + self._ffn(m)


class ResidualGNN(nn.Module):
    r"""Pre-normalised residual blocks around a graph aggregation (Platonov et al., 2023):

    .. math::
        h^{(0)} = \mathrm{GELU}(\mathrm{Drop}(X W_{in})), \qquad
        h^{(l)} = h^{(l-1)} + \mathrm{Drop}\big(\mathrm{FFN}_l(\mathrm{Agg}(\mathrm{LN}(h^{(l-1)}), A))\big),
        \qquad f = \mathrm{LN}(h^{(L)}) W_{out},

    with :math:`\mathrm{FFN}(m) = W_2\, \mathrm{Drop}(\mathrm{GELU}(W_1 m))`. The aggregations:

    * ``none`` (ResNet): :math:`m = z`, no graph;
    * ``gcn``: :math:`m = \tilde D^{-1/2} (A + I) \tilde D^{-1/2} z`;
    * ``sage``: :math:`m = [z_i, \mathrm{mean}_{j \in N(i)} z_j]`;
    * ``gat`` / ``gat-sep``: multi-head GAT attention over the neighbours and the node itself (``-sep``: over the
      neighbours only, then :math:`[W z_i, m_i]`);
    * ``gt`` / ``gt-sep``: multi-head dot-product attention over the neighbours (``gt``: and the node itself)
      with an output map, a
      residual step of its own, then a feed-forward residual step (``-sep``: the output map reads
      :math:`[z_i, m_i]`).

    Aggregation runs on sparse operations: a CSR product for ``gcn`` and ``sage``, one per head for the
    attention kinds (their scores are :math:`E \times` heads; GT's dot products gather :math:`E \times d`).

    Args:
        in_channels (int): node feature size.
        out_channels (int): number of classes.
        aggregation (str, optional): one of :data:`AGGREGATIONS`. (default: ``"sage"``)
        hidden_channels (int, optional): width :math:`d`. (default: ``512``)
        num_layers (int, optional): residual blocks :math:`L`. (default: ``2``)
        dropout (float, optional): dropout probability. (default: ``0.2``)
        heads (int, optional): attention heads (``hidden_channels`` must be a multiple). (default: ``8``)
        ffn_multiplier (int, optional): the feed-forward network's inner width over :math:`d`. (default: ``1``)

    Shapes:
        - **input:** node features :math:`(N, F)` (dense or sparse COO), ``edge_index`` :math:`(2, E)`
        - **output:** logits :math:`(N, C)`
    """

    def __init__(self, in_channels: int, out_channels: int, aggregation: str = "sage", hidden_channels: int = 512,
                 num_layers: int = 2, dropout: float = 0.2, heads: int = 8, ffn_multiplier: int = 1):
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise GBPNError(f"unknown aggregation {aggregation!r}; choose one of {', '.join(AGGREGATIONS)}")
        if num_layers < 1:
            raise GBPNError(f"a residual GNN needs at least one block, got {num_layers}")
        if AGGREGATIONS[aggregation][0] and hidden_channels % heads:
            raise GBPNError(f"hidden width {hidden_channels} is not a multiple of heads={heads}")
        self.in_channels, self.out_channels, self.aggregation = in_channels, out_channels, aggregation
        self.hidden_channels, self.num_layers, self.dropout, self.heads = hidden_channels, num_layers, dropout, heads
        self.ffn_multiplier = ffn_multiplier
        self.lin_in = nn.Linear(in_channels, hidden_channels)
        self.blocks = nn.ModuleList(_Block(aggregation, hidden_channels, dropout, heads, ffn_multiplier)
                                    for _ in range(num_layers))
        self.norm_out = nn.LayerNorm(hidden_channels)
        self.lin_out = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_children(self)

    def precompute(self, x: Tensor, edge_index: Optional[Tensor] = None) -> GraphInput:
        """The features with the CSR adjacency the blocks aggregate on (``gcn``: symmetric normalisation;
        ``sage``: row-normalised, the mean; attention: ones, the pattern its scores fill)."""
        n = x.size(0)
        if edge_index is None:  # ResNet reads no graph
            edge_index = torch.empty(2, 0, dtype=torch.long, device=x.device)
        if self.aggregation in ("gcn", "sage"):  # SIGN's operators: GCN's with self-loops, the neighbour mean
            if self.aggregation == "gcn":
                edge_index, _ = remove_self_loops(edge_index)  # propagation_matrix adds one per node
            return GraphInput(x, propagation_matrix(edge_index, n, self.aggregation == "sage", x.dtype))
        if self.aggregation in SELF_LOOPS:
            edge_index, _ = add_remaining_self_loops(edge_index, num_nodes=n)
        return GraphInput(x, csr_adjacency(edge_index, n))

    def forward(self, inputs: Union[GraphInput, Tensor], edge_index: Optional[Tensor] = None) -> Tensor:
        if not isinstance(inputs, GraphInput):
            if edge_index is None and self.aggregation != "none":
                raise GBPNError(f"the {self.aggregation} residual encoder needs edge_index")
            inputs = self.precompute(inputs, edge_index)
        x, graph = inputs.x, inputs.graph
        h = F.gelu(F.dropout(linear_map(x, self.lin_in), self.dropout, self.training))
        for block in self.blocks:
            h = block(h, graph)
        return self.lin_out(self.norm_out(h))

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, aggregation={self.aggregation!r}, "
                f"hidden={self.hidden_channels}, num_layers={self.num_layers}, dropout={self.dropout}, "
                f"heads={self.heads})")


def builder(aggregation: str):
    """The build function of the ``aggregation`` encoder (``num_hidden`` is the MLP's; blocks are counted apart)."""
    def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
              precision: str, blocks: int = 2, **options) -> ResidualGNN:
        return ResidualGNN(in_channels, num_classes, aggregation, hidden_channels, blocks, dropout, **options)
    return build


build_resnet, build_res_gcn, build_res_sage = builder("none"), builder("gcn"), builder("sage")
build_res_gat, build_res_gat_sep = builder("gat"), builder("gat-sep")
build_res_gt, build_res_gt_sep = builder("gt"), builder("gt-sep")
