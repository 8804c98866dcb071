"""The encoder registry: one table of the potential encoders, what builds each and which options it takes.

Adding an encoder touches its own module (the ``nn.Module``, a ``build`` function and, where a user sets
options, their dataclass) and :data:`SPECS` here. The training config (:class:`EncoderConfig`, one
field per options dataclass), the ``gbpn train`` flags, ``--potential``'s choices and help, and the
checks of options given for another encoder all follow from the table.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence, Tuple

from gbpn.errors import GBPNError
from gbpn.models.encoders.options import BlockOptions, GNNOptions, SignOptions, check_sage

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class EncoderSpec:
    """One encoder of the table.

    Attributes:
        name: its ``--potential`` name.
        build: ``"module:function"`` of ``build(in_channels, num_classes, hidden_channels, num_hidden, dropout,
            precision, **options)``, imported when an encoder is built (the table itself loads without
            PyTorch, for the command line's parser).
        summary: how ``--potential``'s help describes it (encoders that share one are listed together).
        options: the dataclass of the options a user sets (flags of ``gbpn train``, a part of
            ``config.json``), or ``None``; encoders that take the same options share one.
        group: the :class:`EncoderConfig` field holding ``options`` (shared options: one field).
        separate: takes ``separate`` (ego and neighbour channels apart), the encoder config's own.
        accepts: every keyword ``build`` takes (``options``'s fields, ``separate``, library-only ones).
        mini_batch: trains on sampled trees (its potential of a node depends on that node's inputs only).
        precisions: the ``precision`` values it implements.
        check: ``check(separate)`` refuses a ``separate`` this encoder cannot train with (before anything runs).
        node_count: takes the graph's number of nodes (``num_nodes``: a weight per node), so that a model is tied
            to the graph it trained on (:func:`graph_options`).
        own_features: a node's potential reads that node's features alone, with no precomputation over the graph,
            so partitioned inference computes it part by part (:func:`reads_own_features`).
    """

    name: str
    build: str
    summary: str
    options: Optional[type] = None
    group: str = ""
    separate: bool = False
    accepts: frozenset = frozenset()
    mini_batch: bool = False
    precisions: Tuple[str, ...] = ("fp32",)
    check: Optional[Callable[[bool], None]] = None
    node_count: bool = False
    own_features: bool = False


_GNN = "gcn/sage/gat (PyG layers, full batch only)"
_GNN_ACCEPTS = frozenset({"num_layers", "residual", "layer_norm", "batch_norm", "separate", "heads"})
_CLASSIC = ("classic-gcn, classic-sage, classic-gat (deep GNNs with a linear skip, BatchNorm or LayerNorm after "
            "each convolution, Luo et al. 2024; full batch)")
_BLOCKS = ("resnet, res-gcn, res-sage, res-gat, res-gat-sep, res-gt, res-gt-sep (pre-normalised residual blocks "
           "around a graph aggregation, Platonov et al. 2023; full batch)")
# the residual-block encoders, named after their aggregation (resnet: none)
BLOCK_ENCODERS = ("resnet", "res-gcn", "res-sage", "res-gat", "res-gat-sep", "res-gt", "res-gt-sep")
SPECS: Tuple[EncoderSpec, ...] = (
    EncoderSpec("mlp", "mlp:build", "mlp (the paper's, own features only)", mini_batch=True,
                precisions=("fp32", "bf16"), own_features=True),
    EncoderSpec("sign", "sign:build", "sign (precomputed neighbourhood features [x, Ax, A^2x])", SignOptions,
                "sign", separate=True, accepts=frozenset({"hops", "separate"}), mini_batch=True),
    EncoderSpec("gcn", "gnn:build_gcn", _GNN, GNNOptions, "gnn", separate=True, accepts=_GNN_ACCEPTS),
    EncoderSpec("sage", "gnn:build_sage", _GNN, GNNOptions, "gnn", separate=True, accepts=_GNN_ACCEPTS,
                check=check_sage),
    EncoderSpec("gat", "gnn:build_gat", _GNN, GNNOptions, "gnn", separate=True, accepts=_GNN_ACCEPTS),
    *(EncoderSpec(f"classic-{conv}", f"classic:build_classic_{conv}", _CLASSIC, GNNOptions, "gnn",
                  accepts=_GNN_ACCEPTS - {"separate"}) for conv in ("gcn", "sage", "gat")),
    *(EncoderSpec(name, f"residual:build_{name.replace('-', '_')}", _BLOCKS, BlockOptions, "block",
                  accepts=frozenset({"blocks", "heads", "ffn_multiplier"})) for name in BLOCK_ENCODERS),
    EncoderSpec("dagnn", "dagnn:build", "dagnn (an MLP's outputs propagated 10 hops with learned retention; full "
                "batch)", accepts=frozenset({"K"})),
    EncoderSpec("linkx", "linkx:build", "linkx (a node's features and adjacency row mapped apart; full batch, tied "
                "to the training graph)", accepts=frozenset({"num_nodes"}), node_count=True),
)
_BY_NAME: Dict[str, EncoderSpec] = {s.name: s for s in SPECS}
ENCODERS: Tuple[str, ...] = tuple(_BY_NAME)

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


def spec(potential: str) -> Optional[EncoderSpec]:
    """The table's entry of ``potential``, or ``None`` (``"auto"``, or a name it does not hold)."""
    return _BY_NAME.get(potential)


def build_encoder(potential: str, in_channels: int, num_classes: int, hidden_channels: int = 256,
                  num_hidden: int = 2, dropout: float = 0.0, precision: str = "fp32",
                  **options) -> nn.Module:
    """The encoder named ``potential`` (one of :data:`ENCODERS`). ``options``: ``hops`` and
    ``separate`` for ``sign``; ``num_layers``, ``residual``, ``layer_norm``, ``separate`` and
    ``heads`` for the GNNs; ``K`` for ``dagnn``; ``num_nodes`` for ``linkx``. ``num_hidden`` is the
    MLP's, SIGN's and LINKX's depth (DAGNN's MLP has one hidden layer, as in its paper)."""
    check_precision(potential, precision)
    entry = spec(potential)
    if entry is None:
        raise GBPNError(f"unknown potential {potential!r}; choose one of {', '.join(ENCODERS)} or auto")
    if options and not entry.accepts:
        raise GBPNError(f"the {potential} potential takes no options, got {sorted(options)}")
    if set(options) - entry.accepts:
        raise GBPNError(f"the {potential} potential takes {', '.join(sorted(entry.accepts))}; got "
                        f"{', '.join(sorted(set(options) - entry.accepts))}")
    module, function = entry.build.split(":")
    build = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    return build(in_channels, num_classes, hidden_channels, num_hidden, dropout, precision, **options)


def check_precision(potential: str, precision: str) -> None:
    """Refuse a ``precision`` the ``potential`` encoder does not implement (``auto``: float32 only)."""
    entry = spec(potential)
    if precision not in (entry.precisions if entry else ("fp32",)):
        users = [s.name for s in SPECS if precision in s.precisions] or ["mlp"]
        raise GBPNError(f"--precision {precision} is implemented for the {', '.join(users)} potential only")


def graph_options(potential: str, num_nodes: Optional[int]) -> Dict:
    """The ``build_encoder`` options of ``potential`` that come from the graph, not the config: ``num_nodes`` for an
    encoder with a weight per node (:attr:`EncoderSpec.node_count`)."""
    entry = spec(potential)
    if entry is None or not entry.node_count:
        return {}
    if num_nodes is None:
        raise GBPNError(f"the {potential} potential needs the graph's number of nodes")
    return {"num_nodes": num_nodes}


def reads_own_features(potential: str) -> bool:
    """Whether a node's ``potential`` reads that node's features alone (:attr:`EncoderSpec.own_features`)."""
    entry = spec(potential)
    return entry is not None and entry.own_features


def _groups() -> Dict[str, type]:
    """Options field -> dataclass, in table order (an options class shared by encoders, once)."""
    out: Dict[str, type] = {}
    for s in SPECS:
        if s.options is not None:
            out.setdefault(s.group, s.options)
    return out


def _auto_help() -> str:
    names = [c["potential"] + ("" if c.get("separate", True) else " --no-separate") for c in AUTO_CANDIDATES]
    return ", ".join(names[:-1]) + " and " + names[-1]


_POTENTIAL_HELP = ("encoder of the self-potential: " + ", ".join(dict.fromkeys(s.summary for s in SPECS))
                   + f", or auto (train {_auto_help()}; keep the best on validation) (default: mlp)")

EncoderConfig = make_dataclass(
    "EncoderConfig",
    [("potential", str, field(default="mlp", metadata={"help": _POTENTIAL_HELP, "choices": (*ENCODERS, "auto")})),
     ("separate", bool, field(default=True, metadata={
         "help": "sign/gcn/gat: mix a node's own channel into its neighbourhood (GCN-style self-loops) instead of "
                 "keeping it apart"}))]
    + [(group, cls, field(default_factory=cls)) for group, cls in _groups().items()],
)
EncoderConfig.__module__ = __name__
EncoderConfig.__doc__ = (
    """The self-potential's encoder: ``potential`` (one of :data:`ENCODERS`, or ``"auto"``: each of
    :data:`AUTO_CANDIDATES` trained, the best on validation kept), ``separate`` (ego and neighbour
    channels apart, for the encoders that take it) and one field per options dataclass of the table
    (``sign``: :class:`~gbpn.models.encoders.sign.SignOptions`, ``gnn``:
    :class:`~gbpn.models.encoders.gnn.GNNOptions`), each encoder's options kept whichever one
    ``potential`` names (``auto`` trains several).""")


def encoder_options(config, potential: Optional[str] = None) -> Dict:
    """The ``build_encoder`` options of ``potential`` (default: ``config.potential``) from an
    :class:`EncoderConfig`: its options dataclass's fields, then ``separate`` where it takes it."""
    entry = spec(potential or config.potential)
    if entry is None:
        return {}
    out = asdict(getattr(config, entry.group)) if entry.options is not None else {}
    if entry.separate:
        out["separate"] = config.separate
    return out


def option_users() -> Dict[str, Tuple[str, ...]]:
    """Options field of :class:`EncoderConfig` -> the encoders that read it (``gnn``: gcn, sage, gat)."""
    return {group: tuple(s.name for s in SPECS if s.group == group) for group in _groups()}


def validate_encoder(config, mini_batch: bool) -> None:
    """Refuse an :class:`EncoderConfig` that cannot train (``mini_batch``: on sampled trees), naming why."""
    if config.potential not in ENCODERS + ("auto",):
        raise GBPNError(f"unknown potential {config.potential!r}; choose one of {', '.join(ENCODERS)} or auto")
    for group in _groups():
        getattr(config, group).validate()
    entry = spec(config.potential)
    if entry is not None and not entry.mini_batch and mini_batch:
        raise GBPNError(f"the {config.potential} potential reads the whole graph at every step and trains full "
                        "batch only: drop --batch-size, or use --potential sign (precomputed neighbourhood "
                        "features) or mlp for mini-batch training")
    if entry is not None and entry.check is not None:
        entry.check(config.separate)
