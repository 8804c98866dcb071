"""gbpn.api, what the command line calls, used from Python: train into a folder, load, predict, explain."""
import numpy as np
import pytest

from gbpn import api
from gbpn.cli.train import check_rerun
from gbpn.errors import GBPNError

pytestmark = pytest.mark.slow  # a (short) training


def test_train_load_predict_explain_and_rerun(tmp_path):
    config = api.TrainConfig(epochs=2, hidden=8)
    result, folder = api.train("synth-ising+", config, trials=1, seed=1, output=str(tmp_path / "run"), progress=False)
    assert folder == str(tmp_path / "run") and result["summary"]["num_trials"] == 1
    run = api.load(f"{folder}/model.pt")
    assert run.known == "train" and run.mask is not None and int(run.mask.sum()) == int(run.masks[0].sum())
    probs = api.predict(run)
    assert probs.shape == (2601, 2) and np.allclose(probs.sum(1), 1, atol=1e-5)
    assert np.allclose(probs[run.mask.numpy()].max(1), 1)  # the training labels are clamped
    assert api.explain(run, 0)["node"] == 0
    rec = api.recorded_run(f"{folder}/config.json")
    assert (rec.dataset, rec.seed, rec.trials) == ("synth-ising+", 1, 1)
    assert (rec.config.optim.epochs, rec.config.model.hidden) == (2, 8)
    assert rec.config.model.dropout == result["trials"][0]["dropout"]  # recorded as resolved
    with pytest.raises(GBPNError, match="--epochs would be ignored"):
        check_rerun({"epochs": "--epochs", "output": "--output"})
