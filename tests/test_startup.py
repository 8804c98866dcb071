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


def test_a_command_that_compiles_nothing_does_not_load_dynamo(tmp_path):
    import numpy as np

    n, rng = 40, np.random.default_rng(0)
    y = np.arange(n) % 2
    np.savetxt(tmp_path / "edges.csv", np.stack([np.arange(n), (np.arange(n) + 1) % n], 1), fmt="%d", delimiter=",")
    np.savetxt(tmp_path / "features.csv", y[:, None] + rng.normal(0, 1, (n, 2)), delimiter=",")
    np.savetxt(tmp_path / "labels.csv", y, fmt="%d")
    run, ckpt = tmp_path / "run", tmp_path / "run" / "model.pt"
    # training loads it: torch.optim's optimisers do, at their construction (PyTorch's own lazy import)
    assert _fresh(f"import json, sys; from gbpn.cli import main; "
                  f"rc = main(['train', '--dataset', {str(tmp_path)!r}, '--epochs', '1', '--hidden', '8', "
                  f"'--output', {str(run)!r}, '-q']); print(json.dumps([rc]))") == [0]
    loaded, compiled = _fresh(
        "import json, sys; from gbpn.cli import main; "
        f"main(['predict', '--checkpoint', {str(ckpt)!r}, '--output', {str(tmp_path / 'p.csv')!r}, '-q']); "
        "loaded = 'torch._dynamo.convert_frame' in sys.modules; import torch; "
        "f = torch.compile(lambda x: 2 * x + 1, backend='eager'); "
        "print(json.dumps([loaded, f(torch.ones(2)).tolist()]))")
    assert not loaded and compiled == [3.0, 3.0]  # PyG's import of it waited; torch.compile still finds it whole
