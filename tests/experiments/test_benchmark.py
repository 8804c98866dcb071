import json

import numpy as np
import pytest

from gbpn.errors import GBPNError
from gbpn.experiments.benchmark import PRESETS, Grid, run_grid

pytestmark = pytest.mark.slow  # grids of whole trainings


def test_grid_writes_rows_table_and_resumes(tmp_path):
    msgs = []
    table = run_grid(Grid(["mlp", "gbpn"], ["synth-ising+"], trials=2, output=tmp_path, epochs=3),
                     progress=False, log=msgs.append)
    rows = sorted((tmp_path / "rows").glob("*.json"))
    assert len(rows) == 4
    row = json.loads(rows[0].read_text())
    assert 0 <= row["test_accuracy"] <= 1 and "split" in row and "seed" in row
    assert "| synth-ising+ |" in table and "**" in table
    assert (tmp_path / "results.csv").read_text().count("\n") == 5
    # a second run finds everything done; removing one row redoes only that run
    run_grid(Grid(["mlp", "gbpn"], ["synth-ising+"], trials=2, output=tmp_path, epochs=3),
             progress=False, log=msgs.append)
    assert "0 runs to do" in msgs[-1]
    rows[0].unlink()
    run_grid(Grid(["mlp", "gbpn"], ["synth-ising+"], trials=2, output=tmp_path, epochs=3),
             progress=False, log=msgs.append)
    assert "1 runs to do" in msgs[-1] and len(list((tmp_path / "rows").glob("*.json"))) == 4


def test_a_missing_dataset_stops_the_grid_before_it_starts_unless_skipped(tmp_path, caplog):
    none = str(tmp_path / "none")
    # the absent data set is the grid's last: it still stops the grid before the first run
    with pytest.raises(GBPNError, match="set --data-dir or GBPN_DATA.*--skip-missing"):
        run_grid(Grid(["mlp"], ["synth-ising+", "election"], trials=1, output=tmp_path / "a", epochs=2, data_dir=none),
                 progress=False, log=lambda m: None)
    assert not (tmp_path / "a").exists()
    msgs = []
    run_grid(Grid(["mlp"], ["election", "synth-ising+"], trials=1, output=tmp_path, epochs=2, data_dir=none,
                  skip_missing=True), progress=False, log=msgs.append)
    assert any("skipping election" in r.message and r.levelname == "WARNING" for r in caplog.records)
    assert msgs[0].startswith("1 runs to do (1 data set(s) x 1 model(s) x 1 trial(s), without election)")
    assert not list((tmp_path / "rows").glob("*.lock"))  # no lock left behind for other workers to wait on
    assert len(list((tmp_path / "rows").glob("*.json"))) == 1
    # a grid none of whose data sets loaded has nothing to show: an error, not an empty table
    with pytest.raises(GBPNError, match="every data set of the grid was skipped"):
        run_grid(Grid(["mlp"], ["election"], trials=1, output=tmp_path / "b", epochs=2, data_dir=none,
                      skip_missing=True), progress=False, log=lambda m: None)


def test_a_file_in_rows_that_is_not_a_run_is_named(tmp_path):
    run_grid(Grid(["mlp"], ["synth-ising+"], trials=1, output=tmp_path, epochs=2), progress=False, log=lambda m: None)
    (tmp_path / "rows" / "junk.json").write_text('{"a": 1}')
    with pytest.raises(GBPNError, match="junk.json is not a finished run"):
        run_grid(Grid(["mlp"], ["synth-ising+"], trials=1, output=tmp_path, epochs=2),
                 progress=False, log=lambda m: None)


def test_public_splits_are_used_when_a_dataset_has_them(tmp_path, data_dir):
    run_grid(Grid(["mlp"], ["chameleon-filtered"], trials=1, output=tmp_path, epochs=2, data_dir=data_dir),
             progress=False, log=lambda m: None)
    row = json.loads(next((tmp_path / "rows").glob("*.json")).read_text())
    assert row["split"] == "public split 0"


def test_unknown_model_and_presets():
    with pytest.raises(GBPNError, match="unknown model"):
        run_grid(Grid(["nope"], ["synth-ising+"], trials=1, output="/tmp/unused-gbpn"), progress=False)
    assert {"table2", "table3", "heterophily"} <= set(PRESETS)


def test_mini_batch_grid_runs_gbpn_on_trees_and_the_large_baselines(tmp_path):
    # a bring-your-own folder is named by its last path component
    from gbpn.data import load_dataset

    data = load_dataset("synth-ising+")
    folder = tmp_path / "my graph"
    folder.mkdir()
    ei = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    np.save(folder / "edges.npy", ei.T.numpy())
    np.save(folder / "features.npy", data.x.numpy())
    np.save(folder / "labels.npy", data.y.numpy())
    out = tmp_path / "grid"
    table = run_grid(Grid(["gbpn", "sage-sampled"], [str(folder)], trials=1, output=out, epochs=2, batch_size=512),
                     progress=False, log=lambda m: None)
    rows = {p.name: json.loads(p.read_text()) for p in (out / "rows").glob("*.json")}
    assert set(rows) == {"my graph__gbpn__0.json", "my graph__sage-sampled__0.json"} and "| my graph |" in table
    assert all(0 <= r["test_accuracy"] <= 1 for r in rows.values())
    with pytest.raises(GBPNError, match="batch size"):  # a finished grid is not silently mixed with another
        run_grid(Grid(["gbpn"], [str(folder)], trials=1, output=out, epochs=2), progress=False, log=lambda m: None)


def test_runs_locked_by_a_live_worker_are_skipped_and_a_dead_workers_taken_over(tmp_path, caplog):
    import subprocess
    import sys

    rows = tmp_path / "rows"
    rows.mkdir()
    # another worker (a process) holds run 0; run 1's lock file is a dead worker's, killed mid-run
    hold = ("import sys; from pathlib import Path; from gbpn.experiments.lock import try_lock; "
            "lock = try_lock(Path(sys.argv[1])); print('held' if lock else 'busy', flush=True); sys.stdin.read()")
    live = subprocess.Popen([sys.executable, "-c", hold, str(rows / "synth-ising+__mlp__0.lock")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "held"
        (rows / "synth-ising+__mlp__1.lock").write_text("")
        run_grid(Grid(["mlp"], ["synth-ising+"], trials=3, output=tmp_path, epochs=2),
                 progress=False, log=lambda m: None)
    finally:
        live.kill()
        live.wait()
    assert not (rows / "synth-ising+__mlp__0.json").exists()  # another worker is on it
    assert (rows / "synth-ising+__mlp__1.json").exists() and (rows / "synth-ising+__mlp__2.json").exists()
    assert sorted(p.name for p in rows.glob("*.lock")) == ["synth-ising+__mlp__0.lock"]  # finished runs' go
    assert any("1 run(s) are held by other workers (e.g. synth-ising+__mlp__0: pid " + f"{live.pid} on " in r.message
               for r in caplog.records)
    # once that worker is gone, the run is taken over
    run_grid(Grid(["mlp"], ["synth-ising+"], trials=3, output=tmp_path, epochs=2), progress=False, log=lambda m: None)
    assert (rows / "synth-ising+__mlp__0.json").exists() and not list(rows.glob("*.lock"))


def test_an_interrupted_run_leaves_neither_row_nor_lock(tmp_path, monkeypatch):
    from gbpn.experiments import benchmark

    def stopped(*args, **kwargs):  # Ctrl-C, or the SIGTERM the CLI turns into one, in the middle of a run
        raise KeyboardInterrupt

    monkeypatch.setattr(benchmark._Cells, "_row", stopped)
    with pytest.raises(KeyboardInterrupt):
        run_grid(Grid(["mlp"], ["synth-ising+"], trials=1, output=tmp_path, epochs=2), progress=False,
                 log=lambda m: None)
    assert not list((tmp_path / "rows").glob("*.json")) and not list((tmp_path / "rows").glob("*.lock*"))


def test_patience_is_part_of_the_grid_and_stops_runs_early(tmp_path):
    run_grid(Grid(["gcn"], ["synth-ising+"], trials=1, output=tmp_path, epochs=400, patience=3),
             progress=False, log=lambda m: None)
    row = json.loads(next((tmp_path / "rows").glob("*.json")).read_text())
    assert row["epochs_run"] == row["best_epoch"] + 4 < 400
    with pytest.raises(GBPNError, match="patience"):
        run_grid(Grid(["gcn"], ["synth-ising+"], trials=1, output=tmp_path, epochs=400, patience=5), progress=False)
