"""A budgeted search by successive halving: many configurations for a few epochs, the better third for longer,
and the best one on to the end, each continuing where it stopped (never trained again from the start).

The budget ``B`` counts plain training runs of the configuration the search keeps. Epochs differ in cost
by 20x across the space (a 64-wide SAGE against a 3-layer 512-wide GAT), so the search charges each
configuration its counted cost per epoch (:mod:`gbpn.train.cost`: FLOPs and elements written, measured on
its first epoch; never seconds, so a rerun makes the same choices). A run counts ``min(epochs, 2 *
patience)`` epochs (:func:`run_epochs`). The configuration kept trains one whole run, its rungs included;
the other configurations' rungs must fit ``B - 1`` runs of the cheapest configuration that can still be kept
(the cheapest admitted while the rungs are planned, the cheapest finalist once the last rung's are known), so
the search costs at most ``B`` runs of whichever it keeps, at the counted costs, plus the first epoch of the one
configuration that did not fit (the search stops taking configurations there).

Configurations are taken in order (the anchors first, at the space's largest learning rate:
:func:`at_fastest_lr`): each trains its first epoch, which measures its cost,
and is admitted if the rungs planned for the admitted ones (at their costs, the later rungs at the costliest
survivors') still fit; one that does not fit stops there. The rungs: ``n`` configurations up to epoch
``first`` (1/40 of a run: 5 epochs at patience 100), the best ``ceil(n / eta)`` by validation loss and the best
by validation score (:data:`HEDGE`) on to ``eta * first``, and so on until at most ``eta + 1`` are left; the last
rung goes on as far as what is left of the finalists' allowance pays for (up to a run's epochs), so that they are
compared as late as the budget allows; the best left trains to the end (``epochs``, with ``patience``). Its
result is what a plain run of it gives: a :class:`~gbpn.train.session.Session` keeps its own random streams, so
the epochs trained in turns with other configurations are the epochs a plain run trains.

A hand-written loop, not Optuna: the rungs continue sessions held in memory (an Optuna trial is a function
run to its end or pruned), the budget is counted in the search's own units, and an interrupted search
resumes from the states a :class:`~gbpn.train.units.Units` folder holds, with no database.

The search reads validation scores only (:attr:`Session.val <gbpn.train.session.Session.val>`).
"""
from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from gbpn.errors import GBPNError
from gbpn.train.config import OPTIONS
from gbpn.train.cost import counted
from gbpn.train.units import Units

if TYPE_CHECKING:
    from gbpn.train.session import Session

logger = logging.getLogger("gbpn")

ETA = 3  # keep the best third (rounded up) at each rung
# Besides the best third by validation loss, each rung but the last passes on the best validation score: after 5
# epochs the two disagree on the eventual winner (results/published: unfiltered Squirrel's LINKX is first by score
# and seventh of nine by loss, its loss above the first epoch's as it grows confident; Election's SIGN third by loss
# and fifth by score), and neither alone keeps both. The anchors come before it: where the budget cannot hold an
# anchor's rungs with the extra survivor planned but can without it, the anchor is admitted and the hedge is off.
HEDGE = 1  # how many of the best by score go on besides the third
FIRST_FRACTION = 40  # the first rung trains 1/40 of a run (5 epochs of a 200-epoch run)

# the choices every searched network has (GBPN's encoders and the tuned baselines alike)
DEPTHS = [1, 2, 3, 4, 5]
# message-passing layers: deep, normalised classic GNNs reach their published scores at 4-10 layers (Luo et al.)
DEEP = [1, 2, 3, 4, 5, 7, 10, 15]
SWITCHES = [False, True]
# lr 1e-3 ranks since the early rungs read the validation loss (:func:`_rank`): at 1e-3 every candidate of
# ``auto`` still predicts the majority class after 15 epochs on Cora, but its loss falls. Dropout 0.2 is the
# published residual blocks' (Platonov et al.).
NETWORK_SPACE: Dict[str, list] = {"hidden": [64, 128, 256, 512], "dropout": [0.0, 0.1, 0.2, 0.3, 0.5, 0.7],
                                  "lr": [1e-3, 3e-3, 1e-2]}
# What ``--potential auto --budget B`` draws from, by the flat names of the training options; each encoder
# reads only its own (:func:`applies`). Encoders: the six of exhaustive ``auto``, GAT, the published residual
# blocks (SAGE, GCN and GAT-sep aggregations) and the deep classic GCN and SAGE; depth 1-5 for SIGN (hops) and
# the residual blocks, up to 15 layers for the GNNs, 1-3 hidden layers for the MLP-like encoders; K, the
# coupling's learning rate and the loss's degree weighting (on Luo et al.'s SAGE, Chameleon-filtered, the
# d^-1/2 weights cost 4 points: results/published). The early rungs' validation loss is unweighted, so
# configurations with and without it compare.
GBPN_SPACE: Dict[str, list] = {
    "potential": ["mlp", "sign", "sage", "gcn", "gat", "dagnn", "linkx", "res-sage", "res-gcn", "res-gat-sep",
                  "classic-gcn", "classic-sage"],
    "separate": [True, False],
    "num_hidden": [1, 2, 3],
    "potential_hops": DEPTHS,
    "potential_layers": DEEP,
    "potential_blocks": DEPTHS,
    "residual": SWITCHES,
    "layer_norm": SWITCHES,
    "batch_norm": SWITCHES,
    **NETWORK_SPACE,
    "num_steps": [1, 2, 3, 5],
    "coupling_lr": [1e-3, 1e-2, 1e-1],
    "degree_weight": SWITCHES,
}
# The published configurations, anchors of the search beside exhaustive auto's encoders (at the space's largest
# learning rate, as every anchor): Platonov et al.'s residual SAGE blocks (width 512, dropout 0.2) and Luo et
# al.'s deep classic GCN (4 layers, linear skips, BatchNorm, width 256, dropout 0.7: their Squirrel setting),
# both with the plain cross-entropy they train on.
PUBLISHED_ANCHORS: Sequence[Dict] = (
    {"potential": "res-sage", "potential_blocks": 3, "hidden": 512, "dropout": 0.2, "degree_weight": False},
    {"potential": "classic-gcn", "potential_layers": 4, "residual": True, "batch_norm": True, "layer_norm": False,
     "hidden": 256, "dropout": 0.7, "degree_weight": False},
)
# The MLP potential sees the graph through the coupling alone, so it learns as fast as H does: at coupling lr 1e-2
# it ranks last on Sexual's first rungs (validation loss 0.52 at epoch 5, SAGE 0.35) and wins only after ~100
# epochs; at 1e-1 it leads from epoch 5 (0.28). A cheap anchor of its own, after exhaustive auto's encoders.
SEARCH_ANCHORS: Sequence[Dict] = ({"potential": "mlp", "coupling_lr": 1e-1}, *PUBLISHED_ANCHORS)
# the MLP-like encoders' depth; the other encoder options come from the encoder registry
_MLP_DEPTH = ("mlp", "sign", "linkx")


@dataclass(frozen=True)
class Plan:
    """How a search spends its budget: ``budget`` runs of ``run`` epochs each; rungs start at ``first`` epochs and
    grow by ``eta``; the configuration kept trains up to ``final`` epochs."""

    first: int
    eta: int
    run: int
    final: int
    budget: float
    hedge: int = HEDGE

    def rungs(self, n: int) -> List[Tuple[int, int]]:
        """``(configurations, epoch)`` of each rung for ``n`` admitted configurations: each trains up to ``epoch``.
        A rung of ``n`` passes on at most ``ceil(n / eta) + hedge``; one of at most ``eta + hedge`` is the last."""
        out, r = [], self.first
        while n > 1 and r < self.run:
            out.append((n, r))
            if n <= self.eta + self.hedge:
                break
            n, r = math.ceil(n / self.eta) + self.hedge, r * self.eta  # never fewer than a third go on
        return out

    def cost(self, costs: Sequence[float]) -> float:
        """The most the rungs of configurations costing ``costs`` per epoch can cost: every rung's survivors the
        costliest."""
        total, done = 0.0, 0
        for n, r in self.rungs(len(costs)):
            total += sum(sorted(costs, reverse=True)[:n]) * (r - done)
            done = r
        return total

    def allowance(self, costs: Sequence[float]) -> float:
        """What may be spent besides the kept configuration's own run: ``budget - 1`` runs of the cheapest."""
        return (self.budget - 1) * self.run * min(costs)


def run_epochs(epochs: int, patience: Optional[int] = None) -> int:
    """The epochs one plain run counts in a budget: ``epochs``, or ``2 * patience`` where that is fewer."""
    return epochs if patience is None else max(1, min(epochs, 2 * patience))


def max_configurations(schedule: Plan, anchors: int = 0) -> int:
    """How many configurations to draw: as many as the budget holds at the first rung's epochs if every one cost
    as little as the cheapest (the search stops at the first that does not fit), and at least the anchors."""
    return max(anchors, math.floor((schedule.budget - 1) * schedule.run / schedule.first + 1e-9))


def plan(epochs: int, budget: float, patience: Optional[int] = None, eta: int = ETA,
         first: Optional[int] = None) -> Plan:
    """The search's rungs and budget (see the module)."""
    if not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget >= 1):
        raise GBPNError(f"--budget counts full trainings and must be at least 1 (the chosen configuration's own), "
                        f"got {budget}")
    run = run_epochs(epochs, patience)
    return Plan(first or max(1, run // FIRST_FRACTION), eta, run, epochs, budget)


def leading_anchors(configs: Sequence[Dict], anchors: Sequence[Dict]) -> int:
    """How many of ``configs`` (drawn by :func:`sample`, the anchors first) are ``anchors``."""
    return sum(c in anchors for c in configs[:len(anchors)])


def applies(name: str, potential: str, params: Optional[Dict] = None) -> bool:
    """Whether the option ``name`` (a flat name of :class:`~gbpn.train.config.TrainConfig`) acts on the
    ``potential`` encoder, given the options ``params`` drawn before it; options of the BP and the optimiser act
    on every one."""
    from gbpn.models.encoders.registry import option_users, spec

    if name == "batch_norm" and params and params.get("layer_norm"):
        return False  # one normalisation: LayerNorm drawn, BatchNorm stays off

    if name == "separate":
        entry = spec(potential)
        return bool(entry and entry.separate and entry.check is None)  # sage keeps its root weight always
    if name == "num_hidden":
        return potential in _MLP_DEPTH
    path = OPTIONS[name].path if name in OPTIONS else ()
    if path[:1] == ("encoder",) and len(path) > 2:
        return potential in option_users().get(path[1], ())
    return True


def at_fastest_lr(params: Dict, space: Dict[str, Sequence]) -> Dict:
    """``params`` at the largest learning rate ``space`` lists (unchanged where it lists none): an anchor's
    default learning rate may be too slow for the first rungs to see it learn (:data:`NETWORK_SPACE`)."""
    return {**params, "lr": max(space["lr"])} if space.get("lr") else dict(params)


def sample(space: Dict[str, Sequence], n: int, seed: int, anchors: Sequence[Dict] = (),
           reads: Callable[[str, Dict], bool] = lambda name, params: True) -> List[Dict]:
    """``n`` distinct configurations: ``anchors`` first (as many as fit), then draws from ``space`` (a seeded
    :class:`random.Random`, each option in the space's order). ``reads(name, params)`` says whether the
    configuration drawn so far reads option ``name``; options it does not read are left out, so two draws
    that differ only there are one configuration. Fewer than ``n`` when the space holds fewer."""
    rng = random.Random(seed)
    out: List[Dict] = []
    seen, drawn = set(), set()  # drawn: the space's own configurations met so far (anchors may lie outside it)
    for params in list(anchors)[:n]:
        key = repr(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            out.append(dict(params))
    repeats, patience = 0, 64
    for _ in range(100 * n):
        if len(out) >= n:
            break
        params: Dict = {}
        for name, choices in space.items():
            value = choices[rng.randrange(len(choices))]
            if reads(name, params):
                params[name] = value
        key = repr(sorted(params.items()))
        drawn.add(key)
        if key not in seen:
            seen.add(key)
            out.append(params)
            repeats = 0
        elif (repeats := repeats + 1) >= patience:  # only repeats for a while: is the space exhausted?
            if _size(space, reads, len(drawn) + 1) <= len(drawn):
                break  # every configuration drawn: more draws would only repeat them (100 n of them, n ~ 1e9)
            repeats, patience = 0, 2 * patience  # not yet: ask again after twice as many repeats
    return out


def _size(space: Dict[str, Sequence], reads: Callable[[str, Dict], bool], cap: int) -> int:
    """How many distinct configurations :func:`sample` can draw from ``space``, counted up to ``cap``."""
    names = list(space)

    def count(i: int, params: Dict, left: int) -> int:
        if i == len(names):
            return 1
        if not reads(names[i], params):
            return count(i + 1, params, left)
        total = 0
        for value in {repr(v): v for v in space[names[i]]}.values():  # a choice listed twice is one
            total += count(i + 1, {**params, names[i]: value}, left - total)
            if total >= left:
                break
        return total

    return count(0, {}, cap)


def successive_halving(configs: Sequence[Dict], start: Callable[[int, Dict], Session], schedule: Plan,
                       units: Optional[Units] = None, desc: str = "search", progress: bool = False,
                       measure: Callable = counted, anchors: int = 0) -> Tuple[int, object, Dict]:
    """Search ``configs`` within ``schedule``'s budget (see the module), the first ``anchors`` of them before the
    hedge (:data:`HEDGE`). ``start(index, params)`` builds a configuration's
    :class:`~gbpn.train.session.Session` (seeded, untrained); ``measure(fn)`` runs ``fn`` and returns its result
    and cost (:func:`gbpn.train.cost.counted`). Rankings (:func:`_rank`) read the validation loss
    (:attr:`Session.val_loss`) at every rung but the last and :attr:`Session.val` there, never a test score; a
    configuration that fails (:class:`~gbpn.errors.GBPNError`: diverged) loses. With ``units``, every
    configuration's first-epoch record and each rung's states are kept there, and a search run again resumes from
    them.

    Returns the index of the configuration kept, its finished training's result (``Session.finish``) and the
    search's record: ``configurations`` (each one's ``params``, ``cost`` per epoch, whether ``admitted``, and
    its ``rungs``: epoch, validation score and loss), ``hedge``, ``allowance`` (the last rung's), ``planned_cost``,
    ``spent_cost`` and ``other_epochs`` (what the search trained besides the kept configuration's run), ``run_cost``
    (the kept one's whole training) and ``seconds``."""
    began = time.perf_counter()
    search = _Search(configs, start, schedule, units, desc)
    search.admit(measure, anchors)
    chosen = search.halve()
    result = search.session(chosen, search.schedule.final).finish(progress)
    return chosen, result, search.record(chosen, began)


class _Search:
    """The state of one :func:`successive_halving`: each configuration's record, the sessions in memory, the
    configurations admitted and the epochs each has trained."""

    def __init__(self, configs: Sequence[Dict], start: Callable, schedule: Plan, units: Optional[Units], desc: str):
        self.configs, self.start, self.schedule, self.units, self.desc = configs, start, schedule, units, desc
        self.records = [{"id": i, "params": dict(p), "cost": None, "admitted": False, "rungs": []}
                        for i, p in enumerate(configs)]
        self.sessions: Dict[int, object] = {}
        self.admitted: List[int] = []
        self.trained: Dict[int, int] = {}
        self.rungs: List[Tuple[int, int]] = []
        self.allowance = 0.0

    def costs(self) -> List[float]:
        return [self.records[j]["cost"] for j in self.admitted]

    def session(self, i: int, epoch: int):
        """Configuration ``i``'s session at ``epoch`` or before: in memory, from its state in ``units``, or new."""
        if i not in self.sessions:
            s = self.start(i, self.configs[i])
            saved = self.units.get_torch(f"config{i}-state") if self.units is not None else None
            if saved is not None and saved["epoch"] <= epoch:
                s.load_state_dict(saved["state"])
            self.sessions[i] = s
        return self.sessions[i]

    def admit(self, measure: Callable, anchors: int = 0) -> None:
        """Take the configurations in order, each after its first epoch (which measures its cost), while the rungs
        planned for those admitted still fit the allowance; the first that does not fit stops the taking. One of
        the first ``anchors`` that fits only without the hedge's extra survivors is taken, and the hedge is off."""
        for i in range(len(self.configs)):
            record = self._first_epoch(i, measure)
            self.records[i]["cost"] = record["cost"]
            if record["cost"] is None:
                continue
            costs = self.costs() + [record["cost"]]
            fit = self.schedule.cost(costs) <= self.schedule.allowance(costs)
            if not fit and i < anchors and self.schedule.hedge:
                unhedged = replace(self.schedule, hedge=0)
                if unhedged.cost(costs) <= unhedged.allowance(costs):
                    logger.info(f"{self.desc}: anchor {i} fits the budget only without the hedge's extra survivors: "
                                "the rungs pass on the best third by validation loss alone")
                    self.schedule, fit = unhedged, True
            if not self.admitted or fit:
                self.admitted.append(i)
                self.records[i]["admitted"] = True
            else:
                self.sessions.pop(i, None)
                logger.info(f"{self.desc}: configuration {i} ({record['cost'] / 1e9:.1f} GFLOP-equivalents an epoch) "
                            f"does not fit the budget; {len(self.admitted)} admitted")
                break

    def _first_epoch(self, i: int, measure: Callable) -> Dict:
        """Configuration ``i``'s first epoch: its cost and validation score (kept in ``units``, read back there)."""
        record = self.units.get(f"config{i}-first") if self.units is not None else None
        if record is None:
            try:
                # building it (precomputed features, checks) is once, not per epoch
                fresh = self.start(i, self.configs[i])
                self.sessions[i], cost = measure(lambda: fresh.advance(1))
                record = {"cost": cost, "val": _finite(self.sessions[i].val)}
            except GBPNError as err:  # one that diverges (too high a learning rate) loses, the search goes on
                logger.warning(f"{self.desc}: search configuration {i} {self.configs[i]} failed: {err}")
                self.sessions.pop(i, None)
                record = {"cost": None, "val": None, "error": str(err)}
            if self.units is not None:
                self.units.put(f"config{i}-first", record)
        return record

    def _last_epoch(self, k: int, alive: List[int]) -> int:
        """The last rung trains as far as what is left of the allowance pays for its survivors (``alive``). Its
        allowance is the survivors' own: the one kept is among them, so ``budget - 1`` runs of the cheapest of
        them still bound the others' cost by runs of it, and a cheap configuration that fell at an earlier rung does
        not cut the finalists' comparison short."""
        self.allowance = self.schedule.allowance([self.records[i]["cost"] for i in alive])
        left = self.allowance - sum(self.records[i]["cost"] * e for i, e in self.trained.items())
        start_epoch = self.rungs[k - 1][1] if k else 1
        return max(self.rungs[k][1], min(self.schedule.run, self.schedule.final,
                                         start_epoch + math.floor(left / sum(self.records[i]["cost"] for i in alive))))

    def halve(self) -> int:
        """Train the admitted configurations rung by rung, the best of each going on; the index of the one left."""
        alive = list(self.admitted)
        self.rungs = rungs = self.schedule.rungs(len(alive))
        self.allowance = self.schedule.allowance(self.costs()) if alive else 0.0
        self.trained = {i: 1 for i, r in enumerate(self.records) if r["cost"] is not None}  # admitted or not
        if len(rungs) == 1:  # its survivors are every admitted configuration: its epoch is known now
            rungs[0] = (rungs[0][0], self._last_epoch(0, alive))
        logger.info(f"{self.desc}: {plan_line(self.schedule, rungs, len(self.admitted), len(self.configs))}")
        for k, (n, epoch) in enumerate(rungs):
            if k == len(rungs) - 1 and k > 0:
                epoch = self._last_epoch(k, alive)
            rungs[k] = (len(alive), epoch)  # planned: at most that many (the best score may be among the third)
            alive = self._rung(k, epoch, alive)
        return alive[0] if alive else 0

    def _rung(self, k: int, epoch: int, alive: List[int]) -> List[int]:
        """Rung ``k``: every configuration of ``alive`` trained to ``epoch`` and ranked; those that go on."""
        rungs, records = self.rungs, self.records
        start_epoch = rungs[k - 1][1] if k else 1
        for i in alive:
            s = self.session(i, epoch)
            try:
                s.advance(epoch)
            except GBPNError as err:
                logger.warning(f"{self.desc}: search configuration {i} {self.configs[i]} failed: {err}")
            self.trained[i] = s.epoch
            records[i]["rungs"].append({"epoch": epoch, "val": _finite_or_none(s.val), "loss": _loss(s),
                                        "val_loss": _finite_or_none(s.val_loss), "epochs_run": s.epoch})
            if self.units is not None:
                self.units.put_torch(f"config{i}-state", {"epoch": epoch, "state": s.state_dict()})
        last = k == len(rungs) - 1
        ranked = sorted(alive, key=lambda i: _rank(self.sessions[i], i, last))
        by_score = sorted(alive, key=lambda i: _rank(self.sessions[i], i, last=True))
        best = by_score[0]
        kept = ({best} if last else
                set(ranked[:math.ceil(len(alive) / self.schedule.eta)]) | set(by_score[:self.schedule.hedge]))
        alive = sorted(kept)
        for i in set(ranked) - kept:
            del self.sessions[i]  # a configuration left behind frees its model and precomputed features
        best_val = 100 * _finite(records[best]["rungs"][-1]["val"])
        logger.info(f"{self.desc}: rung {k + 1}/{len(rungs)}: {len(ranked)} configurations trained to epoch {epoch} "
                    f"({epoch - start_epoch} more each); best val {best_val:.2f}% "
                    f"(configuration {best}: {describe(self.configs[best], short=True)}); "
                    + (f"{len(alive)} go on" if not last else f"configuration {alive[0]} trains on to the end"))
        return alive

    def record(self, chosen: int, began: float) -> Dict:
        """The search's record (see :func:`successive_halving`) once ``chosen`` has trained to the end."""
        records, schedule, costs = self.records, self.schedule, self.costs()
        others = [i for i in self.trained if i != chosen]  # every configuration that trained, the kept one aside
        spent = sum(records[i]["cost"] * self.trained[i] for i in others)
        run_cost = (records[chosen]["cost"] or 0.0) * self.sessions[chosen].epoch if chosen in self.sessions else None
        if records[chosen]["cost"]:  # what the others cost, in runs of the configuration kept (the budget's unit)
            runs = spent / (records[chosen]["cost"] * schedule.run)
            logger.info(f"{self.desc}: kept configuration {chosen} of {len(self.admitted)} admitted: "
                        f"{describe(self.configs[chosen])}; it trained {self.sessions[chosen].epoch} epochs, the others "
                        f"{runs:.2f} runs of {schedule.run} epochs of it at the counted costs (the budget leaves them "
                        f"{schedule.budget - 1:g})")
        return {"configurations": records, "admitted": len(self.admitted), "hedge": schedule.hedge,
                "allowance": self.allowance, "planned_cost": schedule.cost(costs),
                "spent_cost": spent, "other_epochs": sum(self.trained[i] for i in others), "run_cost": run_cost,
                "rungs": [list(r) for r in self.rungs], "seconds": time.perf_counter() - began}


def plan_line(schedule: Plan, rungs: Sequence[Tuple[int, int]], admitted: int, drawn: int) -> str:
    """The search's plan once its configurations are admitted, as a log line: how many, each rung's configurations
    and epochs (the last rung's as its bounds where its survivors, and so what is left of the allowance, are not
    known yet), and how far the one kept trains."""
    head = f"{admitted} of {drawn} configurations admitted"
    if not rungs:
        return f"{head}; it trains on to epoch {schedule.final} at most"
    parts = [f"{'up to ' if k else ''}{n} to epoch {e}" for k, (n, e) in enumerate(rungs[:-1])]
    n, e = rungs[-1]
    last_max = min(schedule.run, schedule.final)
    parts.append(f"{n} to epoch {e}" if len(rungs) == 1 else f"up to {n} to epoch {e}" if e >= last_max else
                 f"up to {n} to between epoch {e} and {last_max}, as far as what is left of the allowance pays for")
    return (f"{head}; rungs (each from where the last stopped): {'; '.join(parts)}; the best then trains on to epoch "
            f"{schedule.final} at most")


def describe(params: Dict, short: bool = False) -> str:
    """A search configuration as training flags (``sage --hidden 256 --dropout 0.5 --lr 0.01 --no-separate``;
    options that are no training option as ``name value``); ``short``: its encoder alone, if it has one."""
    if short and "potential" in params:
        return str(params["potential"])
    out = []
    for name, value in params.items():
        opt = OPTIONS.get(name)
        if opt is None:
            out.append(f"{name} {value}")
        elif name == "potential":
            out.insert(0, str(value))
        elif isinstance(value, bool):
            default = opt.field.default
            if value != default:
                out.append(opt.flag if value else "--no-" + opt.flag[2:])
        else:
            out.append(f"{opt.flag} {value:g}" if isinstance(value, float) else f"{opt.flag} {value}")
    return " ".join(out) or "defaults"


def _rank(session, i: int, last: bool) -> Tuple:
    """Sort key of a configuration at a rung (the best first). The last rung, which picks the one kept, ranks on the
    validation score, as the final choice of an epoch does; earlier rungs on the lowest validation loss so far. After
    a few epochs many configurations share a score (the majority class; every candidate within a point on Sexual
    and Election after 5 epochs), while the loss already orders them by how well they predict, and it moves for a
    slow learner (a small learning rate) whose predictions have not yet flipped; the best score goes on beside them
    (:data:`HEDGE`). Ties: the higher score, the lower training loss, the earlier configuration; NaN never goes on
    before a number."""
    by_score = (-_finite(session.val), _loss(session), i)
    if last:
        return by_score
    loss = session.val_loss
    return (loss if isinstance(loss, (int, float)) and loss == loss else math.inf, *by_score)


def _loss(session) -> float:
    history = session.selection.history
    return history[-1]["loss"] if history and math.isfinite(history[-1]["loss"]) else math.inf


def _finite_or_none(value) -> Optional[float]:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _finite(value) -> float:
    return value if isinstance(value, (int, float)) and value == value else -math.inf
