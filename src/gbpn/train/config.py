"""Hyper-parameters of a GBPN training run, in parts, with their checks and the device they run on.

:class:`TrainConfig` holds five parts and the device: ``model`` (the GBPN and its BP,
:class:`ModelConfig`), ``encoder`` (the self-potential's encoder and each encoder's options,
:class:`~gbpn.models.encoders.EncoderConfig`, from the encoder registry), ``optim`` (the objective
and its optimiser, :class:`OptimConfig`), ``sampling`` (mini-batches of sampled trees,
:class:`SamplingConfig`) and ``evaluation`` (split, selection metric, evaluation memory,
:class:`EvaluationConfig`). Every field carries its help text (and, where it is not the field's
name, its ``gbpn train`` flag) in its metadata: the command line is generated from them.

Each option also has a flat name, unique across the parts (the field's name, or its metadata's
``"flat"``: ``potential_hops`` is ``encoder.sign.hops``). They are the names of older versions'
flat config (``config.json`` files written before the parts, read by :meth:`TrainConfig.from_dict`),
of ``TrainConfig(epochs=3, potential="sign")`` and ``dataclasses.replace(config, lr=1e-2)``, and
of read/write attributes (``config.epochs`` is ``config.optim.epochs``).
"""
from __future__ import annotations

import copy
import math
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Dict, Iterator, Optional, Sequence, Tuple

from gbpn.errors import GBPNError
from gbpn.models.encoders import EncoderConfig, encoder_options
from gbpn.models.encoders.registry import check_precision, validate_encoder
from gbpn.train.metrics import METRICS

if TYPE_CHECKING:
    import torch

VARIANTS = ("gbpn", "gbpn-i")
# The most full trainings a --budget may count: a thousand runs of the configuration kept is days of work on
# any graph, and the search draws about 40 configurations per run counted (gbpn.train.search), so a budget of
# 1e9 would draw for ever.
MAX_BUDGET = 1000


def check_budget(budget, flag: str = "--budget") -> None:
    """Refuse a search budget that is not a number of full trainings from 1 to :data:`MAX_BUDGET` (NaN and
    inf included), naming ``flag``."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 1 <= budget <= MAX_BUDGET:
        raise GBPNError(f"{flag} counts full trainings of a search: from 1 (the chosen configuration's own) to "
                        f"{MAX_BUDGET}, got {budget}")


def check_space(space: Dict[str, Sequence], known: Sequence[str]) -> None:
    """Refuse a search space with an option ``known`` does not hold or no choices, naming it."""
    if not isinstance(space, dict) or not space:
        raise GBPNError(f"the search space must be a JSON object of option -> list of choices, got {space!r}")
    for name, choices in space.items():
        if name not in known:
            raise GBPNError(f"the search space sets {name!r}, which is not an option here ({', '.join(known)})")
        if not isinstance(choices, list) or not choices:
            raise GBPNError(f"the search space's {name} must be a non-empty list of choices, got {choices!r}")


def default_dropout(num_features: int, num_train: int) -> float:
    """MLP dropout by the paper's rule (appendix A.2): by the feature count relative to the training nodes.

    0.6 where features are many per training node, 0.3 in between, 0.1 where they are few.
    The two thresholds on ``num_features / num_train`` (1.5 and 0.05) put the paper's data sets
    where the appendix puts them under its 30/20/50 split: Cora (1.76) and CiteSeer (3.7) at 0.6;
    CS (1.24), Physics (0.81) and PubMed (0.085) at 0.3; Elliptic (0.012), Election, Sexual, the
    grids and OGB (0.001) at 0.1.
    """
    ratio = num_features / max(num_train, 1)
    return 0.6 if ratio > 1.5 else 0.3 if ratio > 0.05 else 0.1


def option(default, help: str, **meta):
    """A config field with its command-line description in the metadata: ``help``; optionally ``flag``
    (the long flag, default ``--name``; ``--no-name`` for a switch that defaults to on), ``short``,
    ``metavar``, ``choices``, ``least`` (a whole number at least this, checked as the command is
    parsed), ``flat`` (the flat name, default the field's) and ``cli=False`` (no flag)."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class ModelConfig:
    """The GBPN and its BP."""

    variant: str = option("gbpn", "gbpn: transductive, conditions on training labels; gbpn-i: inductive, features "
                                  "only (default: gbpn)", choices=VARIANTS)
    num_steps: int = option(5, "BP steps K (default: 5)", flag="--steps", short="-K", metavar="K")
    hidden: int = option(256, "encoder hidden units (default: 256)")
    num_hidden: int = option(2, "hidden layers of the mlp potential: 2 is F-256-256-c, 1 is F-256-c (default: 2)",
                             flag="--mlp-layers", metavar="L")
    dropout: Optional[float] = option(None, "encoder dropout (default: the paper's rule by features per training "
                                            "node: 0.6 above 1.5, 0.3 above 0.05, else 0.1; config.json records the "
                                            "value used)")  # None: the appendix's rule, see default_dropout
    damping: float = option(0.0, "BP message damping in [0, 1) (default: 0)")
    backward: str = option("unroll", "unroll: back-propagate through the K steps; implicit: run BP to convergence "
                                     "and differentiate its fixed point (memory of one step; --tol, --max-steps) "
                                     "(default: unroll)", choices=("unroll", "implicit"))  # see gbpn.bp.implicit
    tol: float = option(1e-4, "implicit: stop BP once no belief changes by more than this in a step (default: "
                              "1e-4)")
    max_steps: int = option(100, "implicit: most BP steps per pass (default: 100)")  # num_steps is then the tree depth
    learn_coupling: bool = option(True, "learn the coupling H (off: it stays at its initial value)", cli=False)
    coupling_init: str = option("uniform", "uniform (H = 1) or empirical (label co-occurrence on training edges)",
                                cli=False)
    precision: str = option("fp32", "MLP hidden layers in float32 or bfloat16 (BP is always float32; default: fp32)",
                            choices=("fp32", "bf16"))
    motifs: str = option("none", "none: pairwise factors only (the paper's model); triangle: also a learned triangle "
                                 "factor T on every triangle of the graph (full batch, unrolled; default: none)",
                         choices=("none", "triangle"))  # see gbpn.bp.motifs
    max_triangles_per_node: Optional[int] = option(None, "--motifs triangle: each node in at most this many "
                                                         "triangles, sampled with the trial's seed (default: all)",
                                                   least=1)


@dataclass
class OptimConfig:
    """The objective and its optimiser (AdamW), with the number of epochs and early stopping."""

    epochs: int = option(500, "full-batch training steps (default: 500)")
    patience: Optional[int] = option(None, "stop after this many epochs without a better validation score (of "
                                           "--metric; default: run all epochs)")
    lr: float = option(1e-3, "AdamW learning rate (default: 1e-3)")
    coupling_lr: Optional[float] = option(1e-2, "learning rate of the coupling H (default: 1e-2)")  # None: lr
    weight_decay: float = option(2.5e-4, "AdamW weight decay (default: 2.5e-4)")
    degree_weight: bool = option(True, "plain NLL instead of the d^-1/2 re-weighted one")
    warmup: float = option(0.0, "fraction of epochs trained without BP first (default: 0)")  # K = 0: the MLP only
    class_weight: bool = option(False, "weight the loss by inverse class frequency")
    budget: Optional[float] = option(None, "--potential auto: search encoders, depth, width, dropout, learning "
                                           "rates and K by successive halving within this many plain runs of the "
                                           "configuration kept, at counted costs per epoch (a run counts --epochs, "
                                           "or 2 x --patience where fewer), e.g. 2 (default: train each candidate "
                                           "encoder in full)", metavar="B")
    search_space: Optional[dict] = option(None, "the options --budget searches and their choices (default: "
                                                "gbpn.train.search.GBPN_SPACE; config.json records it)", cli=False)


@dataclass
class SamplingConfig:
    """Mini-batch training on sampled computation trees (paper 3.3, appendix B)."""

    batch_size: Optional[int] = option(None, "mini-batch training on sampled computation trees with this many "
                                             "targets per step (default: full batch)")
    fanout: Optional[int] = option(5, "mini-batch: neighbours kept per tree node (default: 5)")  # None: all
    num_hops: Optional[int] = option(None, "mini-batch: tree depth (default: --steps)", flag="--hops", metavar="HOPS")
    sampler: str = option("uniform", "mini-batch: how tree neighbours are drawn; exp3 learns importance-sampling "
                                     "distributions online (paper appendix B) (default: uniform)",
                          choices=("uniform", "exp3"))
    exp3_gamma: float = option(0.05, "share of uniform exploration in exp3 (default: 0.05)")


@dataclass
class EvaluationConfig:
    """The split, the metric that selects epochs and candidates (and is reported), and evaluation memory."""

    metric: str = option("auto", "model selection on validation (epochs, --potential auto) and the reported score; "
                                 "auto: roc_auc for binary labels with a minority class under 30% (of trial 0's "
                                 "training and validation labels), accuracy otherwise (default: auto)",
                         choices=("auto", *METRICS))
    train_frac: float = option(0.3, "fraction of nodes in the training split", cli=False)
    val_frac: float = option(0.2, "fraction of nodes in the validation split", cli=False)
    edge_chunk: Optional[int] = option(None, "evaluate BP this many edges at a time (bounded memory on large graphs)",
                                       least=1)


# torch and NumPy read seeds modulo 2^32: a seed (with every trial's, seed + trial) must stay below
MAX_SEED = 2**32 - 1
# a count beyond this is a typo, not a request (and overflows the int32 of numba's and NumPy's indices)
MAX_COUNT = 2**31 - 1

PARTS = {"model": ModelConfig, "encoder": EncoderConfig, "optim": OptimConfig, "sampling": SamplingConfig,
         "evaluation": EvaluationConfig}


def _leaves(cls, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], object, type]]:
    """``(path, field, owner)`` of every option under the dataclass ``cls``, options dataclasses opened."""
    for f in fields(cls):
        if f.default_factory is not MISSING and is_dataclass(f.default_factory):
            yield from _leaves(f.default_factory, path + (f.name,))
        else:
            yield path + (f.name,), f, cls


@dataclass(init=False)
class TrainConfig:
    """Hyper-parameters of one training run; the defaults are the paper's protocol.

    ``TrainConfig(model=..., encoder=..., ...)`` takes parts, and any option by its flat name on top:
    ``TrainConfig(epochs=40, hidden=32)``.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    device: str = option("cpu", "cpu, cuda, cuda:N or auto (CUDA when available; default: cpu)")

    def __init__(self, model: Optional[ModelConfig] = None, encoder: Optional[EncoderConfig] = None,
                 optim: Optional[OptimConfig] = None, sampling: Optional[SamplingConfig] = None,
                 evaluation: Optional[EvaluationConfig] = None, device: str = "cpu", **options):
        given = {"model": model, "encoder": encoder, "optim": optim, "sampling": sampling, "evaluation": evaluation}
        for name, cls in PARTS.items():  # a copy: replace() must not share a part with the config it came from
            setattr(self, name, cls() if given[name] is None else copy.deepcopy(given[name]))
        self.device = device
        unknown = sorted(set(options) - set(FLAT))
        if unknown:
            raise TypeError(f"TrainConfig got unknown options: {', '.join(unknown)}")
        for name, value in options.items():
            setattr(self, name, value)

    def validate(self) -> None:
        """Raise :class:`GBPNError` naming the first option out of its range (NaN included)."""
        m, o, s, e = self.model, self.optim, self.sampling, self.evaluation

        def positive(name: str, value, allow_none: bool = False) -> None:
            if not (value is None and allow_none) and not (isinstance(value, (int, float)) and value > 0
                                                           and math.isfinite(value)):
                raise GBPNError(f"{_option(name)} must be a positive number, got {value}")

        positive("lr", o.lr)
        positive("coupling_lr", o.coupling_lr, allow_none=True)
        for name, value in (("num_hidden", m.num_hidden), ("edge_chunk", e.edge_chunk), ("fanout", s.fanout),
                            ("num_hops", s.num_hops)):
            if value is not None and (not isinstance(value, int) or value < (0 if name == "num_hidden" else 1)):
                raise GBPNError(f"{_option(name)} must be a {'non-negative' if name == 'num_hidden' else 'positive'} "
                                f"whole number, got {value}")
        if not (o.weight_decay >= 0 and math.isfinite(o.weight_decay)):
            raise GBPNError(f"{_option('weight_decay')} must be a finite number >= 0, got {o.weight_decay}")
        if not 0 <= m.damping < 1:
            raise GBPNError(f"{_option('damping')} must be in [0, 1), got {m.damping}")
        if not (0 < e.train_frac < 1 and 0 <= e.val_frac < 1 and e.train_frac + e.val_frac < 1):
            raise GBPNError(f"train_frac and val_frac must be fractions that leave test nodes, got "
                            f"{e.train_frac} and {e.val_frac}")
        if m.variant not in VARIANTS:
            raise GBPNError(f"unknown variant {m.variant!r}; choose one of {', '.join(VARIANTS)}")
        for name, value, least in (("epochs", o.epochs, 1), ("num_steps", m.num_steps, 0), ("hidden", m.hidden, 1)):
            if not isinstance(value, int) or value < least:
                raise GBPNError(f"{_option(name)} must be a whole number >= {least}, got {value}")
        if self.device not in ("cpu", "auto"):  # those two need no check (nor PyTorch loaded to make one)
            resolve_device(self.device)
        if o.patience is not None and o.patience < 1:
            raise GBPNError(f"{_option('patience')} must be a positive number of epochs, got {o.patience}")
        if m.dropout is not None and not 0 <= m.dropout < 1:
            raise GBPNError(f"{_option('dropout')} must be in [0, 1), got {m.dropout}")
        if m.precision not in ("fp32", "bf16"):
            raise GBPNError(f"{_option('precision')} must be 'fp32' or 'bf16', got {m.precision!r}")
        if m.coupling_init not in ("uniform", "empirical"):
            raise GBPNError(f"coupling_init must be 'uniform' or 'empirical', got {m.coupling_init!r}")
        if s.batch_size is not None and s.batch_size < 1:
            raise GBPNError(f"{_option('batch_size')} must be positive, got {s.batch_size}")
        if s.sampler not in ("uniform", "exp3"):
            raise GBPNError(f"sampler must be 'uniform' or 'exp3', got {s.sampler!r}")
        if s.sampler == "exp3" and (s.batch_size is None or s.fanout is None):
            raise GBPNError("--sampler exp3 samples tree neighbours: it needs --batch-size and a --fanout")
        if not 0 <= s.exp3_gamma <= 1:
            raise GBPNError(f"{_option('exp3_gamma')} must be in [0, 1], got {s.exp3_gamma}")
        if m.backward not in ("unroll", "implicit"):
            raise GBPNError(f"backward must be 'unroll' or 'implicit', got {m.backward!r}")
        if m.backward == "implicit" and (not m.tol > 0 or m.max_steps < 1):
            raise GBPNError(f"implicit BP needs --tol > 0 and --max-steps >= 1, got {m.tol} and {m.max_steps}")
        if m.motifs not in ("none", "triangle"):
            raise GBPNError(f"{_option('motifs')} must be 'none' or 'triangle', got {m.motifs!r}")
        if m.max_triangles_per_node is not None and not 1 <= m.max_triangles_per_node <= MAX_COUNT:
            raise GBPNError(f"{_option('max_triangles_per_node')} must lie in 1..{MAX_COUNT}, got "
                            f"{m.max_triangles_per_node}")
        if m.motifs == "triangle":
            # a sampled computation tree has no triangles; the implicit backward and edge chunks are pairwise kernels'
            for name, on, why in (
                    ("batch_size", s.batch_size is not None, "sampled computation trees hold no triangles; train full "
                                                             "batch"),
                    ("backward", m.backward == "implicit", "triangle BP is unrolled; use --backward unroll"),
                    ("edge_chunk", e.edge_chunk is not None, "triangle BP runs on the whole graph; leave it out")):
                if on:
                    raise GBPNError(f"--motifs triangle does not run with {_option(name)}: {why}")
        if not 0 <= o.warmup <= 1:
            raise GBPNError(f"{_option('warmup')} is a fraction of epochs in [0, 1], got {o.warmup}")
        validate_encoder(self.encoder, mini_batch=s.batch_size is not None)
        if o.budget is not None and self.encoder.potential != "auto":
            raise GBPNError(f"{_option('budget')} counts full trainings (at least 1) of a --potential auto search, got "
                            f"{o.budget} with --potential {self.encoder.potential}")
        if o.budget is not None:
            check_budget(o.budget, _option("budget"))
        if o.search_space is not None:
            self._check_search_space(o.search_space)
        check_precision(self.encoder.potential, m.precision)
        if e.metric not in METRICS + ("auto",):
            raise GBPNError(f"unknown metric {e.metric!r}; choose one of {', '.join(METRICS)} or auto")

    def _check_search_space(self, space) -> None:
        """Refuse a search space (``config.json``'s ``search_space``) whose options or choices the flags would
        refuse, by the same checks, before anything runs: each choice is validated as this config with it."""
        from gbpn.models.encoders.registry import ENCODERS

        if isinstance(space, dict):  # tuples of choices are lists to the search (gbpn.train.auto.search_space)
            space = {k: list(v) if isinstance(v, tuple) else v for k, v in space.items()}
        check_space(space, list(FLAT))
        for name, choices in space.items():
            for value in choices:
                if name == "potential":  # the encoders to try; which train on sampled trees is the search's choice
                    if value not in ENCODERS:
                        raise GBPNError(f"the search space's potential lists {value!r}, which is not an encoder; "
                                        f"choose from {', '.join(ENCODERS)}")
                    continue
                if name == "num_steps" and value == 0:  # K = 0 trains the encoder alone: no GBPN to compare
                    raise GBPNError("the search space's num_steps lists 0 (no BP steps, the encoder alone); a "
                                    "search of GBPNs needs K >= 1")
                try:
                    replace(self, **{name: value}, budget=None, search_space=None).validate()
                except GBPNError as err:
                    raise GBPNError(f"the search space's {name} lists {value!r}: {err}") from None
                except TypeError as err:  # a choice of a type no check expected ("1" for a count)
                    raise GBPNError(f"the search space's {name} lists {value!r}, not a value of {name}: {err}") \
                        from None

    def potential_options(self, potential: Optional[str] = None) -> Dict:
        """The encoder options of ``potential`` (default: this config's), as ``build_encoder`` takes them."""
        return encoder_options(self.encoder, potential)

    def to_dict(self) -> Dict:
        """The parts as nested dicts (``config.json``'s ``"train"``)."""
        return asdict(self)

    def flat_dict(self) -> Dict:
        """Every option by its flat name (the form of older versions' ``config.json``)."""
        return {name: getattr(self, name) for name in FLAT}

    @classmethod
    def from_dict(cls, values: Dict, where: str = "the config") -> "TrainConfig":
        """A config from :meth:`to_dict`'s output (a recorded ``config.json``), each value checked
        against its field's type: a :class:`GBPNError` names the first that is not (``"5"`` for a
        count, ``"no"`` for a switch), rather than training with it. Fields it lacks take their
        defaults (a config written by an older version).

        Older versions wrote every option at the top level under its flat name (``{"epochs": 500,
        "potential_hops": 2, ...}``): such keys are read too, alone or beside the parts, and are
        mapped to the part that holds them now."""
        if not isinstance(values, dict):
            raise GBPNError(f"{where} must be a JSON object of training options, got {type(values).__name__}")
        flat, unknown = {}, []
        for path, value in _walk(values):
            name = _BY_PATH.get(path) or (path[0] if len(path) == 1 and path[0] in FLAT else None)
            if name is None:
                unknown.append(".".join(path))
            else:
                flat[name] = value
        if unknown:
            raise GBPNError(f"{where} sets options this version does not know: {', '.join(sorted(unknown))}")
        for name, value in flat.items():
            opt = OPTIONS[name]
            kinds = (int, float) if opt.base is float else (opt.base,)
            if value is None and opt.optional:
                continue
            # a bool is an int to Python: a switch must be true/false, a count must not be
            ok = isinstance(value, bool) if kinds == (bool,) else (isinstance(value, kinds)
                                                                 and not isinstance(value, bool))
            if not ok:
                want = " or ".join(k.__name__ for k in kinds) + (" or null" if opt.optional else "")
                raise GBPNError(f"{where}: {_option(name)} must be {want}, got {value!r}")
        return cls(**flat)


@dataclass(frozen=True)
class Option:
    """One option of :class:`TrainConfig`: its flat name, where it lives in the parts, its dataclass field
    (default and metadata) and its type (``base``: int, float, str or bool; ``optional``: None allowed)."""

    name: str
    path: Tuple[str, ...]
    field: Field
    base: type
    optional: bool

    @property
    def flag(self) -> str:
        """The long flag as messages name it (``--mlp-layers``; ``--degree-weight`` for a switch)."""
        return self.field.metadata.get("flag", "--" + self.name.replace("_", "-"))

    def named(self) -> str:
        """As an error message names it, with its flag: ``num_hidden (--mlp-layers)``."""
        return f"{self.name} ({self.flag})"


def _options() -> Dict[str, Option]:
    leaves = [(path, f, owner) for part, cls in PARTS.items() for path, f, owner in _leaves(cls, (part,))]
    leaves.append((("device",), next(f for f in fields(TrainConfig) if f.name == "device"), TrainConfig))
    out = {}
    for path, f, owner in leaves:
        hint = typing.get_type_hints(owner)[f.name]
        args = typing.get_args(hint)
        name = f.metadata.get("flat", f.name)
        if name in out:
            raise TypeError(f"two options share the flat name {name!r}: {out[name].path} and {path}")
        out[name] = Option(name, path, f, next((a for a in args if a is not type(None)), hint), type(None) in args)
    return out


# every option by its flat name ("potential_hops": path ("encoder", "sign", "hops"))
OPTIONS: Dict[str, Option] = _options()
FLAT: Dict[str, Tuple[str, ...]] = {name: o.path for name, o in OPTIONS.items()}
_BY_PATH = {path: name for name, path in FLAT.items()}


def _walk(values: Dict, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], object]]:
    """``(path, value)`` of every option in a nested dict: a dict under a part or an options group is opened."""
    for key, value in values.items():
        here = path + (str(key),)
        if isinstance(value, dict) and (here[0] in PARTS) and here not in _BY_PATH:
            yield from _walk(value, here)
        else:
            yield here, value


def _flat_attribute(path: Tuple[str, ...]) -> property:
    def get(self):
        obj = self
        for name in path:
            obj = getattr(obj, name)
        return obj

    def set_(self, value) -> None:
        obj = self
        for name in path[:-1]:
            obj = getattr(obj, name)
        setattr(obj, path[-1], value)

    return property(get, set_, doc=f"``{'.'.join(path)}``")


for _name, _path in FLAT.items():
    if len(_path) > 1:
        setattr(TrainConfig, _name, _flat_attribute(_path))


def _option(name: str) -> str:
    return OPTIONS[name].named()


def resolve_device(name: str) -> torch.device:
    """``torch.device`` for ``name`` (``"auto"``: CUDA when available); a clear error when a
    CUDA device is asked for on a machine without one."""
    import torch  # here, not above: the config (and the command line's parser with it) loads without it

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise GBPNError(f"unknown device {name!r}: use cpu, cuda, cuda:N or auto") from err
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise GBPNError(f"device {name!r} asked for, but this machine has no such CUDA device; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise GBPNError(f"device {name!r} is not supported: use cpu, cuda, cuda:N or auto")
    return device
