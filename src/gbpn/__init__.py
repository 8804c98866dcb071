"""gbpn: node classification with Graph Belief Propagation Networks."""
import importlib as _importlib

__version__ = "0.1.0"

from gbpn.errors import DatasetNotFoundError, GBPNError

__all__ = ["GBPN", "MLP", "BeliefPropagation", "Coupling", "GBPNError", "DatasetNotFoundError", "__version__"]

# The layers (and with them PyTorch, seconds to import) load on first use, so that the command's
# entry point can catch a Ctrl-C while they do (gbpn.console).
_FROM_NN = ("GBPN", "MLP", "BeliefPropagation", "Coupling")


def __getattr__(name: str):
    if name in _FROM_NN:
        return getattr(_importlib.import_module("gbpn.nn"), name)
    try:  # a submodule not imported yet (``import gbpn; gbpn.nn``)
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
