"""Experiment runners: repeated seeded trials with run records on disk."""
from gbpn.experiments.runner import run_trials

__all__ = ["run_trials"]
