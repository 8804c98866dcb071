import torch

from gbpn.data import neighbour_agreement
from gbpn.data.generators import planted_partition_graph


def test_planted_partition_graph_homophily_sizes_and_seed():
    a = planted_partition_graph(3000, 15000, 8, 4, homophily=0.9, seed=1)
    b = planted_partition_graph(3000, 15000, 8, 4, homophily=0.9, seed=1)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    assert a.x.shape == (3000, 8) and a.num_classes == 4
    assert 0.8 * 2 * 15000 < a.edge_index.size(1) <= 2 * 15000  # a few duplicates and loops removed
    assert torch.equal(a.edge_index[:, a.rev_index], a.edge_index.flip(0))
    # same-class edges: homophily + (1 - homophily) / c
    assert abs(neighbour_agreement(a.edge_index, a.y) - (0.9 + 0.1 / 4)) < 0.03
    low = planted_partition_graph(3000, 15000, 8, 4, homophily=0.0, seed=1)
    assert abs(neighbour_agreement(low.edge_index, low.y) - 0.25) < 0.03
    deg = torch.bincount(a.edge_index[0], minlength=3000).float()
    assert deg.max() > 5 * deg.mean()  # heavy-tailed degrees
