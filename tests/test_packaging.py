"""What pyproject.toml declares against what the package imports; an optional dependency's absence."""
import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from gbpn.errors import GBPNError

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution, for optional packages that may not be installed here
NOT_INSTALLED = {"umap": "umap-learn", "ogb": "ogb", "pymetis": "pymetis", "triton": "triton", "matplotlib": "matplotlib"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def _declared():
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    return {_name(r) for r in project["dependencies"]}, extras


def _imports(tree):
    """(top-level module, optional) for every import: optional where it runs only when called (inside a
    function) or falls back when missing (in a ``try`` that catches ImportError)."""
    def walk(node, optional):
        for child in ast.iter_child_nodes(node):
            inner = optional or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    or isinstance(h.type, ast.Tuple) and any(getattr(e, "id", "") == "ImportError" for e in h.type.elts)
                    for h in child.handlers):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True)
                for rest in (*child.handlers, *child.orelse, *child.finalbody):
                    yield from walk(rest, inner)
                continue
            if isinstance(child, ast.Import):
                yield from ((a.name.split(".")[0], inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0:
                yield child.module.split(".")[0], inner
            yield from walk(child, inner)
    yield from walk(tree, False)


def test_every_third_party_import_is_declared():
    """A module-level import needs a core dependency; one inside a function, or with a fallback, at
    least an extra (``llvmlite``, imported by the numba kernels, was once declared nowhere)."""
    core, extras = _declared()
    distributions = {k: v for k, v in metadata.packages_distributions().items()}
    missing = []
    for path in sorted((ROOT / "src" / "gbpn").rglob("*.py")):
        for module, optional in set(_imports(ast.parse(path.read_text()))):
            if module in sys.stdlib_module_names or module in ("gbpn", "__future__"):
                continue
            names = {_name(d) for d in distributions.get(module, [NOT_INSTALLED.get(module, module)])}
            if not names & (core if not optional else core | extras):
                where = "a core dependency" if not optional else "a dependency or an extra"
                missing.append(f"{path.relative_to(ROOT)} imports {module} ({'/'.join(sorted(names))}), "
                               f"not {where}")
    assert not missing, "\n".join(missing)


def test_the_test_extra_brings_what_the_suite_runs_with():
    core, _ = _declared()
    tomllib = pytest.importorskip("tomllib")
    test = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            ["optional-dependencies"]["test"]}
    assert {"pytest", "pytest-xdist", "hypothesis", "import-linter", "matplotlib", "triton"} <= test
    assert "matplotlib" not in core and "filelock" in core and "llvmlite" in core


def test_figures_without_matplotlib_say_how_to_install_it(monkeypatch, tmp_path):
    from gbpn.experiments.coupling import plot_couplings

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    from gbpn.io import install_hint

    # the hint installs the extra the way gbpn was installed (from PyPI, or -e from a clone as the README does)
    with pytest.raises(GBPNError, match="needs matplotlib, which is not installed: " + re.escape(install_hint("analysis"))):
        plot_couplings({"H": np.ones((2, 2))}, tmp_path / "coupling.png")
    assert not list(tmp_path.iterdir())
