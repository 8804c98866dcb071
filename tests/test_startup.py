"""Start-up: what a command imports that it does not use costs seconds on every run."""
import json
import subprocess
import sys


def _fresh(code: str):
    """What ``code`` prints as JSON, run in a new interpreter (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_versions_are_read_from_metadata_without_importing_the_libraries():
    import numpy
    import scipy
    import sklearn
    import torch_geometric

    v, loaded = _fresh("import json, sys; from gbpn.io import versions; v = versions(); "
                       "print(json.dumps([v, [m for m in ('sklearn', 'torch_geometric') if m in sys.modules]]))")
    assert loaded == []  # scikit-learn alone takes a second to import
    assert (v["scikit-learn"], v["torch_geometric"], v["numpy"], v["scipy"]) == (
        sklearn.__version__, torch_geometric.__version__, numpy.__version__, scipy.__version__)
    assert v["openblas"]  # the BLAS kernels are still reported


def test_a_missing_package_is_recorded_as_such():
    from gbpn.io import installed_version

    assert installed_version("no-such-package-gbpn") == "not installed"
