"""Neighbour sampling for mini-batch BP: computation trees and Exp3 importance sampling."""
from gbpn.sampling.importance import (
           Exp3Sampler,
           optimal_probs,
           sampling_variance,
           uniform_probs,
           variance_ratios,
)
from gbpn.sampling.tree import ComputationTree, sample_tree
from gbpn.graph.csr import CSRGraph

__all__ = ["ComputationTree", "CSRGraph", "sample_tree", "Exp3Sampler", "optimal_probs", "sampling_variance",
           "uniform_probs", "variance_ratios"]
