"""The GBPN model: an MLP self-potential followed by belief propagation."""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gbpn.graph.adjacency import to_edge_index
from gbpn.graph.triangles import enumerate_triangles
from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.motifs import MotifBeliefPropagation
from gbpn.bp.problem import BPOptions
from gbpn.bp.validation import check_node_ids, check_not_meta
from gbpn.models.encoders import GraphInput, build_encoder
from gbpn.errors import GBPNError, ModelInputError
from gbpn.models.mlp import PRECISIONS, check_sizes

if TYPE_CHECKING:
    from typing_extensions import Unpack

MOTIFS = ("none", "triangle")


class GBPN(nn.Module):
    r"""Graph Belief Propagation Network.

    .. math::
        \log\phi = \mathrm{log\_softmax}(f_\theta(X, A)), \qquad
        \log p_i = \mathrm{BP}_K(\log\phi, H)_i

    with :class:`~gbpn.bp.layer.BeliefPropagation` for :math:`\mathrm{BP}_K` and a potential
    encoder :math:`f_\theta` from :mod:`gbpn.models.encoders`: the paper's MLP on each node's
    own features (``potential="mlp"``, the default), propagated features (``"sign"``) or a
    GNN (``"gcn"``, ``"sage"``, ``"gat"``, ``"dagnn"``, ``"linkx"``). The same module serves both
    variants:

    * **GBPN-I** (inductive): call without ``known_labels``; it uses features
      only and runs on graphs it was not trained on.
    * **GBPN** (transductive): pass ``known_labels`` and ``known_mask``; those
      nodes are clamped to their label and condition everyone else.

    Args:
        in_channels (int): node feature size.
        num_classes (int): number of classes :math:`c`.
        hidden_channels (int, optional): encoder width. (default: ``256``)
        num_hidden (int, optional): MLP / SIGN hidden layers. (default: ``2``)
        dropout (float, optional): encoder dropout. (default: ``0.1``)
        num_steps (int, optional): BP steps :math:`K`. (default: ``5``)
        max_steps (int, optional): with ``backward="implicit"``, the most steps of a pass
            (:class:`~gbpn.bp.layer.BeliefPropagation`; default: ``num_steps``, as models saved before it
            had their bound there). (default: ``None``)
        precision (str, optional): MLP precision, see :class:`MLP`; BP always
            runs in the dtype of its input (float32 here). (default: ``"fp32"``)
        damping, tol, learn_coupling, coupling_init, backward: see
            :class:`~gbpn.bp.layer.BeliefPropagation`.
        potential (str, optional): the encoder, one of
            :data:`gbpn.models.encoders.ENCODERS`. (default: ``"mlp"``)
        potential_options (dict, optional): the encoder's own options
            (:func:`gbpn.models.encoders.build_encoder`), e.g. ``{"hops": 3}``.
        motifs (str, optional): ``"none"`` (the paper's pairwise model) or ``"triangle"``: a shared
            triangle factor :math:`T` on every triangle of the graph as well,
            :class:`~gbpn.bp.motifs.MotifBeliefPropagation` (eager; ``backward="implicit"`` is refused).
            (default: ``"none"``)
        max_triangles_per_node (int, optional): with ``motifs="triangle"``, the cap of
            :func:`~gbpn.graph.triangles.enumerate_triangles` (sampled, seeded by ``triangle_seed``).
            (default: ``None``, every triangle)
        triangle_seed (int, optional): seed of the cap's sampling. (default: ``0``)
        triangle_form (str, optional): ``"full"`` or ``"cp"`` (default: full below 10 classes).

    Shapes:
        - **input:** ``x`` ``[N, F]`` (dense or sparse COO; or what :meth:`precompute`
          returned for this graph), ``edge_index`` ``[2, E]``, ``edge_weight`` ``[E]``,
          keyword-only ``rev_index`` ``[E]``, ``known_labels``/``known_mask`` ``[N]``,
          ``message_weight`` ``[E]``, ``triangles`` ``[3, T]`` (triangle models: from
          :meth:`triangles_of`, enumerated per call when not given)
        - **output:** normalised log-beliefs ``[N, c]`` (plus residuals and/or final
          messages on request, as for :class:`~gbpn.bp.layer.BeliefPropagation`)
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 256,
        num_hidden: int = 2,
        dropout: float = 0.1,
        num_steps: int = 5,
        damping: float = 0.0,
        tol: Optional[float] = None,
        learn_coupling: bool = True,
        coupling_init: Optional[Tensor] = None,
        precision: str = "fp32",
        potential: str = "mlp",
        potential_options: Optional[Dict] = None,
        backward: str = "unroll",
        motifs: str = "none",
        max_triangles_per_node: Optional[int] = None,
        triangle_seed: int = 0,
        triangle_form: Optional[str] = None,
        max_steps: Optional[int] = None,
    ):
        super().__init__()
        # before any layer is built: torch warns about zero-element weights and fails on negative ones
        for name, value in (("in_channels", in_channels), ("num_classes", num_classes)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:  # numpy ints too
                raise ModelInputError(f"{name} must be a positive whole number, got {value!r}")
        if precision not in PRECISIONS:
            raise ModelInputError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
        check_sizes(hidden_channels, num_hidden, dropout)
        if motifs not in MOTIFS:
            raise ValueError(f"motifs must be one of {', '.join(MOTIFS)}, got {motifs!r}")
        if motifs == "triangle" and backward == "implicit":
            raise ValueError("backward='implicit' is not implemented with triangle factors: use backward='unroll'")
        if max_triangles_per_node is not None and max_triangles_per_node < 1:
            raise ValueError(f"max_triangles_per_node must be positive (or None), got {max_triangles_per_node}")
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.potential = potential
        self.potential_options = dict(potential_options or {})
        self.encoder = build_encoder(potential, in_channels, num_classes, hidden_channels, num_hidden, dropout,
                                     precision, **self.potential_options)
        self.motifs, self.max_triangles_per_node, self.triangle_seed = motifs, max_triangles_per_node, triangle_seed
        if motifs == "triangle":
            self.bp = MotifBeliefPropagation(num_classes, num_steps, damping, tol, learn_coupling, coupling_init,
                                             triangle_form=triangle_form, backward=backward)
        else:
            self.bp = BeliefPropagation(num_classes, num_steps, damping, tol, learn_coupling, coupling_init,
                                        backward=backward, max_steps=max_steps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.encoder.reset_parameters()
        self.bp.reset_parameters()

    @property
    def H(self) -> Tensor:
        """The learned coupling matrix ``[c, c]`` (detached)."""
        return self.bp.H

    @property
    def log_H(self) -> Tensor:
        return self.bp.log_H

    def triangles_of(self, edge_index: Tensor, num_nodes: int) -> Optional[Tensor]:
        """The triangles ``[3, T]`` this model puts its triangle factor on (capped and seeded as
        constructed; the same graph gives the same triangles), or ``None`` for a pairwise model.
        Compute them once per graph and pass them to :meth:`forward`."""
        if self.motifs != "triangle":
            return None
        return enumerate_triangles(to_edge_index(edge_index)[0], num_nodes, max_per_node=self.max_triangles_per_node,
                                   seed=self.triangle_seed)

    def precompute(self, x: Tensor, edge_index: Tensor):
        """What the encoder reads for this graph, computed once: ``x`` itself for the MLP,
        the propagated features for ``sign``, ``x`` with a CSR adjacency for the GNNs. Pass
        it as ``x`` to :meth:`forward` and :meth:`self_potential` to skip the work per call."""
        edge_index = to_edge_index(edge_index)[0]
        check_node_ids(edge_index, x.size(0))
        return self.encoder.precompute(x, edge_index)

    def self_potential(self, x, edge_index: Optional[Tensor] = None, node_chunk: Optional[int] = None) -> Tensor:
        """Normalised log self-potentials ``[N, c]``: the encoder's output (from each node's own
        features for the MLP; from its neighbourhood as well for the graph encoders).
        ``node_chunk``: computed that many nodes at a time, from each node's own row of ``x`` (a graph
        encoder's input, :class:`~gbpn.models.encoders.GraphInput`, is computed on the whole graph)."""
        if node_chunk is not None and not isinstance(x, GraphInput):
            rows = lambda i: torch.arange(i, min(i + node_chunk, x.size(0)), device=x.device)  # noqa: E731
            return torch.cat([self.self_potential(x.index_select(0, rows(i))) for i in range(0, x.size(0), node_chunk)])
        edge_index = None if edge_index is None else to_edge_index(edge_index)[0]
        check_not_meta(x=x, edge_index=edge_index)
        if isinstance(x, Tensor):  # raw features (what precompute() returns for a graph encoder is its own)
            self._check_features(x)
        if edge_index is not None and isinstance(x, Tensor):  # raw features (a precompute()d input was checked)
            check_node_ids(edge_index, x.size(0))
        return F.log_softmax(self.encoder(x, edge_index), dim=-1)

    def _check_features(self, x: Tensor) -> None:
        """Refuse features the encoder's first layer would fail on inside torch ("mat1 and mat2 ..."), naming
        the tensor, what it is and what this model expects."""
        want = f"[N, {self.in_channels}]"
        if x.dim() != 2:
            hint = "; x.unsqueeze(-1) makes one feature per node a column" if x.dim() == 1 and \
                self.in_channels == 1 else ""
            raise ModelInputError(f"x must be a {want} feature tensor (in_channels={self.in_channels}), got shape "
                                  f"{tuple(x.shape)}{hint}")
        if x.size(1) != self.in_channels:
            raise ModelInputError(f"x has {x.size(1)} features per node (shape {tuple(x.shape)}), but this model was "
                                  f"built with in_channels={self.in_channels}")
        dtype = next((q.dtype for q in self.encoder.parameters() if q.is_floating_point()), None)
        if x.is_complex() or x.dtype == torch.bool or (x.is_floating_point() and dtype is not None
                                                       and x.dtype != dtype):
            raise ModelInputError(f"x is {x.dtype}, but this model's parameters are {dtype}: pass x.to({dtype}), or "
                                  f"convert the model (.to({x.dtype}))" if x.is_floating_point() else
                                  f"x is {x.dtype}: features must be real numbers ({dtype})")

    def forward(self, x, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                **options: Unpack[BPOptions]) -> Union[Tensor, Tuple[Tensor, ...]]:
        """The log-beliefs of BP from the encoder's self-potentials; ``options`` are those of the BP layer
        (:class:`~gbpn.bp.problem.BPOptions`; ``triangles`` for a triangle model, from :meth:`triangles_of`,
        enumerated per call when not given)."""
        # an EdgeIndex or a torch.sparse adjacency becomes edge_index (+ weights) once, for encoder and BP
        edge_index, edge_weight = to_edge_index(edge_index, edge_weight)
        log_self = self.self_potential(x, edge_index)
        if self.motifs == "triangle":
            triangles = options.pop("triangles", None)
            if triangles is None:
                triangles = self.triangles_of(edge_index, log_self.size(0))
            return self.bp(log_self, edge_index, triangles, edge_weight=edge_weight, **options)
        return self.bp(log_self, edge_index, edge_weight, **options)

    @torch.no_grad()
    def infer(self, log_self: Tensor, data, known_mask: Optional[Tensor] = None, *, num_steps: Optional[int] = None,
              edge_chunk: Optional[int] = None, message_dtype: Optional[torch.dtype] = None,
              triangles: Optional[Tensor] = None) -> Tensor:
        """Inference BP from the self-potentials ``log_self`` ``[N, c]`` on the graph ``data`` (a PyG ``Data``:
        ``edge_index`` and, if present, ``rev_index``, ``edge_weight``, ``pairs``; ``y`` holds the labels of
        the nodes in ``known_mask``). ``message_dtype`` runs the in-place pair inference
        (:meth:`~gbpn.bp.layer.BeliefPropagation.infer_pairs`, chunks of ``edge_chunk`` pairs), otherwise
        ``edge_chunk`` bounds the messages' temporaries; a triangle model runs on ``triangles`` (default:
        :meth:`triangles_of` the graph). Returns the log-beliefs ``[N, c]``."""
        known_labels = data.y if known_mask is not None else None
        if self.motifs == "triangle":
            if message_dtype is not None or edge_chunk is not None:
                raise GBPNError("a triangle model's BP runs on the whole graph in float32: leave out the edge chunks "
                                "and half-precision messages")
            if triangles is None:
                triangles = self.triangles_of(data.edge_index, data.num_nodes)
            return self.bp(log_self, data.edge_index, triangles.to(log_self.device),
                           rev_index=getattr(data, "rev_index", None), edge_weight=getattr(data, "edge_weight", None),
                           known_labels=known_labels, known_mask=known_mask, num_steps=num_steps)
        if message_dtype is not None:
            if getattr(data, "edge_weight", None) is not None:
                raise GBPNError("low-precision pair inference does not support edge weights")
            pairs = getattr(data, "pairs", None)
            if pairs is None:
                pairs = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
            return self.bp.infer_pairs(log_self, pairs, known_labels, known_mask, num_steps=num_steps,
                                       pair_chunk=edge_chunk or 1 << 20, message_dtype=message_dtype)
        return self.bp(log_self, data.edge_index, rev_index=getattr(data, "rev_index", None),
                       edge_weight=getattr(data, "edge_weight", None), known_labels=known_labels,
                       known_mask=known_mask, num_steps=num_steps, edge_chunk=edge_chunk)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(encoder={self.encoder!r}, bp={self.bp!r})"
