"""``mlp``: the paper's potential, an MLP on each node's own features."""
from __future__ import annotations

from typing import Optional

from torch import Tensor

from gbpn.models.mlp import MLP


class MLPEncoder(MLP):
    """The paper's potential: an MLP on each node's own features (the graph is ignored)."""

    def precompute(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return x

    def forward(self, x: Tensor, edge_index: Optional[Tensor] = None) -> Tensor:  # type: ignore[override]
        return super().forward(x)


def build(in_channels: int, num_classes: int, hidden_channels: int, num_hidden: int, dropout: float,
          precision: str) -> MLPEncoder:
    return MLPEncoder(in_channels, hidden_channels, num_classes, num_hidden, dropout, precision)
