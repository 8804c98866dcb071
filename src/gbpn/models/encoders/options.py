"""The options a user sets for an encoder (``gbpn train`` flags, a part of ``config.json``), and the
checks made of them before anything runs. They live apart from the encoders so that the training
config and the command line's parser load without PyTorch or PyG."""
from __future__ import annotations

from dataclasses import dataclass, field

from gbpn.errors import GBPNError


@dataclass
class SignOptions:
    """The ``sign`` encoder's options (``separate`` is the encoder config's own)."""

    hops: int = field(default=2, metadata={"help": "sign: propagation hops (default: 2)", "flag": "--potential-hops",
                                           "flat": "potential_hops"})

    def validate(self) -> None:
        if self.hops < 1:
            raise GBPNError("--potential-hops and --potential-layers must be at least 1")


@dataclass
class GNNOptions:
    """The options of the ``gcn``, ``sage`` and ``gat`` encoders (``separate`` is the encoder config's own) and of
    their deep, normalised ``classic-*`` forms."""

    num_layers: int = field(default=2, metadata={"help": "gcn/sage/gat: message-passing layers (default: 2)",
                                                 "flag": "--potential-layers", "flat": "potential_layers"})
    residual: bool = field(default=False, metadata={"help": "gcn/sage/gat: residual connections"})
    layer_norm: bool = field(default=False, metadata={"help": "gcn/sage/gat: LayerNorm before each layer"})
    batch_norm: bool = field(default=False, metadata={"help": "gcn/sage/gat: BatchNorm before each layer (classic-*: "
                                                              "after each convolution)"})

    def validate(self) -> None:
        if self.num_layers < 1:
            raise GBPNError("--potential-hops and --potential-layers must be at least 1")
        if self.layer_norm and self.batch_norm:
            raise GBPNError("choose one normalisation: --layer-norm or --batch-norm, not both")


@dataclass
class BlockOptions:
    """The options of the residual-block encoders (``resnet``, ``res-gcn``, ``res-sage``, ``res-gat``,
    ``res-gat-sep``, ``res-gt``, ``res-gt-sep``)."""

    blocks: int = field(default=2, metadata={"help": "resnet/res-*: residual blocks (default: 2; the published "
                                                     "protocol picks 1-5 on validation)",
                                             "flag": "--potential-blocks", "flat": "potential_blocks"})

    def validate(self) -> None:
        if self.blocks < 1:
            raise GBPNError("--potential-blocks must be at least 1")


def check_sage(separate: bool) -> None:
    """SAGE always keeps a node's own weight: ``separate=False`` is refused before training."""
    if not separate:
        raise GBPNError("the sage potential always keeps a node's own weight (its root weight): --no-separate "
                        "applies to sign, gcn and gat")
