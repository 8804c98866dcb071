"""Loopy belief propagation: the reference step (:mod:`gbpn.bp.functional`), its backends
(:mod:`gbpn.bp.backends`), the table that picks one per call (:mod:`gbpn.bp.dispatch`) and the layer."""
from gbpn.bp.backends.pairs import Boundary, pair_bp
from gbpn.bp.coupling import Coupling
from gbpn.bp.dispatch import BACKENDS, explain_dispatch
from gbpn.bp.layer import BeliefPropagation
from gbpn.bp.problem import BPProblem

__all__ = ["BACKENDS", "BPProblem", "BeliefPropagation", "Boundary", "Coupling", "explain_dispatch", "pair_bp"]
