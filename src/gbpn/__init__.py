"""gbpn: node classification with Graph Belief Propagation Networks.

The public layers are imported from here, one path each: ``from gbpn import GBPN, MLP, BeliefPropagation,
Coupling`` (and :func:`clear_graph_caches`); the data functions from :mod:`gbpn.data`, the BP machinery
(dispatch, problems) from :mod:`gbpn.bp`.
"""
import importlib as _importlib

from gbpn._version import __version__
from gbpn.errors import DatasetNotFoundError, GBPNError

__all__ = ["GBPN", "MLP", "BeliefPropagation", "Coupling", "GBPNError", "DatasetNotFoundError", "clear_graph_caches",
           "__version__"]

# The layers (and with them PyTorch, seconds to import) load on first use, so that the command's
# entry point can catch a Ctrl-C while they do (gbpn.console).
_DEFINED_IN = {"GBPN": "gbpn.models.gbpn", "MLP": "gbpn.models.mlp", "BeliefPropagation": "gbpn.bp.layer",
               "Coupling": "gbpn.bp.coupling", "clear_graph_caches": "gbpn.graph.cache"}


def __getattr__(name: str):
    if name in _DEFINED_IN:
        return getattr(_importlib.import_module(_DEFINED_IN[name]), name)
    try:  # a submodule not imported yet (``import gbpn; gbpn.bp``)
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
