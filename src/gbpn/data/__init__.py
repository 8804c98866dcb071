"""Data: loaders, graph cleaning, splits and the synthetic MRF sampler."""
from gbpn.lazy import lazy_exports

_WHERE = {"available_datasets": ".datasets", "data_root": ".datasets", "load_dataset": ".datasets", "load_byo": ".byo",
          "clean_graph": ".graph", "validate_data": ".graph", "degree": "gbpn.graph.degree", "grid_graph": ".mrf",
          "make_synthetic": ".mrf", "neighbour_agreement": ".mrf", "sample_mrf": ".mrf", "random_split": ".splits"}
__all__ = list(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
