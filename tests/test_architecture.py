"""The package's layers (the import-linter contract in pyproject.toml): no import climbs a layer and
there are no import circles between layers; an upward import added on purpose breaks the contract."""
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


def test_layers_contract_kept():
    run = _lint(ROOT / "src")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "src" / "gbpn", tmp_path / "gbpn", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "gbpn" / "graph" / "reverse.py", "a") as fh:
        fh.write("\nimport gbpn.train.fit  # climbs from graph to train\n")
    run = _lint(tmp_path)
    assert run.returncode != 0
    assert "gbpn.graph.reverse -> gbpn.train.fit" in run.stdout
