"""The package's layers and circles (the import-linter contracts in pyproject.toml): no import climbs a layer,
there are no import circles between layers nor, at any depth, inside a sub-package; an upward import or an inner
circle added on purpose breaks a contract."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("importlinter")


def _lint(src: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(src), "PATH": str(Path(sys.executable).parent)}
    cmd = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
           "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "gbpn", tmp_path / "gbpn", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "gbpn"


def test_contracts_kept():
    run = _lint(ROOT / "src")
    assert run.returncode == 0, run.stdout + run.stderr
    assert " 0 broken" in run.stdout and "Layers: each imports only the layers below it KEPT" in run.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    with open(_copy(tmp_path) / "graph" / "reverse.py", "a") as fh:
        fh.write("\nimport gbpn.train.fit  # climbs from graph to train\n")
    run = _lint(tmp_path)
    assert run.returncode != 0
    assert "gbpn.graph.reverse -> gbpn.train.fit" in run.stdout


def test_an_inner_circle_breaks_its_packages_contract(tmp_path):
    with open(_copy(tmp_path) / "data" / "names.py", "a") as fh:  # data.datasets imports data.names
        fh.write("\nimport gbpn.data.datasets  # a circle inside gbpn.data\n")
    run = _lint(tmp_path)
    assert run.returncode != 0
    assert "No circle inside gbpn.data BROKEN" in run.stdout and "Layers: each imports only" in run.stdout
