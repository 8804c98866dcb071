"""Packages whose names load from their modules on first use (PEP 562).

A package's ``__init__`` that imported every module would load PyTorch and PyG (seconds) for a
command that needs neither, such as ``gbpn --help`` or ``gbpn coupling``; with
:func:`lazy_exports` it lists where each name lives and imports that module only when it is read.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
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


class _Deferred(importlib.abc.MetaPathFinder):
    """Finds the module ``name`` once and hands it back unexecuted (:class:`importlib.util.LazyLoader`): its code
    runs on the first read of one of its attributes, not at the ``import`` statement."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the module is in sys.modules from here on
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def defer_import(name: str) -> None:
    """Let ``import name`` (a submodule of a package already importable) bind the module without running it; it
    runs where one of its attributes is first read. For a module a dependency imports at its own import, just in
    case: PyG imports ``torch._dynamo`` (a second or more) so as to recognise compiled models, which a command that
    compiles nothing never has. Nothing changes once the module has been imported."""
    if name not in sys.modules and not any(isinstance(f, _Deferred) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _Deferred(name))
