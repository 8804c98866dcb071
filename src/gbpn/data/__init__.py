"""Data: loaders, graph cleaning, splits and the synthetic MRF sampler."""
from gbpn.data.datasets import available_datasets, data_root, load_dataset
from gbpn.data.byo import load_byo
from gbpn.data.graph import clean_graph, validate_data
from gbpn.graph.degree import degree
from gbpn.data.mrf import grid_graph, make_synthetic, neighbour_agreement, sample_mrf
from gbpn.data.splits import random_split

__all__ = [
    "available_datasets", "data_root", "load_byo", "load_dataset", "clean_graph", "degree",
    "validate_data", "grid_graph", "make_synthetic", "neighbour_agreement", "sample_mrf", "random_split",
]
