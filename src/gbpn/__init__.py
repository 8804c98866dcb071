"""gbpn: node classification with Graph Belief Propagation Networks."""
__version__ = "0.1.0"

from gbpn.errors import DatasetNotFoundError, GBPNError
from gbpn.nn import GBPN, MLP, BeliefPropagation, Coupling

__all__ = ["GBPN", "MLP", "BeliefPropagation", "Coupling", "GBPNError", "DatasetNotFoundError", "__version__"]
