import math

import torch
from conftest import undirected

from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.functional import aggregate, cavity, log_normalize
from gbpn.sampling import Exp3Sampler, optimal_probs, sample_tree, sampling_variance, uniform_probs, variance_ratios
from gbpn.graph.csr import CSRGraph


def _random_graph(n=30, m=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.unique(torch.cat([ei, ei.flip(0)], 1), dim=1)
    return ei, CSRGraph.from_edge_index(ei, n)


def _row_normalised(graph, values):
    rows = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree())
    return values / torch.zeros(graph.num_nodes, dtype=values.dtype).index_add(0, rows, values)[rows]


def test_message_weights_scale_incoming_log_messages():
    log_self = log_normalize(torch.randn(4, 3, dtype=torch.float64))
    log_msg = log_normalize(torch.randn(6, 3, dtype=torch.float64))
    src, dst = torch.tensor([0, 1, 2, 1, 0, 3]), torch.tensor([1, 0, 1, 2, 3, 0])
    w = torch.tensor([0.5, 2.0, 1.0, 3.0, 1.5, 0.25], dtype=torch.float64)
    expected = log_self.clone()
    for e in range(6):
        expected[dst[e]] += w[e] * log_msg[e]
    assert torch.allclose(aggregate(log_self, log_msg, dst, w), log_normalize(expected))
    rev = torch.tensor([1, 0, 3, 2, 5, 4])
    belief = aggregate(log_self, log_msg, dst, w)
    assert torch.allclose(cavity(belief, log_msg, src, rev, w), belief[src] - w[rev, None] * log_msg[rev])
    # all-one weights are the unweighted update, in BP too
    ei = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    bp = BeliefPropagation(3, num_steps=4).double()
    with torch.no_grad():
        bp.coupling.weight.copy_(torch.randn(3, 3))
    phi = log_normalize(torch.randn(4, 3, dtype=torch.float64))
    ones = torch.ones(ei.size(1), dtype=torch.float64)
    assert torch.allclose(bp(phi, ei, message_weight=ones), bp(phi, ei))


def test_importance_weighted_tree_sums_are_unbiased():
    ei, graph = _random_graph()
    gen = torch.Generator().manual_seed(1)
    probs = _row_normalised(graph, torch.rand(graph.col.numel(), generator=gen, dtype=torch.float64) + 0.05)
    x = torch.randn(graph.num_nodes, dtype=torch.float64, generator=gen)
    targets = torch.arange(graph.num_nodes)
    fanout, reps = 3, 600
    sums = torch.zeros(reps, graph.num_nodes, dtype=torch.float64)
    for r in range(reps):
        tree = sample_tree(graph, targets, 1, fanout, gen, probs=probs)
        child = tree.parent >= 0
        assert (torch.bincount(tree.parent[child], minlength=tree.num_nodes)[:30] <= fanout).all()
        sums[r].index_add_(0, tree.parent[child], tree.weight[child] * x[tree.node_map[child]])
    deg = graph.degree().double()
    rows = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree())
    target = torch.zeros(graph.num_nodes, dtype=torch.float64).index_add(0, rows, x[graph.col])
    target = target * torch.clamp(fanout / deg, max=1.0)  # (d / n) * sum over all neighbours
    z = (sums.mean(0) - target) / (sums.std(0) / math.sqrt(reps)).clamp_min(1e-12)
    assert z.abs().max() < 5


def test_uniform_probs_give_unit_weights_and_message_weight_layout():
    _, graph = _random_graph(seed=2)
    tree = sample_tree(graph, torch.arange(10), 2, 2, torch.Generator().manual_seed(0), probs=uniform_probs(graph))
    assert torch.allclose(tree.weight, torch.ones_like(tree.weight))
    mw = tree.message_weight()
    assert mw.numel() == tree.edge_index.size(1)
    assert sample_tree(graph, torch.arange(10), 2, 2).message_weight() is None


def test_variance_formula_matches_monte_carlo_and_optimum_is_lowest():
    gen = torch.Generator().manual_seed(3)
    n, c, d = 12, 3, 4
    log_msg = log_normalize(2 * torch.randn(n, c, generator=gen, dtype=torch.float64))
    dst = torch.zeros(n, dtype=torch.long)
    p = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    p = p / p.sum()
    var = sampling_variance(log_msg, dst, p, 1, d)[0]
    m = log_msg - log_msg.mean(-1, keepdim=True)  # the centred messages the variance is about
    draws = torch.multinomial(p.expand(20000, n), d, replacement=True, generator=gen)
    est = (m[draws] / (n * p[draws]).unsqueeze(-1)).sum(1)  # [reps, c]
    assert abs(float(est.var(0).sum()) / float(var) - 1) < 0.05
    v_opt = sampling_variance(log_msg, dst, optimal_probs(log_msg, dst, 1), 1, d)[0]
    v_uni = sampling_variance(log_msg, dst, torch.full((n,), 1.0 / n, dtype=torch.float64), 1, d)[0]
    assert v_opt <= var and v_opt <= v_uni
    # nodes that keep every neighbour have no sampling variance
    assert sampling_variance(log_msg, dst, p, 1, n)[0] == 0


def test_exp3_moves_towards_informative_neighbours_and_lowers_variance():
    leaves = 12
    ei = undirected([(0, k) for k in range(1, leaves + 1)])
    graph = CSRGraph.from_edge_index(ei, leaves + 1)
    strength = torch.ones(leaves + 1, dtype=torch.float64)
    strength[1:4] = 8.0  # three leaves send much stronger messages
    base = torch.tensor([1.0, -1.0], dtype=torch.float64)
    sampler = Exp3Sampler(graph, fanout=2, gamma=0.05)
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        for _ in range(4):
            tree = sample_tree(graph, torch.tensor([0]), 1, 2, gen, probs=sampler.probs)
            msg = strength[tree.node_map].unsqueeze(-1) * base
            log_msg = torch.cat([msg[tree.parent >= 0], torch.zeros_like(msg[tree.parent >= 0])])
            sampler.observe(tree, log_msg)
        sampler.end_epoch()
    row0 = slice(int(graph.rowptr[0]), int(graph.rowptr[1]))
    p = sampler.probs[row0]
    strong = strength[graph.col[row0]] > 1
    assert p[strong].min() > p[~strong].max()
    full = strength[1:].unsqueeze(-1) * base
    dst = torch.zeros(leaves, dtype=torch.long)
    v = lambda q: float(sampling_variance(full, dst, q, 1, 2)[0])  # noqa: E731
    assert v(p) < 0.5 * v(torch.full((leaves,), 1.0 / leaves, dtype=torch.float64))


def test_parallel_messages_have_no_optimal_variance_and_undefined_ratios():
    # two classes: every centred message is (a, -a); with one sign they are parallel, so p*
    # samples without variance and a ratio over it is undefined, not rounding noise's 1e15
    n, d = 9, 3
    a = 2 * torch.rand(n, generator=torch.Generator().manual_seed(10), dtype=torch.float64) + 0.1
    log_msg = torch.log_softmax(torch.stack([a, -a], 1).float(), -1)
    dst = torch.zeros(n, dtype=torch.long)
    assert sampling_variance(log_msg, dst, optimal_probs(log_msg, dst, 1), 1, d)[0] == 0
    assert sampling_variance(log_msg, dst, torch.full((n,), 1 / n, dtype=torch.float64), 1, d)[0] > 0
    ei = torch.stack([torch.arange(1, n + 1), torch.zeros(n, dtype=torch.long)])
    graph = CSRGraph.from_edge_index(ei.flip(0), n + 1)  # row 0 lists its neighbours
    r = variance_ratios(log_msg, ei, n + 1, d, uniform_probs(graph), graph)
    assert r["nodes"] == 1
    assert math.isnan(r["total_uniform_vs_optimal"]) and math.isnan(r["median_uniform_vs_optimal"])
    assert r["total_importance_vs_uniform"] == 1.0
