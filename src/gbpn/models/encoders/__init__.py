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

One module per encoder; :mod:`~gbpn.models.encoders.registry` holds the table (its builder, its
options dataclass, whether it trains on sampled trees) that ``build_encoder``, the training config
and the ``gbpn train`` flags read. Encoders take ``(inputs, edge_index)`` where ``inputs`` is what :meth:`precompute` returned
for the graph (raw features for the MLP; :class:`Propagated` hops for SIGN; raw features and
a CSR adjacency for the GNNs). Raw features are accepted too and are then propagated on the
fly.
"""

from gbpn.lazy import lazy_exports
from gbpn.models.encoders.options import GNNOptions, SignOptions
from gbpn.models.encoders.registry import (
    AUTO_CANDIDATES,
    ENCODERS,
    EncoderConfig,
    EncoderSpec,
    build_encoder,
    encoder_options,
    spec,
)

# the encoders themselves (and PyTorch, PyG with them) load on first use: the registry and the
# options are what the training config and the command line's parser read
_LAZY = {"GraphInput": ".base", "DAGNNEncoder": ".dagnn", "GNNEncoder": ".gnn", "LINKXEncoder": ".linkx",
         "MLPEncoder": ".mlp", "Propagated": ".sign", "SIGNEncoder": ".sign", "propagate_features": ".sign",
         "propagation_matrix": ".sign"}

__all__ = ["AUTO_CANDIDATES", "ENCODERS", "DAGNNEncoder", "EncoderConfig", "EncoderSpec", "GNNEncoder", "GNNOptions",
           "GraphInput", "LINKXEncoder", "MLPEncoder", "Propagated", "SIGNEncoder", "SignOptions", "build_encoder",
           "encoder_options", "propagate_features", "propagation_matrix", "spec"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
