"""A training that pauses between epochs and goes on later as if it never had: what a budgeted search
(:mod:`gbpn.train.search`) trains a few epochs, ranks, and continues, instead of training it again.

A :class:`Session` owns its random streams: the global torch generator (dropout) is swapped in for its epochs
and out after them, so sessions trained in turns give, epoch for epoch, what each gives trained alone. Its
:meth:`~Session.state_dict` (model, optimiser, loop, random streams) lets an interrupted search resume there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from gbpn.train.config import TrainConfig
from gbpn.train.loop import Selection


@dataclass
class TrialResult:
    """A finished training: the model (its best validation epoch's parameters, on the CPU), its metrics, the split
    ``(train, val, test)`` masks, the per-epoch history and the config it trained (with ``--potential auto``, the
    chosen encoder's)."""

    model: torch.nn.Module
    metrics: Dict[str, float]
    masks: Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    history: List[Dict[str, float]] = field(default_factory=list)
    config: Optional[TrainConfig] = None


@dataclass
class Session:
    """``selection`` trains ``model`` with ``optimizer``; ``generators`` are the session's own generators (e.g. the
    half-sampling's); ``finish(selection)`` turns the finished loop into the training's result."""

    selection: Selection
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    finish_fn: Callable[[Selection], Any]
    generators: List[torch.Generator] = field(default_factory=list)
    cuda: bool = False
    rng: Optional[Dict[str, torch.Tensor]] = None

    def __post_init__(self) -> None:
        if self.rng is None:  # the state the caller seeded before building the model
            self.rng = self._global_rng()

    @property
    def val(self) -> float:
        return self.selection.val

    @property
    def val_loss(self) -> float:
        return self.selection.val_loss

    @property
    def epoch(self) -> int:
        return self.selection.epoch

    @property
    def done(self) -> bool:
        return self.selection.done

    def advance(self, until: int, progress: bool = False) -> "Session":
        """Train up to epoch ``until`` with this session's random streams; the caller's are left as they were."""
        outer = self._global_rng()
        self._set_global_rng(self.rng)
        try:
            self.selection.advance(until, progress)
        finally:
            self.rng = self._global_rng()
            self._set_global_rng(outer)
        return self

    def finish(self, progress: bool = False):
        """Train to the end (``epochs`` or patience) and return the training's result."""
        self.advance(self.selection.epochs, progress)
        return self.finish_fn(self.selection)

    def state_dict(self) -> Dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "selection": self.selection.state_dict(), "rng": self.rng,
                "generators": [g.get_state() for g in self.generators]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.selection.load_state_dict(state["selection"])
        self.rng = state["rng"]
        for g, s in zip(self.generators, state["generators"]):
            g.set_state(s)

    def _global_rng(self) -> Dict[str, torch.Tensor]:
        out = {"cpu": torch.get_rng_state()}
        if self.cuda:
            out["cuda"] = torch.cuda.get_rng_state()
        return out

    def _set_global_rng(self, state: Dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(state["cpu"])
        if self.cuda and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"])
