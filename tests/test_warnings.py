"""The library's own calls raise no deprecation warnings and no warning a user cannot act on."""
import importlib
import warnings

import pytest
import torch
from torch_geometric.data import Data


def test_modules_compile_without_invalid_escape_sequences():
    import pkgutil

    import gbpn

    for mod in pkgutil.walk_packages(gbpn.__path__, "gbpn."):
        spec = importlib.util.find_spec(mod.name)
        source = spec.loader.get_source(mod.name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(source, spec.origin, "exec")  # an invalid escape is a warning at compile time


def test_metis_partition_uses_the_current_pymetis_call():
    pytest.importorskip("pymetis")
    from gbpn.graph.partition import metis_clusters
    from gbpn.graph.csr import CSRGraph

    ring = torch.stack([torch.arange(20), (torch.arange(20) + 1) % 20])
    ring = torch.cat([ring, ring.flip(0)], 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        clusters = metis_clusters(CSRGraph.from_edge_index(ring, 20), 2)
    assert set(clusters.tolist()) == {0, 1}


def test_layout_of_a_disconnected_graph_does_not_warn():
    from gbpn.experiments.convergence import node_layout

    g = torch.Generator().manual_seed(0)
    two_rings = torch.cat([torch.stack([torch.arange(15), (torch.arange(15) + 1) % 15]) + k for k in (0, 15)], 1)
    data = Data(x=torch.randn(30, 3, generator=g), edge_index=torch.cat([two_rings, two_rings.flip(0)], 1),
                num_nodes=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        xy, _ = node_layout(data)
    assert xy.shape == (30, 2)
