"""Experiment runners: repeated seeded trials with run records on disk."""
from gbpn.lazy import lazy_exports

__all__ = ["run_trials"]
__getattr__, __dir__ = lazy_exports(__name__, {"run_trials": ".runner"})
