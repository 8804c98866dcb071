"""A budgeted search by successive halving: many configurations for a few epochs, the better third for longer,
then the best one trained in full.

The budget ``B`` counts epochs in units of one plain training run. A run stops at ``epochs`` or, with
``patience`` P, when P epochs pass without a better validation score: about 2P epochs in (the best epoch
comes after about as many epochs as patience waits), so one run counts ``min(epochs, 2 * patience)``
epochs. The whole search, the final training of the chosen configuration counted as one run, trains at
most ``B`` runs' epochs: the rungs get ``B - 1`` of them. :func:`plan` fits as many configurations into
those as it can: ``n_0`` configurations for ``r_0`` epochs (1/20 of a run), the best ``n_0 // eta`` of
them for ``eta * r_0`` epochs (each trained again from the start), and so on while more than one is kept;
the last one left is trained as a plain run (``epochs``, with ``patience``). With ``B = 2``, ``eta = 3``
and patience 100 that is 11 configurations for 10 epochs and the best 3 for 30 (200 epochs), then the
best of those; without patience and 500 epochs, 11 for 25 and 3 for 75 (500 epochs).

A hand-written loop, not Optuna: successive halving here is a few lines, every rung trains from scratch
with a fixed epoch count (so the budget is exact and each unit's result depends on its configuration and
seed alone, never on timing or order), and an interrupted search resumes from the finished units a
:class:`~gbpn.train.units.Units` folder holds, with no database.

The search reads validation scores only: :func:`successive_halving` is given each unit's validation score,
never its test score.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from gbpn.errors import GBPNError

logger = logging.getLogger("gbpn")

ETA = 3  # keep the best third at each rung
FIRST_FRACTION = 20  # the first rung trains 1/20 of a run (10 epochs of a 200-epoch run)

# the choices every searched network has (GBPN's encoders and the tuned baselines alike)
DEPTHS = [1, 2, 3, 4, 5]
SWITCHES = [False, True]
NETWORK_SPACE: Dict[str, list] = {"hidden": [64, 128, 256, 512], "dropout": [0.0, 0.1, 0.3, 0.5, 0.7],
                                  "lr": [1e-3, 3e-3, 1e-2]}
# What ``--potential auto --budget B`` draws from, by the flat names of the training options; each encoder
# reads only its own (:func:`applies`). Encoders: the six of exhaustive ``auto`` plus GAT; depth 1-5 for
# the GNNs and SIGN (hops), 1-3 hidden layers for the MLP-like encoders; K and the coupling's learning rate.
GBPN_SPACE: Dict[str, list] = {
    "potential": ["mlp", "sign", "sage", "gcn", "gat", "dagnn", "linkx"],
    "separate": [True, False],
    "num_hidden": [1, 2, 3],
    "potential_hops": DEPTHS,
    "potential_layers": DEPTHS,
    "residual": SWITCHES,
    "layer_norm": SWITCHES,
    **NETWORK_SPACE,
    "num_steps": [1, 2, 3, 5],
    "coupling_lr": [1e-3, 1e-2],
}
# the MLP-like encoders' depth; the other encoder options come from the encoder registry
_MLP_DEPTH = ("mlp", "sign", "linkx")


@dataclass(frozen=True)
class Plan:
    """The rungs of a search: ``rungs[k] = (configurations, epochs)``; the survivor of the last rung (or the
    only configuration) is trained as a plain run: up to ``final`` epochs, counted as ``run`` (its expected
    length under patience)."""

    rungs: Tuple[Tuple[int, int], ...]
    final: int
    run: int
    budget: float

    @property
    def budget_epochs(self) -> int:
        """The epochs the budget holds: ``budget`` runs' of ``run`` each."""
        return math.floor(self.budget * self.run + 1e-9)

    @property
    def configurations(self) -> int:
        return self.rungs[0][0] if self.rungs else 1

    @property
    def epochs(self) -> int:
        """Epochs of the whole search at most (every unit running all its epochs), the final training counted
        as one run."""
        return sum(n * r for n, r in self.rungs) + self.run


def run_epochs(epochs: int, patience: Optional[int] = None) -> int:
    """The epochs one plain run counts in a budget: ``epochs``, or ``2 * patience`` where that is fewer."""
    return epochs if patience is None else max(1, min(epochs, 2 * patience))


def plan(epochs: int, budget: float, patience: Optional[int] = None, eta: int = ETA,
         first: Optional[int] = None) -> Plan:
    """The most configurations successive halving fits into ``budget`` runs' epochs (see the module)."""
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget >= 1):
        raise GBPNError(f"--budget counts full trainings and must be at least 1 (the chosen configuration's own), "
                        f"got {budget}")
    run = run_epochs(epochs, patience)
    first = first or max(1, run // FIRST_FRACTION)
    best = Plan((), epochs, run, budget)
    for n0 in range(2, 10_000):
        rungs, n, r = [], n0, first
        while n > 1 and r < run:
            rungs.append((n, r))
            n, r = n // eta, r * eta
        candidate = Plan(tuple(rungs), epochs, run, budget)
        if candidate.epochs > candidate.budget_epochs:
            break
        best = candidate
    return best


def applies(name: str, potential: str) -> bool:
    """Whether the option ``name`` (a flat name of :class:`~gbpn.train.config.TrainConfig`) acts on the
    ``potential`` encoder; options of the BP and the optimiser act on every one."""
    from gbpn.models.encoders.registry import option_users, spec
    from gbpn.train.config import OPTIONS

    if name == "separate":
        entry = spec(potential)
        return bool(entry and entry.separate and entry.check is None)  # sage keeps its root weight always
    if name == "num_hidden":
        return potential in _MLP_DEPTH
    path = OPTIONS[name].path if name in OPTIONS else ()
    if path[:1] == ("encoder",) and len(path) > 2:
        return potential in option_users().get(path[1], ())
    return True


def check_space(space: Dict[str, Sequence], known: Sequence[str]) -> None:
    """Refuse a search space with an option ``known`` does not hold or no choices, naming it."""
    if not isinstance(space, dict) or not space:
        raise GBPNError(f"the search space must be a JSON object of option -> list of choices, got {space!r}")
    for name, choices in space.items():
        if name not in known:
            raise GBPNError(f"the search space sets {name!r}, which is not an option here ({', '.join(known)})")
        if not isinstance(choices, list) or not choices:
            raise GBPNError(f"the search space's {name} must be a non-empty list of choices, got {choices!r}")


def sample(space: Dict[str, Sequence], n: int, seed: int, anchors: Sequence[Dict] = (),
           reads: Callable[[str, Dict], bool] = lambda name, params: True) -> List[Dict]:
    """``n`` distinct configurations: ``anchors`` first (as many as fit), then draws from ``space`` (a seeded
    :class:`random.Random`, each option in the space's order). ``reads(name, params)`` says whether the
    configuration drawn so far reads option ``name``; options it does not read are left out, so two draws
    that differ only there are one configuration. Fewer than ``n`` when the space holds fewer."""
    rng = random.Random(seed)
    out: List[Dict] = []
    seen = set()
    for params in list(anchors)[:n]:
        key = repr(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            out.append(dict(params))
    for _ in range(100 * n):
        if len(out) >= n:
            break
        params: Dict = {}
        for name, choices in space.items():
            value = choices[rng.randrange(len(choices))]
            if reads(name, params):
                params[name] = value
        key = repr(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            out.append(params)
    return out


def successive_halving(configs: Sequence[Dict], rungs: Sequence[Tuple[int, int]],
                       train: Callable[[int, Dict, int], Dict], desc: str = "search") -> Tuple[int, List[Dict]]:
    """Train ``configs`` by successive halving over ``rungs`` (``(kept, epochs)`` each; the first rung's
    count is ``len(configs)``): ``train(index, params, epochs)`` returns the unit's ``{"val": score,
    "epochs_run": n, ...}``; the ``rungs[k + 1][0]`` best by ``val`` go on (ties: the earlier
    configuration; NaN never goes on before a number). Returns the index of the configuration left and
    every configuration's record (``params`` and its ``rungs``: epochs, validation score, epochs run)."""
    records = [{"id": i, "params": dict(p), "rungs": []} for i, p in enumerate(configs)]
    alive = list(range(len(configs)))
    for k, (_, epochs) in enumerate(rungs):
        for i in alive:
            unit = train(i, configs[i], epochs)
            records[i]["rungs"].append({"epochs": epochs, **unit})
        keep = rungs[k + 1][0] if k + 1 < len(rungs) else 1
        ranked = sorted(alive, key=lambda i: (-_finite(records[i]["rungs"][-1]["val"]), i))
        alive = sorted(ranked[:keep])
        logger.info(f"{desc}: rung {k + 1}/{len(rungs)} ({epochs} epochs, {len(ranked)} configurations): best val "
                    f"{100 * _finite(records[ranked[0]]['rungs'][-1]['val']):.2f}%; {len(alive)} go on")
    return (alive[0] if alive else 0), records


def _finite(value) -> float:
    return value if isinstance(value, (int, float)) and value == value else -math.inf
