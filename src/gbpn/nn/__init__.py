"""The public layers, PyG style: the BP layer, the coupling and the GBPN model."""
from gbpn.bp.coupling import Coupling
from gbpn.bp.layer import BeliefPropagation
from gbpn.graph.cache import clear_graph_caches
from gbpn.models.gbpn import GBPN
from gbpn.models.mlp import MLP

__all__ = ["BeliefPropagation", "Coupling", "GBPN", "MLP", "clear_graph_caches"]
