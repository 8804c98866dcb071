"""Packages whose names load from their modules on first use (PEP 562).

A package's ``__init__`` that imported every module would load PyTorch and PyG (seconds) for a
command that needs neither, such as ``gbpn --help`` or ``gbpn coupling``; with
:func:`lazy_exports` it lists where each name lives and imports that module only when it is read.
"""
from __future__ import annotations

import importlib
from typing import Callable, List, Mapping, Tuple


def lazy_exports(package: str, names: Mapping[str, str]) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``names`` maps each exported name to the
    module (relative to ``package``, e.g. ``".runner"``) that defines it."""
    def __getattr__(name: str) -> object:
        if name in names:
            return getattr(importlib.import_module(names[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        return sorted(set(names) | set(vars(importlib.import_module(package))))

    return __getattr__, __dir__
