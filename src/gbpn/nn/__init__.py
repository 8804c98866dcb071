"""Neural building blocks: the BP layer, the coupling and the GBPN model."""
from gbpn.nn.bp import BeliefPropagation
from gbpn.nn.coupling import Coupling
from gbpn.nn.graph_cache import clear_graph_caches
from gbpn.nn.model import GBPN, MLP

__all__ = ["BeliefPropagation", "Coupling", "GBPN", "MLP", "clear_graph_caches"]
