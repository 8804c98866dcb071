"""Checkpoints that would mislead or exhaust the machine are refused when loaded, with exit code 2."""
import pytest
import torch

from gbpn.cli import main


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "run"
    assert main(["train", "--epochs", "1", "--trials", "1", "--hidden", "8", "--output", str(out), "-q"]) == 0
    return out


def _rewrite(src, dst, change):
    payload = torch.load(src, weights_only=True)
    change(payload)
    torch.save(payload, dst)
    return dst


def _widen_coupling(payload):
    w = payload["state_dict"]["bp.coupling.weight"]
    w.copy_(torch.zeros_like(w))
    w.view(-1)[0] = 200.0  # log H spans 200: exp(-200) underflows float32


@pytest.mark.parametrize("command", ["predict", "coupling"])
def test_a_coupling_wider_than_float32_is_refused_on_load(run_folder, tmp_path, capsys, command):
    ckpt = _rewrite(run_folder / "model.pt", tmp_path / "wide.pt", _widen_coupling)
    code = main([command, "--checkpoint", str(ckpt), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "log H spans 200" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_model_args_larger_than_the_file_are_refused_before_allocating(run_folder, tmp_path, capsys):
    def huge(payload):
        payload["model_args"]["hidden_channels"] = 10 ** 7  # ~10^14 weights if built

    ckpt = _rewrite(run_folder / "model.pt", tmp_path / "huge.pt", huge)
    code = main(["coupling", "--checkpoint", str(ckpt)])
    err = capsys.readouterr().err
    assert code == 2 and "the file holds" in err
