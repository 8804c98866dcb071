"""The README's command lines and library example run as written, in order, each after the one above.

Lines run in a fresh folder, with ``../shared/datasets`` pointing at the data folder, through
``gbpn.cli.main``. Only the cost is capped, by options appended to a line (argparse keeps the
last value): 2 epochs and 1 trial for training, 1 label sample and a short burn-in for the MRF
sampler, one grid for ``identifiability``, no 2-D layout for ``convergence``. ``gbpn benchmark``
lines (minutes to hours each) and the install / pytest lines are not run here.
"""
import re
import shlex
from pathlib import Path


from gbpn.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
SECTIONS = ("### Command line", "### Reading a trained model", "### Comparisons", "### Your own graph", "### Library")
CAPS = {
    "train": ["--epochs", "2", "--trials", "1", "--hidden", "16"],
    "sampling": ["--epochs", "1", "--trials", "1"],
    "identifiability": ["--epochs", "1", "--kinds", "ising+"],
    "convergence": ["--no-layout"],
    "--fanouts": ["--epochs", "1", "--trials", "1", "--fanouts", "2", "0"],
    "sample-mrf": ["--samples", "1", "--burn-in", "5", "--thin", "1"],
}


def _blocks(lang: str):
    """Fenced ``lang`` blocks of the usage sections, in README order."""
    text = README.read_text()
    out = []
    for head in SECTIONS:
        start = text.index(head)
        end = text.find("\n### ", start + len(head))
        out += re.findall(rf"```{lang}\n(.*?)```", text[start:end if end > 0 else None], flags=re.S)
    return out


def _commands():
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("gbpn ") and not line.startswith("gbpn benchmark"):
                yield line


def _capped(argv):
    extra = [cap for key, cap in CAPS.items() if key in argv]
    return argv + [a for cap in extra for a in cap]


def test_readme_lines_run_as_written_in_order(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    commands = list(_commands())
    assert any(c.startswith("gbpn predict --checkpoint runs/cora/model.pt") for c in commands)
    for line in commands:
        argv = shlex.split(line.replace("../shared/datasets", data_dir))[1:]
        code = main(_capped(argv))
        err = capsys.readouterr().err
        assert code == 0, f"README line failed: {line}\n{err}"
    assert (tmp_path / "runs" / "cora" / "cora_probs.csv").is_file()
    assert (tmp_path / "runs" / "cora" / "coupling.png").is_file()
    assert (tmp_path / "runs" / "my-mrf-gbpn-seed0" / "predictions.csv").is_file()


def test_readme_library_example_runs(data_dir, monkeypatch):
    (code,) = [b for b in _blocks("python") if "fit(data" in b]
    follow = [b for b in _blocks("python") if "AddReverseIndex" in b]
    code = code.replace("../shared/datasets", data_dir)
    code = code.replace('TrainConfig(variant="gbpn")', 'TrainConfig(variant="gbpn", epochs=2)')  # cost caps only:
    follow = [b.replace("fullgraph=True)", 'fullgraph=True, backend="aot_eager")') for b in follow]  # no C++ build
    scope: dict = {}
    exec(compile(code + "\n" + "\n".join(follow), "README.md", "exec"), scope)
    assert scope["log_p"].shape == (2708, 7)
    import torch

    torch.testing.assert_close(scope["same"], scope["beliefs"].detach(), atol=1e-4, rtol=1e-4)
