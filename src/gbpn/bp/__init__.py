"""Loopy belief propagation: the reference step (:mod:`gbpn.bp.functional`), its backends
(:mod:`gbpn.bp.backends`), the table that picks one per call (:mod:`gbpn.bp.dispatch`) and the layers
(:class:`gbpn.BeliefPropagation`, :class:`~gbpn.bp.motifs.MotifBeliefPropagation`).

What code outside :mod:`gbpn.bp` calls: a layer's ``forward`` / ``infer_pairs`` (``boundary=`` for one part
of a partitioned graph, :class:`Boundary`), :func:`run` of a :class:`BPProblem`, :func:`explain_dispatch`.
"""
from gbpn.bp.backends.pairs import Boundary
from gbpn.bp.dispatch import BACKENDS, KERNELS, explain_dispatch, run
from gbpn.bp.problem import BPOptions, BPProblem, BPResult

__all__ = ["BACKENDS", "KERNELS", "BPOptions", "BPProblem", "BPResult", "Boundary", "explain_dispatch",
           "run"]
