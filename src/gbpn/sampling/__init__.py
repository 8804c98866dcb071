"""Neighbourhood sampling for mini-batch BP."""
from gbpn.sampling.tree import ComputationTree, CSRGraph, sample_tree

__all__ = ["ComputationTree", "CSRGraph", "sample_tree"]
