"""Hyper-parameters of a GBPN training run, their checks and the device they run on."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, Optional

import torch

from gbpn.errors import GBPNError

VARIANTS = ("gbpn", "gbpn-i")

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


# the command-line flags of the fields whose flag is not the field's name with dashes
_FLAGS = {"num_steps": "--steps", "num_hidden": "--mlp-layers", "num_hops": "--hops"}


def _option(name: str) -> str:
    """A field as an error message names it, with its ``gbpn train`` flag: ``num_hidden (--mlp-layers)``."""
    return f"{name} ({_FLAGS.get(name, '--' + name.replace('_', '-'))})"


@dataclass
class TrainConfig:
    """Hyper-parameters of one training run; the defaults are the paper's protocol."""

    variant: str = "gbpn"
    num_steps: int = 5
    hidden: int = 256
    num_hidden: int = 2
    dropout: Optional[float] = None  # None: the appendix's rule, see default_dropout
    epochs: int = 500
    patience: Optional[int] = None  # stop after this many epochs without a better validation accuracy
    lr: float = 1e-3
    weight_decay: float = 2.5e-4
    degree_weight: bool = True
    warmup: float = 0.0  # fraction of epochs trained with K = 0 (MLP only) first
    damping: float = 0.0
    backward: str = "unroll"  # "implicit": BP to its fixed point, differentiated implicitly (gbpn.bp.implicit)
    tol: float = 1e-4  # implicit: stop once no belief changes by more than this (L1) in a step
    max_steps: int = 100  # implicit: most BP steps per pass (num_steps is then unused, except as tree depth)
    learn_coupling: bool = True
    coupling_lr: Optional[float] = 1e-2  # None: same as lr; H needs larger steps than the MLP
    coupling_init: str = "uniform"  # "uniform" (H = 1) or "empirical" (label co-occurrence on training edges)
    precision: str = "fp32"  # "bf16": MLP hidden layers in bfloat16 (BP stays float32)
    batch_size: Optional[int] = None  # mini-batch training on sampled computation trees; None: full batch
    fanout: Optional[int] = 5  # neighbours kept per tree node (None: all)
    num_hops: Optional[int] = None  # tree depth; None: num_steps
    sampler: str = "uniform"  # "uniform" or "exp3" (importance sampling of tree neighbours, appendix B)
    exp3_gamma: float = 0.05  # share of the uniform distribution mixed into Exp3's
    edge_chunk: Optional[int] = None  # evaluation BP in chunks of this many edges (bounded memory)
    class_weight: bool = False  # weight the loss by inverse class frequency of the training labels
    train_frac: float = 0.3
    val_frac: float = 0.2
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", ... or "auto" (CUDA when available)
    # the self-potential's encoder (gbpn.models.encoders): mlp (the paper's), sign, gcn, sage, gat,
    # or auto (each of AUTO_CANDIDATES trained, the best on validation kept)
    potential: str = "mlp"
    potential_hops: int = 2  # sign: propagation hops
    potential_layers: int = 2  # gcn/sage/gat: message-passing layers
    residual: bool = False  # gcn/sage/gat: residual connections
    layer_norm: bool = False  # gcn/sage/gat: LayerNorm
    separate: bool = True  # sign/gcn/sage/gat: ego and neighbour channels apart
    metric: str = "auto"  # model selection (and the reported score): accuracy, macro_f1, roc_auc; auto: roc_auc
    # for binary labels with a minority class under 30%, accuracy otherwise

    def validate(self) -> None:
        """Raise :class:`GBPNError` naming the first option out of its range (NaN included)."""
        def positive(name: str, value, allow_none: bool = False) -> None:
            if not (value is None and allow_none) and not (isinstance(value, (int, float)) and value > 0
                                                           and math.isfinite(value)):
                raise GBPNError(f"{_option(name)} must be a positive number, got {value}")

        for name in ("lr", "coupling_lr"):
            positive(name, getattr(self, name), allow_none=name == "coupling_lr")
        for name in ("num_hidden", "edge_chunk", "fanout", "num_hops"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < (0 if name == "num_hidden" else 1)):
                raise GBPNError(f"{_option(name)} must be a {'non-negative' if name == 'num_hidden' else 'positive'} "
                                f"whole number, got {value}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise GBPNError(f"{_option('weight_decay')} must be a finite number >= 0, got {self.weight_decay}")
        if not 0 <= self.damping < 1:
            raise GBPNError(f"{_option('damping')} must be in [0, 1), got {self.damping}")
        if not (0 < self.train_frac < 1 and 0 <= self.val_frac < 1 and self.train_frac + self.val_frac < 1):
            raise GBPNError(f"train_frac and val_frac must be fractions that leave test nodes, got "
                            f"{self.train_frac} and {self.val_frac}")
        if self.variant not in VARIANTS:
            raise GBPNError(f"unknown variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        for name, value, least in (("epochs", self.epochs, 1), ("num_steps", self.num_steps, 0),
                                   ("hidden", self.hidden, 1)):
            if not isinstance(value, int) or value < least:
                raise GBPNError(f"{_option(name)} must be a whole number >= {least}, got {value}")
        resolve_device(self.device)
        if self.patience is not None and self.patience < 1:
            raise GBPNError(f"{_option('patience')} must be a positive number of epochs, got {self.patience}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise GBPNError(f"{_option('dropout')} must be in [0, 1), got {self.dropout}")
        if self.precision not in ("fp32", "bf16"):
            raise GBPNError(f"{_option('precision')} must be 'fp32' or 'bf16', got {self.precision!r}")
        if self.coupling_init not in ("uniform", "empirical"):
            raise GBPNError(f"coupling_init must be 'uniform' or 'empirical', got {self.coupling_init!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise GBPNError(f"{_option('batch_size')} must be positive, got {self.batch_size}")
        if self.sampler not in ("uniform", "exp3"):
            raise GBPNError(f"sampler must be 'uniform' or 'exp3', got {self.sampler!r}")
        if self.sampler == "exp3" and (self.batch_size is None or self.fanout is None):
            raise GBPNError("--sampler exp3 samples tree neighbours: it needs --batch-size and a --fanout")
        if not 0 <= self.exp3_gamma <= 1:
            raise GBPNError(f"{_option('exp3_gamma')} must be in [0, 1], got {self.exp3_gamma}")
        if self.backward not in ("unroll", "implicit"):
            raise GBPNError(f"backward must be 'unroll' or 'implicit', got {self.backward!r}")
        if self.backward == "implicit" and (not self.tol > 0 or self.max_steps < 1):
            raise GBPNError(f"implicit BP needs --tol > 0 and --max-steps >= 1, got {self.tol} and {self.max_steps}")
        if not 0 <= self.warmup <= 1:
            raise GBPNError(f"{_option('warmup')} is a fraction of epochs in [0, 1], got {self.warmup}")

        from gbpn.train.metrics import METRICS
        from gbpn.models.encoders import ENCODERS

        if self.potential not in ENCODERS + ("auto",):
            raise GBPNError(f"unknown potential {self.potential!r}; choose one of {', '.join(ENCODERS)} or auto")
        if self.potential_hops < 1 or self.potential_layers < 1:
            raise GBPNError("--potential-hops and --potential-layers must be at least 1")
        if self.potential in ("gcn", "sage", "gat", "dagnn", "linkx") and self.batch_size is not None:
            raise GBPNError(f"the {self.potential} potential reads the whole graph at every step and trains full "
                            "batch only: drop --batch-size, or use --potential sign (precomputed neighbourhood "
                            "features) or mlp for mini-batch training")
        if self.potential == "sage" and not self.separate:
            raise GBPNError("the sage potential always keeps a node's own weight (its root weight): --no-separate "
                            "applies to sign, gcn and gat")
        if self.potential != "mlp" and self.precision != "fp32":
            raise GBPNError("--precision bf16 is implemented for the mlp potential only")
        if self.metric not in METRICS + ("auto",):
            raise GBPNError(f"unknown metric {self.metric!r}; choose one of {', '.join(METRICS)} or auto")

    def potential_options(self, potential: Optional[str] = None) -> Dict:
        """The encoder options of ``potential`` (default: this config's) from the flat fields."""
        potential = potential or self.potential
        if potential == "sign":
            return {"hops": self.potential_hops, "separate": self.separate}
        if potential in ("gcn", "sage", "gat"):
            return {"num_layers": self.potential_layers, "residual": self.residual, "layer_norm": self.layer_norm,
                    "separate": self.separate}
        return {}

    def to_dict(self) -> Dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Dict, where: str = "the config") -> "TrainConfig":
        """A config from :meth:`to_dict`'s output (a recorded ``config.json``), each value checked
        against its field's type: a :class:`GBPNError` names the first that is not (``"5"`` for a
        count, ``"no"`` for a switch), rather than training with it. Fields it lacks take their
        defaults (a config written by an older version)."""
        if not isinstance(values, dict):
            raise GBPNError(f"{where} must be a JSON object of training options, got {type(values).__name__}")
        unknown = sorted(set(values) - set(_FIELD_TYPES))
        if unknown:
            raise GBPNError(f"{where} sets options this version does not know: {', '.join(unknown)}")
        for name, value in values.items():
            kinds, optional = _FIELD_TYPES[name]
            if value is None and optional:
                continue
            # a bool is an int to Python: a switch must be true/false, a count must not be
            ok = isinstance(value, bool) if kinds == (bool,) else (isinstance(value, kinds)
                                                                 and not isinstance(value, bool))
            if not ok:
                want = " or ".join(k.__name__ for k in kinds) + (" or null" if optional else "")
                raise GBPNError(f"{where}: {_option(name)} must be {want}, got {value!r}")
        return cls(**values)


def _field_types() -> Dict[str, tuple]:
    """field -> (accepted Python types, None allowed), from the annotations."""
    import typing

    out = {}
    for name, hint in typing.get_type_hints(TrainConfig).items():
        args = typing.get_args(hint)
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), hint)
        out[name] = ((int, float) if base is float else (base,), optional)
    return out


_FIELD_TYPES = _field_types()


def resolve_device(name: str) -> torch.device:
    """``torch.device`` for ``name`` (``"auto"``: CUDA when available); a clear error when a
    CUDA device is asked for on a machine without one."""
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
