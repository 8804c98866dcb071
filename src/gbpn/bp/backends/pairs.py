r"""In-place loopy BP on undirected edge pairs, for one process or one part of a partitioned graph.

The reference step of :mod:`gbpn.bp.functional` at inference, with messages stored narrower.
It is the ``pairs`` entry of the dispatch table (:mod:`gbpn.bp.dispatch`), the mode that
:meth:`~gbpn.bp.layer.BeliefPropagation.infer_pairs` and the partitioned inference of
:mod:`gbpn.distributed` run (it takes undirected pairs, not an ``edge_index``).

The graph is given as its undirected edges ``pairs`` ``[2, P]`` (each once). The messages of
both directions of a pair sit in one buffer ``[2, P, c]`` (row 0: :math:`u \to v`, row 1:
:math:`v \to u`) in ``message_dtype``. The new :math:`m_{u\to v}` and :math:`m_{v\to u}` depend
only on the previous beliefs and on each other's previous values, so a chunk of pairs is
updated in place, both directions together: one buffer instead of two, no ``[E, c]``
temporaries beyond a chunk, and the new beliefs accumulate chunk by chunk. The result is the
synchronous update of :class:`~gbpn.bp.layer.BeliefPropagation` up to the rounding of the stored
messages.

Two domains (:func:`gbpn.bp.dispatch.select` picks one):

- *linear* (any coupling whose :math:`\log H` spread is below 60): messages are stored
  normalised, :math:`m_{u\to v} \propto (b_u / m_{v\to u})^\top H` with
  :math:`b_u = \exp(\log p_u - \max)`: one exponential per node instead of one per edge;
- *log*: messages are stored as log-messages centred over the classes (beliefs ignore a
  constant per message, and centred values round far less in half precision than
  log-normalised ones), for wider couplings and float16 storage.

Beliefs always accumulate in the log domain, from exactly the stored (rounded) messages that
the next step's cavity divides out.

A part of a partitioned graph (:mod:`gbpn.distributed`) also has *cut* edges
(:class:`Boundary`): for a cut edge :math:`u \to w` with :math:`u` local, this part stores
only the incoming :math:`m_{w\to u}`. Each step it computes :math:`m_{u\to w}` from
:math:`b_u` and that stored message, sends it to :math:`w`'s part and receives the new
:math:`m_{w\to u}` in return (damping is applied by the receiver, which holds the old value).
Every directed message is therefore computed once and stored once over all parts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from gbpn.memory import populated_zeros
from gbpn.bp.functional import clamp_log_potential, log_normalize, normalized_message
from gbpn.bp.problem import BPProblem, BPResult, Capability, needs_grad

@dataclass
class Boundary:
    r"""The cut edges of one part, and how to swap messages over them.

    ``node[k]`` is the local endpoint of cut edge ``k``; rows are grouped by the rank that owns
    the other endpoint (``counts[q]`` rows for rank ``q``, ascending ``q``) and, within a peer, in
    the order of the global edge list, so both parts list a shared edge at the same position. ``exchange(send, send_counts, recv)`` starts sending
    ``send_counts[q]`` consecutive rows to rank ``q`` and returns a function that waits for the
    rows received into ``recv``, grouped the same way (``torch.distributed.all_to_all_single`` with
    ``async_op=True``), so the local edges are computed while messages travel. ``rounds`` (the
    same on every rank) splits each step's exchange so that only ``ceil(count / rounds)`` rows per
    peer are in flight at a time.
    """

    node: Tensor
    counts: List[int]
    exchange: Callable[[Tensor, List[int], Tensor], Callable[[], Tensor]]
    rounds: int = 1
    bytes_sent: int = field(default=0, init=False)

    def round_spans(self, k: int) -> List[Tuple[int, int]]:
        """Rows ``[lo, hi)`` of round ``k``, one span per peer (possibly empty)."""
        out, start = [], 0
        for n in self.counts:
            size = -(-n // self.rounds) if n else 0
            lo = min(k * size, n)
            out.append((start + lo, start + min(lo + size, n)))
            start += n
        return out


class _Linear:
    r"""Messages in the linear domain. Stored as :math:`s\,m - o` for the normalised message :math:`m`,
    with :math:`s = c`: :math:`c\,m` in the compute dtype (:math:`o = 0`), and in a narrower storage
    type as the deviation from uniform, :math:`c\,m - 1` (:math:`o = 1`), which rounds far less for the
    near-uniform messages most edges carry (bfloat16 keeps 8 bits of each stored value). The scale
    :math:`c` centres the log-messages that beliefs sum near 0 instead of :math:`-\log c`: a node with
    thousands of neighbours then sums small numbers and keeps float32's precision."""

    def __init__(self, log_H: Tensor, damping: float, c: int, deviation: bool):
        self.H = torch.exp(log_H - log_H.max())
        self.row_sum = self.H.sum(dim=1)
        self.damping = damping
        self.scale, self.offset = float(c), (1.0 if deviation else 0.0)
        self.init = 1.0 / c * self.scale - self.offset

    def table_(self, log_belief: Tensor, out: Tensor) -> Tensor:
        """The rows the cavities read, into ``out``: beliefs scaled to a maximum of 1."""
        return torch.exp(torch.sub(log_belief, log_belief.amax(dim=-1, keepdim=True), out=out), out=out)

    def load_(self, stored: Tensor) -> Tensor:
        """Stored values (a compute-dtype copy) to something proportional to the message, in place."""
        return stored.add_(self.offset) if self.offset else stored

    def cavity_(self, rows: Tensor, rev_msg: Tensor) -> Tensor:
        return rows.div_(rev_msg)

    def message(self, cav: Tensor) -> Tensor:
        return (cav @ self.H).div_((cav @ self.row_sum).unsqueeze(-1))

    def stored_message_(self, prod: Tensor, c: int) -> Tensor:
        """``prod = cav @ [H | H 1]`` to the stored form of the normalised messages, in place."""
        new = prod[:, :c].mul_(prod[:, c:].reciprocal().mul_(self.scale))
        return new.sub_(self.offset) if self.offset else new

    def damp(self, new: Tensor, loaded: Tensor) -> Tensor:
        return new.mul_(1 - self.damping).add_(loaded, alpha=self.damping / self.scale)

    def to_store(self, new: Tensor) -> Tensor:
        new = new.mul_(self.scale)
        return new.sub_(self.offset) if self.offset else new

    def normalized_(self, stored: Tensor) -> Tensor:
        return self.load_(stored).div_(self.scale)

    def log_(self, stored: Tensor) -> Tensor:
        """Log-messages (up to a constant per message) of a compute-dtype copy of stored values, in place."""
        return stored.log1p_() if self.offset else stored.log_()


class _Log:
    """Log-messages stored centred over the classes."""

    def __init__(self, log_H: Tensor, damping: float):
        self.log_H = log_H
        self.damping = damping
        self.init = 0.0

    def table_(self, log_belief: Tensor, out: Tensor) -> Tensor:
        """The rows the cavities read, into ``out``: the log-beliefs themselves."""
        return out.copy_(log_belief)

    def load_(self, stored: Tensor) -> Tensor:
        return stored

    def cavity_(self, rows: Tensor, rev_msg: Tensor) -> Tensor:
        return rows.sub_(rev_msg)

    def message(self, cav: Tensor) -> Tensor:
        return normalized_message(cav, self.log_H)

    def damp(self, new: Tensor, loaded: Tensor) -> Tensor:
        return log_normalize(torch.logaddexp(new + math.log1p(-self.damping),
                                             log_normalize(loaded) + math.log(self.damping)))

    def to_store(self, new: Tensor) -> Tensor:
        return new - new.mean(-1, keepdim=True)

    def normalized_(self, stored: Tensor) -> Tensor:
        return log_normalize(stored)

    def log_(self, stored: Tensor) -> Tensor:
        return stored


class _PairRun:
    """The buffers of one :func:`pair_bp` call and its step, chunk by chunk.

    Chunk buffers, reused: cavities (then the logs of the stored messages), previous messages in the
    compute dtype (mixed-dtype arithmetic is several times slower than a copy), products; node
    buffers, reused every step: the beliefs' sums, the beliefs, the table the cavities read."""

    def __init__(self, log_self: Tensor, pairs: Tensor, log_H: Tensor, damping: float, chunk: int,
                 message_dtype: torch.dtype, boundary: Optional[Boundary], linear: bool):
        n, c = log_self.shape
        dtype, device = log_self.dtype, log_self.device
        self.same = message_dtype == dtype  # no round trip through the storage type
        self.domain = (_Linear(log_H.to(dtype), damping, c, deviation=not self.same) if linear
                       else _Log(log_H.to(dtype), damping))
        self.log_self, self.pairs, self.damping, self.chunk, self.boundary = log_self, pairs, damping, chunk, boundary
        self.msg = _buffer((2, pairs.size(1), c), message_dtype, device, self.domain.init)
        self.cut = None if boundary is None else _buffer((boundary.node.numel(), c), message_dtype, device,
                                                         self.domain.init)
        rows = 2 * min(chunk, max(pairs.size(1), 1))
        self.cav_buf = _buffer((rows, c), dtype, device)
        self.old_buf = None if self.same else _buffer((2, rows // 2, c), dtype, device)
        self.acc, self.belief = _buffer((n, c), dtype, device), _buffer((n, c), dtype, device)
        # the log domain's cavities read the beliefs themselves; the linear domain's a table of its own
        self.own_table = linear
        self.table = _buffer((n, c), dtype, device) if linear else self.belief
        self.fused = linear and damping == 0
        self.H1 = self.prod_buf = None
        if self.fused:  # [H | H 1]: one product gives the messages and their normalisers
            self.H1 = torch.cat([self.domain.H, self.domain.row_sum.unsqueeze(1)], 1)
            self.prod_buf = _buffer((rows, c + 1), dtype, device)
        self.round_buf = None
        if boundary is not None:  # rounds run between chunks: their scratch rows can be the chunks'
            spare = {"f": self.old_buf, "cav": self.cav_buf, "prod": self.prod_buf}
            self.round_buf = _round_buffers(boundary, c, dtype, message_dtype, self.fused, spare)
        self.domain.table_(log_self, self.table)

    def step(self, known_idx: Optional[Tensor], clamp: Optional[Tensor], clamp_table: Optional[Tensor]) -> None:
        """One synchronous step: every chunk of pairs (the cut edges' rounds in between), then the beliefs."""
        self.acc.copy_(self.log_self)
        b = self.boundary
        # cut edges: a round's messages travel while the next local chunks are computed
        rounds = (_Rounds(b, self.domain, self.table, self.cut, self.acc, self.H1, self.round_buf)
                  if b is not None else None)
        num_pairs = self.pairs.size(1)
        num_chunks = -(-num_pairs // self.chunk)
        for i, start in enumerate(range(0, num_pairs, self.chunk)):
            self._chunk(slice(start, start + self.chunk))
            if rounds is not None:
                rounds.advance(-(-(i + 1) * b.rounds // num_chunks))
        if rounds is not None:
            rounds.advance(b.rounds)
            rounds.finish()
        _log_normalize_into(self.acc, self.belief, self.table if self.own_table else None)
        if known_idx is not None:
            self.belief[known_idx] = clamp
            if clamp_table is not None:
                self.table[known_idx] = clamp_table

    def _chunk(self, s: slice) -> None:
        """The new messages of the pairs ``s``, both directions in place, and their share of the beliefs."""
        domain, c = self.domain, self.acc.size(1)
        uv = self.pairs[:, s].reshape(-1).long()  # u then v
        p = uv.numel() // 2
        stored = self.msg[:, s]  # [2, p, c] in the storage type: row 0 u -> v, row 1 v -> u
        old = stored if self.same else domain.load_(self.old_buf[:, :p].copy_(stored))
        cav = torch.index_select(self.table, 0, uv, out=self.cav_buf[: 2 * p])
        domain.cavity_(cav[:p], old[1])  # b_u / m_{v -> u}
        domain.cavity_(cav[p:], old[0])
        if self.fused:
            new = domain.stored_message_(torch.mm(cav, self.H1, out=self.prod_buf[: 2 * p]), c).view(2, p, c)
        else:
            new = domain.message(cav).view(2, p, c)
            if self.damping > 0:
                new = domain.damp(new, old)
            new = domain.to_store(new)
        stored.copy_(new)
        # the beliefs take exactly the stored (rounded) messages that the next cavity divides out
        lg = domain.log_(new if self.same else cav.view(2, p, c).copy_(stored))
        self.acc.index_add_(0, uv[p:], lg[0])
        self.acc.index_add_(0, uv[:p], lg[1])


@torch.no_grad()
def pair_bp(
    log_self: Tensor,
    pairs: Tensor,
    log_H: Tensor,
    num_steps: int,
    damping: float = 0.0,
    known_idx: Optional[Tensor] = None,
    clamp: Optional[Tensor] = None,
    chunk: int = 1 << 20,
    message_dtype: torch.dtype = torch.float32,
    boundary: Optional[Boundary] = None,
    on_step: Optional[Callable[[int], None]] = None,
    *,
    linear: bool,
) -> Tensor:
    r"""``num_steps`` synchronous BP steps on the local ``pairs`` (and the cut edges of
    ``boundary``); returns the normalised log-beliefs of the local nodes.

    Args:
        log_self: normalised log self-potentials ``[n, c]``, already clamped at ``known_idx``;
            its dtype is the compute dtype.
        pairs: local undirected edges ``[2, P]`` (local node ids, any integer dtype).
        log_H: the coupling's log ``[c, c]``.
        known_idx, clamp: nodes whose belief is pinned to ``clamp`` ``[k, c]`` every step.
        chunk: pairs (and cut edges) per chunk.
        message_dtype: storage of the messages (bfloat16 halves float32).
        boundary: the cut edges of this part, ``None`` on a whole graph.
        on_step: called with the step number after each step.
        linear: the linear domain (decided by :func:`gbpn.bp.dispatch.select`), else the log domain.
    """
    run = _PairRun(log_self, pairs, log_H, damping, chunk, message_dtype, boundary, linear)
    clamp_table = (run.domain.table_(clamp, torch.empty_like(clamp)) if known_idx is not None and run.own_table
                   else None)
    for step in range(num_steps):
        run.step(known_idx, clamp, clamp_table)
        if on_step is not None:
            on_step(step)
    return run.belief if num_steps > 0 else log_self


class Pairs(Capability):
    """In-place inference on undirected pairs (:func:`pair_bp`), whole or one part of a partitioned graph:
    the mode of :meth:`~gbpn.bp.layer.BeliefPropagation.infer_pairs`."""

    name = "pairs"
    device_type = None

    def reasons(self, p: BPProblem) -> List[str]:
        why = []
        if p.pairs is None:
            why.append("runs undirected pairs (infer_pairs)")
        if p.edge_weight is not None or p.message_weight is not None:
            why.append("no edge or message weights")
        if p.return_messages or p.messages is not None:
            why.append("its messages stay in place: none returned or given")
        if needs_grad(p.log_self, p.log_H):
            why.append("inference only")
        return why

    def run(self, p: BPProblem) -> BPResult:
        dtype = torch.promote_types(p.dtype, torch.float32)  # the caller's precision, at least float32
        known_idx, clamp = None, None
        if p.known_mask is not None and bool(p.known_mask.any()):
            known_idx = p.known_mask.nonzero().view(-1)
            clamp = clamp_log_potential(p.known_labels[known_idx], p.num_classes, dtype)
        log_self = log_normalize(p.log_self.to(dtype))
        if clamp is not None:
            log_self[known_idx] = clamp
        return BPResult(pair_bp(log_self, p.pairs, p.log_H.to(dtype), p.num_steps, p.damping, known_idx, clamp,
                                p.pair_chunk, p.message_dtype, p.boundary, p.on_step, linear=p.linear), [])


def _buffer(shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device, fill: float = 0.0) -> Tensor:
    """A tensor filled with ``fill``, its pages mapped up front on the CPU (:mod:`gbpn.memory`)."""
    if device.type != "cpu":
        return torch.full(shape, fill, dtype=dtype, device=device)
    out = populated_zeros(shape, dtype)
    return out.fill_(fill) if fill != 0 else out


def _log_normalize_into(acc: Tensor, out: Tensor, table: Optional[Tensor]) -> None:
    """``out = acc - logsumexp(acc)`` row-wise, without ``[n, c]`` temporaries (``acc`` is
    overwritten); ``table`` (if given) receives ``exp(acc - max acc)``, the next step's
    linear-domain table, as a by-product."""
    mx = acc.amax(-1, keepdim=True)
    torch.sub(acc, mx, out=out)
    ex = torch.exp(out, out=table if table is not None else acc)  # acc is rewritten next step
    out.sub_(ex.sum(-1, keepdim=True).log_())


class _Rounds:
    """One step's exchange over the cut edges, round by round: a round's outgoing messages are
    computed and sent, and received (stored, added to the beliefs) only when the next round
    starts, so each round travels while other work runs. ``buffers`` (:func:`_round_buffers`) are
    reused by every round of every step: no allocation (and page faults) per round."""

    def __init__(self, b: Boundary, domain, table: Tensor, cut: Tensor, acc: Tensor, H1: Optional[Tensor],
                 buffers: dict):
        self.b, self.domain, self.table, self.cut, self.acc, self.H1 = b, domain, table, cut, acc, H1
        self.buf = buffers
        self.started, self.pending = 0, None

    def advance(self, target: int) -> None:
        """Start rounds until ``target`` have started (finishing the one in flight before each)."""
        while self.started < min(target, self.b.rounds):
            self.finish()
            self.pending = self._send(self.started)
            self.started += 1

    def _send(self, k: int):
        b, d, c, buf = self.b, self.domain, self.cut.size(1), self.buf
        spans = b.round_spans(k)
        old, off = [], 0
        for lo, hi in spans:
            m = hi - lo
            if m == 0:
                old.append(None)
                continue
            prev = d.load_(buf["f"][:m].copy_(self.cut[lo:hi]))  # the incoming m_{w -> u}
            cav = torch.index_select(self.table, 0, b.node[lo:hi].long(), out=buf["cav"][:m])
            d.cavity_(cav, prev)
            if self.H1 is not None:
                new = d.stored_message_(torch.mm(cav, self.H1, out=buf["prod"][:m]), c)
            else:
                new = d.to_store(d.message(cav))
            buf["send"][off:off + m].copy_(new)
            old.append(prev.clone() if d.damping > 0 else None)  # the receiver damps: it holds the old message
            off += m
        b.bytes_sent += off * c * buf["send"].element_size()
        counts = [hi - lo for lo, hi in spans]
        return spans, old, b.exchange(buf["send"][:off], counts, buf["recv"][:off])

    def finish(self) -> None:
        if self.pending is None:
            return
        spans, old, wait = self.pending
        self.pending = None
        recv, d, dtype, off = wait(), self.domain, self.table.dtype, 0
        for (lo, hi), prev in zip(spans, old):
            m = hi - lo
            if m == 0:
                continue
            r = recv[off:off + m]
            off += m
            if prev is not None:
                r = d.to_store(d.damp(d.normalized_(r.to(dtype, copy=True)), prev))
            self.cut[lo:hi].copy_(r)
            self.acc.index_add_(0, self.b.node[lo:hi].long(), d.log_(self.buf["f"][:m].copy_(self.cut[lo:hi])))


def _round_buffers(b: Boundary, c: int, dtype: torch.dtype, message_dtype: torch.dtype, fused: bool,
                   spare: dict) -> dict:
    """Buffers for the largest round. ``spare`` maps the scratch buffers (``f``, ``cav``, ``prod``,
    used only inside a round's send or finish) to chunk buffers they may live in (or ``None``):
    one is used when it has the dtype and room. ``send`` and ``recv`` travel while chunks are
    computed and always get their own."""
    rows = sum(-(-n // b.rounds) for n in b.counts)

    def scratch(name: str, cols: int) -> Tensor:
        buf = spare.get(name)
        if buf is not None and buf.dtype == dtype and buf.is_contiguous() and buf.numel() >= rows * cols:
            return buf.view(-1)[: rows * cols].view(rows, cols)
        return torch.empty((rows, cols), dtype=dtype)

    out = {"f": scratch("f", c), "cav": scratch("cav", c),
           "send": torch.empty((rows, c), dtype=message_dtype), "recv": torch.empty((rows, c), dtype=message_dtype)}
    if fused:
        out["prod"] = scratch("prod", c + 1)
    return out
