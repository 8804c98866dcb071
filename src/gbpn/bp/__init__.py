"""Loopy belief propagation: the reference step, its backends and the layer that dispatches among them."""
