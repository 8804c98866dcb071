import threading
from collections import Counter

import pytest
import torch

from gbpn.distributed.partition import (
    build_part,
    load_parts,
    partition,
    range_parts,
    _part_counter,
    refine_parts,
    save_parts,
)
from gbpn.graph.degree import pair_degree
from gbpn.errors import GBPNError
from gbpn import BeliefPropagation
from gbpn.bp import Boundary


def random_pairs(n, m, seed):
    g = torch.Generator().manual_seed(seed)
    u, v = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
    return unique_pairs(u, v, n)


def unique_pairs(u, v, n):
    """The distinct undirected edges ``[2, P]`` (smaller id first) among ``u -> v``, self-loops dropped."""
    keep = u != v
    key = torch.unique(torch.minimum(u, v)[keep] * n + torch.maximum(u, v)[keep])
    return torch.stack([key // n, key % n])


@pytest.mark.parametrize("method", ["ranges", "refined", "metis"])
@pytest.mark.parametrize("world", [2, 3])
def test_parts_cover_every_directed_edge_once(method, world):
    pytest.importorskip("pymetis") if method == "metis" else None
    n, pairs = 200, random_pairs(200, 900, 0)
    part = partition(pairs, n, world, method)
    assert sorted(part.unique().tolist()) == list(range(world))
    computed, received = Counter(), Counter()
    cut_rows = {}
    for r in range(world):
        p = build_part(pairs, part, r, world)
        assert torch.equal(p.nodes, (part == r).nonzero().view(-1))
        g = p.nodes[p.pairs.long()]  # local edges in global ids: both directions live here
        for a, b in g.t().tolist():
            computed[(a, b)] += 1
            computed[(b, a)] += 1
            received[(a, b)] += 1
            received[(b, a)] += 1
        u = p.nodes[p.cut_node.long()]
        assert bool((part[u] == r).all()) and bool((part[p.cut_other] != r).all())
        for a, b in zip(u.tolist(), p.cut_other.tolist()):
            computed[(a, b)] += 1  # the owner of the source computes a -> b
            received[(b, a)] += 1  # and stores the incoming b -> a
        assert p.halo == p.cut_other.unique().numel()
        assert sum(p.cut_peer_counts) == p.cut_node.numel() and p.cut_peer_counts[r] == 0
        start = 0
        for q, k in enumerate(p.cut_peer_counts):
            cut_rows[(r, q)] = [tuple(sorted(e)) for e in zip(u[start:start + k].tolist(),
                                                                p.cut_other[start:start + k].tolist())]
            start += k
    directed = {(a, b) for a, b in pairs.t().tolist()} | {(b, a) for a, b in pairs.t().tolist()}
    assert set(computed) == directed and set(computed.values()) == {1}
    assert set(received) == directed and set(received.values()) == {1}
    for (r, q), rows in cut_rows.items():  # both ends list a shared edge at the same row
        assert rows == cut_rows[(q, r)]


def test_range_parts_balance_the_edges():
    n, pairs = 1000, random_pairs(1000, 20000, 1)
    part = range_parts(pairs, n, 4)
    assert bool((part[1:] >= part[:-1]).all())  # contiguous ranges
    deg = torch.bincount(pairs.view(-1), minlength=n)
    per_part = torch.zeros(4, dtype=torch.long).index_add_(0, part.long(), deg)
    assert float(per_part.max()) < 1.05 * float(per_part.float().mean())


def planted_pairs(n, parts, m, p_in, seed):
    """Random pairs among ``n`` nodes in ``parts`` equal planted groups (a fraction ``p_in`` of the
    edges inside a group), node ids shuffled so that contiguous ranges know nothing of the groups."""
    g = torch.Generator().manual_seed(seed)
    group = torch.arange(n) % parts
    u = torch.randint(0, n, (m,), generator=g)
    inside = torch.rand(m, generator=g) < p_in
    v = torch.randint(0, n // parts, (m,), generator=g) * parts
    v = torch.where(inside, v + group[u], torch.randint(0, n, (m,), generator=g))
    pairs = unique_pairs(u, v, n)
    return torch.randperm(n, generator=g)[pairs]


def cut_fraction(pairs, part):
    return float((part[pairs[0]] != part[pairs[1]]).float().mean())


@pytest.mark.parametrize("parts", [2, 3])
def test_refinement_cuts_fewer_edges_and_keeps_the_work_balanced(parts):
    n, pairs = 3000, planted_pairs(3000, parts, 30000, 0.9, 4)
    start = range_parts(pairs, n, parts)
    refined = refine_parts(pairs, start, parts, iterations=30)
    deg = pair_degree(pairs, n)
    for part in (start, refined):
        work = torch.zeros(parts, dtype=torch.long).index_add_(0, part.long(), deg)
        assert float(work.max()) < 1.03 * float(work.float().mean())  # directed edges per part
    # ranges cut about 1 - 1/parts of the edges; the planted groups cut 10%
    assert cut_fraction(pairs, start) > 0.9 * (1 - 1 / parts)
    assert cut_fraction(pairs, refined) < 0.5 * cut_fraction(pairs, start)
    assert torch.equal(refined, refine_parts(pairs, start, parts, iterations=30))  # seeded
    assert torch.equal(refine_parts(pairs, start, parts, iterations=0), start)


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_neighbour_counts_per_part_are_exact(parts, index_dtype):
    n, pairs = 500, planted_pairs(500, parts, 4000, 0.7, 2).to(index_dtype)
    part = torch.randint(0, parts, (n,), generator=torch.Generator().manual_seed(0)).to(torch.int8)
    expected = torch.zeros(n, parts, dtype=torch.int32)
    for a, b in ((pairs[0], pairs[1]), (pairs[1], pairs[0])):
        expected.index_put_((a.long(), part[b.long()].long()), torch.ones(a.numel(), dtype=torch.int32),
                            accumulate=True)
    got = _part_counter(pairs[0], pairs[1], pair_degree(pairs, n).to(torch.int32), parts, None)(part)
    assert torch.equal(got, expected)


def run_ranks(world, work, barrier):
    """``work(r)`` on one thread per rank ``r``; a failing rank breaks ``barrier`` so the others
    stop waiting, and its exception is raised here (a thread's exception would otherwise vanish)."""
    errors = []

    def run(r):
        try:
            work(r)
        except Exception as err:
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_narrow_integer_ids_are_accepted():
    n, pairs = 300, planted_pairs(300, 3, 2000, 0.9, 3)
    for method in ("ranges", "refined"):
        part = partition(pairs, n, 3, method)
        assert torch.equal(partition(pairs.to(torch.int16), n, 3, method), part)
        for r in range(3):
            a, b = build_part(pairs, part, r, 3), build_part(pairs.to(torch.int16), part, r, 3)
            assert torch.equal(a.pairs, b.pairs) and torch.equal(a.cut_node, b.cut_node)


def shared_by_ranks(world, compute):
    """``compute(share, all_reduce)`` on ``world`` threads standing for ranks, ``all_reduce`` summing
    in place across them; every thread's result."""
    box, barrier, got = {}, threading.Barrier(world), {}

    def run(r):
        def all_reduce(t):
            box[r] = t.clone()
            barrier.wait()
            t.copy_(torch.stack([box[q] for q in range(world)]).sum(0))
            barrier.wait()
        got[r] = compute((r, world), all_reduce)

    run_ranks(world, run, barrier)
    return [got[r] for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_refinement_shared_by_ranks_equals_one_process(world):
    """Each rank counts its share of the edges, the counts are summed: every rank gets the single
    process's parts."""
    n, parts = 3000, 3
    pairs = planted_pairs(n, parts, 30000, 0.9, 5)
    start = range_parts(pairs, n, parts)
    alone = refine_parts(pairs, start, parts, iterations=6)
    got = shared_by_ranks(world, lambda share, all_reduce: refine_parts(pairs, start, parts, iterations=6, share=share,
                                                                        all_reduce=all_reduce))
    assert not torch.equal(alone, start)
    assert all(torch.equal(g, alone) for g in got)


def test_partition_shared_by_ranks_equals_one_process():
    """The degrees, the ranges and the refinement counted in shares: every rank gets the single
    process's parts."""
    n, parts = 2000, 2
    pairs = planted_pairs(n, parts, 20000, 0.8, 6).to(torch.int32)
    alone = partition(pairs, n, parts, "refined")
    got = shared_by_ranks(2, lambda share, all_reduce: partition(pairs, n, parts, "refined", share=share,
                                                                 all_reduce=all_reduce))
    assert cut_fraction(pairs.long(), alone) < 0.5
    assert all(torch.equal(g, alone) for g in got)


def test_parts_file_round_trip_and_refusals(tmp_path):
    n, pairs = 600, planted_pairs(600, 2, 3000, 0.9, 1)
    part = partition(pairs, n, 2, "refined")
    path = tmp_path / "parts.pt"
    assert load_parts(path, n, pairs.size(1), 2) is None  # no file yet: partition
    save_parts(path, part, pairs.size(1), "refined")
    got, method = load_parts(path, n, pairs.size(1), 2)
    assert torch.equal(got, part) and method == "refined"
    with pytest.raises(GBPNError, match="3 processes"):
        load_parts(path, n, pairs.size(1), 3)
    with pytest.raises(GBPNError, match="graph with 600 nodes"):
        load_parts(path, n + 1, pairs.size(1), 2)
    with pytest.raises(GBPNError, match="graph with 600 nodes and"):
        load_parts(path, n, pairs.size(1) - 1, 2)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(GBPNError, match="corrupt or not a gbpn parts file"):
        load_parts(path, n, pairs.size(1), 2)


def test_edgeless_graph_has_parts():
    pairs = torch.empty((2, 0), dtype=torch.long)
    part = partition(pairs, 5, 2, "ranges")
    p = build_part(pairs, part, 0, 2)
    assert p.pairs.size(1) == 0 and p.cut_node.numel() == 0 and p.nodes.numel() >= 1


class ThreadExchange:
    """All-to-all between threads that stand in for ranks."""

    def __init__(self, world):
        self.world, self.box, self.barrier = world, {}, threading.Barrier(world)

    def for_rank(self, r):
        def exchange(send, counts, recv):
            self.box[r] = list(send.split(counts))
            self.barrier.wait()
            torch.cat([self.box[q][r] for q in range(self.world)], out=recv)
            self.barrier.wait()
            return lambda: recv
        return exchange


def partitioned_bp(layer, log_self, pairs, steps, labels, mask, world, method, dtype, message_dtype, chunk=17):
    n = log_self.size(0)
    part = partition(pairs, n, world, method)
    out = torch.empty_like(log_self, dtype=dtype)
    ex = ThreadExchange(world)

    def run(r):
        p = build_part(pairs, part, r, world)
        b = Boundary(p.cut_node, p.cut_peer_counts, ex.for_rank(r), rounds=3)
        out[p.nodes] = layer.infer_pairs(log_self[p.nodes].to(dtype), p.pairs, labels[p.nodes], mask[p.nodes], steps,
                                         chunk, message_dtype, boundary=b)

    run_ranks(world, run, ex.barrier)
    return out


@pytest.mark.parametrize("damping", [0.0, 0.3])
@pytest.mark.parametrize("world,method", [(2, "ranges"), (3, "metis")])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("chunk", [17, 4096])  # small chunks; chunks whose buffers the rounds reuse
def test_partitioned_bp_equals_single_process_bp(damping, world, method, wide, chunk):
    if method == "metis":
        pytest.importorskip("pymetis")
    n, pairs = 120, random_pairs(120, 500, 2)
    torch.manual_seed(3)
    log_self = torch.randn(n, 4, dtype=torch.float64)
    labels, mask = torch.randint(0, 4, (n,)), torch.rand(n) < 0.25
    layer = BeliefPropagation(4, num_steps=6, damping=damping)
    with torch.no_grad():
        layer.coupling.weight.normal_()
        if wide:  # a coupling too wide for the linear domain: the log-domain path
            layer.coupling.weight.mul_(40.0)
    log_H = layer.log_H.detach().double()
    ei = torch.cat([pairs, pairs.flip(0)], 1)
    with torch.no_grad():
        ref = layer(log_self, ei, known_labels=labels, known_mask=mask)
    got = partitioned_bp(layer, log_self, pairs, 6, labels, mask, world, method, torch.float64, torch.float64, chunk)
    torch.testing.assert_close(got, ref, atol=1e-10, rtol=0)
    assert torch.equal(got[mask].argmax(1), labels[mask])  # evidence stays clamped in every part
    if wide:  # float32 cannot hold this coupling (the BP layer refuses it)
        assert float(log_H.max() - log_H.min()) > 60
        return
    # stored in bfloat16 (as deviations from uniform, or centred logs): only the storage rounds
    half = partitioned_bp(layer, log_self, pairs, 6, labels, mask, world, method, torch.float32, torch.bfloat16,
                          chunk)
    assert (half.double().exp() - ref.exp()).abs().max() < 3e-2


def test_one_process_partitioned_inference_with_memory_mapped_or_sparse_inputs(tmp_path):
    # the memory-mapped features and edges are given back after use, sparse features are left alone:
    # the beliefs are the same as from ordinary tensors
    from torch_geometric.data import Data

    from gbpn.distributed.inference import partitioned_beliefs
    from gbpn.models.gbpn import GBPN

    n, f = 60, 12
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(n, f, generator=g) < 0.2).float()
    pairs = random_pairs(n, 240, 5).to(torch.int32)
    torch.manual_seed(0)
    model = GBPN(f, 3)
    plain = Data(x=x, pairs=pairs, num_nodes=n)
    torch.save(x, tmp_path / "x.pt")
    torch.save(pairs, tmp_path / "pairs.pt")
    mapped = Data(x=torch.load(tmp_path / "x.pt", mmap=True), pairs=torch.load(tmp_path / "pairs.pt", mmap=True),
                  num_nodes=n)
    sparse = Data(x=x.to_sparse(), pairs=pairs, num_nodes=n)
    nodes, ref, _ = partitioned_beliefs(model, plain, num_steps=4)
    assert torch.equal(nodes, torch.arange(n))
    for data in (mapped, sparse):
        torch.testing.assert_close(partitioned_beliefs(model, data, num_steps=4)[1], ref, atol=1e-6, rtol=0)
    assert torch.equal(mapped.x, x) and torch.equal(mapped.pairs, pairs)


def test_a_partitioned_bp_step_gets_its_line_only_at_debug_or_when_slow(caplog, monkeypatch):
    import logging

    from torch_geometric.data import Data

    from gbpn.distributed import inference
    from gbpn.models.gbpn import GBPN

    n, f = 40, 6
    data = Data(x=torch.rand(n, f, generator=torch.Generator().manual_seed(2)), pairs=random_pairs(n, 120, 3),
                num_nodes=n)
    torch.manual_seed(0)
    model = GBPN(f, 3)

    def step_levels():
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="gbpn"):
            inference.partitioned_beliefs(model, data, num_steps=3)
        return [r.levelname for r in caplog.records if r.getMessage().startswith("BP step ")]

    assert step_levels() == ["DEBUG"] * 3  # fast steps: shown with -v only
    monkeypatch.setattr(inference, "SLOW_STEP", 0.0)  # every step "slow": at default verbosity
    assert step_levels() == ["INFO"] * 3
