import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gbpn.data import load_byo, load_dataset, random_split
from gbpn.data.graph import clean_graph
from gbpn.errors import DatasetNotFoundError, GBPNError

# name: (nodes, directed edges, features, classes)
KNOWN = {
    "cora": (2708, 10556, 1433, 7),
    "citeseer": (3327, 9104, 3703, 6),
    "election": (3105, 45110, 9, 2),
    "sexual": (1888, 4192, 20, 2),
    "ising+": (2601, 10200, 2, 2),
    "ising-": (2601, 10200, 2, 2),
    "mrf+": (2601, 10200, 2, 3),
    "mrf-": (2601, 10200, 2, 3),
}


@pytest.mark.parametrize("name", list(KNOWN))
def test_loader_counts(name, data_dir):
    d = load_dataset(name, data_dir)
    assert (d.num_nodes, d.edge_index.size(1), d.num_features, d.num_classes) == KNOWN[name]
    assert int(d.y.min()) >= 0 and int(d.y.max()) == d.num_classes - 1
    assert torch.equal(d.edge_index[:, d.rev_index], d.edge_index.flip(0))


def test_election_labels_and_standardised_features(data_dir):
    d = load_dataset("election", data_dir)
    raw = np.loadtxt(f"{data_dir}/gbpn/county_facebook/dat.csv", delimiter=",", skiprows=1)
    assert torch.equal(d.y, torch.from_numpy((raw[:, 9] > raw[:, 10]).astype(np.int64)))
    torch.testing.assert_close(d.x.mean(0), torch.zeros(9), atol=1e-4, rtol=0)
    torch.testing.assert_close(d.x.std(0, unbiased=False), torch.ones(9), atol=1e-4, rtol=0)


def test_reference_grid_samples_differ(data_dir):
    a, b = load_dataset("ising+", data_dir, sample=0), load_dataset("ising+", data_dir, sample=9)
    assert not torch.equal(a.y, b.y)
    with pytest.raises(GBPNError, match="sample"):
        load_dataset("ising+", data_dir, sample=10)


def test_read_only_data_dir_is_not_written(data_dir, tmp_path, monkeypatch):
    import stat
    src = tmp_path / "ro"
    (src / "planetoid" / "Cora").mkdir(parents=True)
    import shutil
    shutil.copytree(f"{data_dir}/planetoid/Cora/raw", src / "planetoid" / "Cora" / "raw")
    for p in [src, *src.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = sorted(str(p) for p in src.rglob("*"))
    d = load_dataset("cora", str(src))
    assert d.num_nodes == 2708
    assert sorted(str(p) for p in src.rglob("*")) == before  # no processed/ written there
    for p in [src, *src.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_missing_dataset_names_the_folder_and_files(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="county_facebook.*adj.csv"):
        load_dataset("election", str(tmp_path))


def test_a_failed_download_leaves_no_folders_behind(tmp_path):
    from gbpn.data.datasets import _pyg

    def offline(root):  # what PyG does without a network: make raw/, then fail to fetch into it
        (Path(root) / "Cora" / "raw").mkdir(parents=True)
        raise OSError("Name or service not known")

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "note.txt").write_text("a user's file")
    for root in (tmp_path / "typo", tmp_path / "kept"):
        with pytest.raises(DatasetNotFoundError, match="could not download"):
            _pyg(offline, root, "planetoid/Cora", "cora", ["ind.cora.x"])
    assert not (tmp_path / "typo").exists()  # made by the failed load: gone again
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["note.txt"]  # the user's folder stays


def test_unknown_dataset_lists_the_choices():
    with pytest.raises(GBPNError, match="unknown dataset 'nope'.*cora"):
        load_dataset("nope")


def test_generated_grid_needs_no_files(tmp_path):
    d = load_dataset("synth-ising+", str(tmp_path))
    assert (d.num_nodes, d.edge_index.size(1), d.num_classes) == (2601, 10200, 2)
    assert d.true_H.shape == (2, 2)


def _write_byo(folder, edges, x, y=None):
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "edges.csv", np.asarray(edges), fmt="%d", delimiter=",", header="source,target", comments="")
    np.savetxt(folder / "features.csv", np.asarray(x), delimiter=",")
    if y is not None:
        np.savetxt(folder / "labels.csv", np.asarray(y), fmt="%d")


def test_bring_your_own_graph_is_cleaned(tmp_path):
    # one direction only, a duplicate and a self-loop; node 4 isolated; node 3 unlabelled
    _write_byo(tmp_path / "g", [[0, 1], [1, 0], [1, 2], [2, 2], [2, 3]], np.random.rand(5, 3), [0, 1, 2, -1, 1])
    d = load_dataset(str(tmp_path / "g"))
    assert d.num_nodes == 5 and d.num_classes == 3 and d.edge_index.size(1) == 6
    assert torch.equal(d.edge_index[:, d.rev_index], d.edge_index.flip(0))
    tr, va, te = random_split(d.y, seed=0)
    assert not (tr | va | te)[3]  # unknown labels are never in a split


@pytest.mark.parametrize(
    "edges,x,y,match",
    [
        ([[0, 1]], [[1.0], [float("nan")]], [0, 1], "NaN"),
        ([[0, 5]], [[1.0], [2.0]], [0, 1], "outside"),
        ([[0, 1]], [[1.0], [2.0]], [1, 0, 1], "length 2"),
        ([[0, 1]], [[1.0], [2.0]], [0, -3], "labels must lie"),
    ],
)
def test_bad_byo_input_is_a_clear_error(tmp_path, edges, x, y, match):
    _write_byo(tmp_path / "g", edges, x, y)
    with pytest.raises(GBPNError, match=match):
        load_dataset(str(tmp_path / "g"))


def test_byo_missing_features(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "edges.csv").write_text("0,1\n")
    with pytest.raises(DatasetNotFoundError, match="features.csv"):
        load_byo(tmp_path / "g")


def test_empty_graph_is_rejected(tmp_path):
    (tmp_path / "g").mkdir()
    np.save(tmp_path / "g" / "features.npy", np.zeros((0, 3), dtype=np.float32))
    np.save(tmp_path / "g" / "edges.npy", np.zeros((0, 2), dtype=np.int64))
    with pytest.raises(GBPNError, match="empty"):
        load_dataset(str(tmp_path / "g"))


def test_clean_graph_averages_duplicate_edge_weights():
    d = Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 1, 0, 1], [1, 0, 1, 2]]),
             edge_weight=torch.tensor([1.0, 3.0, 2.0, 4.0]))
    out = clean_graph(d)
    w = {(int(a), int(b)): float(v) for a, b, v in zip(*out.edge_index, out.edge_weight)}
    assert w[(1, 2)] == w[(2, 1)] == 4.0
    assert w[(0, 1)] == w[(1, 0)] == 2.0


def test_split_is_seeded_and_disjoint():
    y = torch.arange(100) % 3
    a, b = random_split(y, seed=1), random_split(y, seed=1)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    tr, va, te = a
    assert (tr.int() + va.int() + te.int() == 1).all()
    assert (int(tr.sum()), int(va.sum()), int(te.sum())) == (30, 20, 50)
    assert not torch.equal(random_split(y, seed=2)[0], tr)


def test_elliptic_csv_layout(tmp_path):
    folder = tmp_path / "elliptic"
    folder.mkdir()
    ids = [101, 205, 307, 409, 511]
    rows = [[t, 1 + k % 2] + list(np.random.rand(165)) for k, t in enumerate(ids)]
    np.savetxt(folder / "elliptic_txs_features.csv", np.array(rows), delimiter=",")
    (folder / "elliptic_txs_classes.csv").write_text("txId,class\n101,1\n205,2\n307,unknown\n409,2\n511,1\n")
    (folder / "elliptic_txs_edgelist.csv").write_text("txId1,txId2\n101,205\n205,307\n409,511\n")
    d = load_dataset("elliptic", str(tmp_path))
    assert (d.num_nodes, d.num_features, d.edge_index.size(1)) == (5, 166, 6)
    assert d.y.tolist() == [1, 0, -1, 0, 1]  # unknown stays out of training and scoring
    assert d.class_names == ["licit", "illicit"]
    tr, va, te = random_split(d.y, seed=0)
    assert not (tr | va | te)[2]


def _fake_ogb(root, name, num_nodes=40, num_edges=90, feats=6, classes=4, split="time"):
    """A tiny data set in the layout the OGB zip unpacks to."""
    import gzip

    pytest.importorskip("ogb")
    rng = np.random.default_rng(0)
    folder = root / name.replace("-", "_")
    (folder / "raw").mkdir(parents=True)
    (folder / "split" / split).mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("fabricated for a test\n")

    def write(path, rows):
        with gzip.open(path, "wt") as fh:
            fh.write("\n".join(",".join(str(v) for v in np.atleast_1d(r)) for r in rows) + "\n")

    edges = rng.integers(0, num_nodes, size=(num_edges, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    write(folder / "raw" / "edge.csv.gz", edges)
    write(folder / "raw" / "node-feat.csv.gz", rng.normal(size=(num_nodes, feats)).round(4))
    write(folder / "raw" / "node-label.csv.gz", rng.integers(0, classes, size=num_nodes))
    write(folder / "raw" / "num-node-list.csv.gz", [num_nodes])
    write(folder / "raw" / "num-edge-list.csv.gz", [len(edges)])
    write(folder / "raw" / "node_year.csv.gz", rng.integers(2000, 2020, size=num_nodes))
    perm = rng.permutation(num_nodes)
    for part, idx in (("train", perm[:20]), ("valid", perm[20:28]), ("test", perm[28:])):
        write(folder / "split" / split / f"{part}.csv.gz", idx)
    return edges


def test_ogbn_layout_from_a_read_only_folder(tmp_path):
    edges = _fake_ogb(tmp_path / "data", "ogbn-arxiv")
    os.chmod(tmp_path / "data", 0o555)
    try:
        data = load_dataset("ogbn-arxiv", str(tmp_path / "data"))
    finally:
        os.chmod(tmp_path / "data", 0o755)
    undirected = {tuple(sorted(e)) for e in edges.tolist()}
    assert data.num_nodes == 40 and data.num_features == 6 and data.edge_index.size(1) == 2 * len(undirected)
    assert data.public_splits.shape == (3, 1, 40)
    assert data.public_splits[:, 0].sum(1).tolist() == [20, 8, 12]
    assert not (tmp_path / "data" / "ogbn_arxiv" / "processed").exists()  # the data folder was not written to


def test_ogbn_without_release_file_is_a_clear_error(tmp_path):
    _fake_ogb(tmp_path, "ogbn-products", split="sales_ranking")
    (tmp_path / "ogbn_products" / "RELEASE_v1.txt").unlink()
    with pytest.raises(GBPNError, match="RELEASE_v1.txt"):
        load_dataset("ogbn-products", str(tmp_path))


def test_one_process_at_a_time_prepares_a_data_set(tmp_path, monkeypatch):
    import threading
    import time

    from gbpn.data.datasets import loading_lock

    monkeypatch.setenv("GBPN_CACHE", str(tmp_path))
    entered = threading.Event()

    def other():
        with loading_lock("cora"):  # its own open file: flock makes it wait like another process
            entered.set()

    with loading_lock("cora"):
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        assert not entered.is_set()
        with loading_lock("citeseer"):  # another data set is not held up
            pass
    t.join(5)
    assert entered.is_set()


@pytest.mark.slow
def test_runs_started_together_load_the_same_data_set_into_a_fresh_cache(tmp_path, data_dir):
    import subprocess
    import sys

    code = ("import sys; from gbpn.data import load_dataset; "
            "d = load_dataset('citeseer', sys.argv[1]); print(d.num_nodes, d.edge_index.size(1))")
    env = {**os.environ, "GBPN_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", code, data_dir], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.split() == ["3327", "9104"]


def test_pyg_and_ogb_messages_go_through_logging(capsys, caplog):
    import logging
    import sys

    from gbpn.data.datasets import _library_output_to_log

    with caplog.at_level(logging.DEBUG, logger="gbpn"), _library_output_to_log():
        print("Processing...", file=sys.stderr)
        print("Downloading https://example.org/x.zip")
        sys.stderr.write("Done!")  # no newline: still logged when the block ends
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    # a download says so at default verbosity; PyG's processing chatter only with -v (DEBUG)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "Processing..."), ("INFO", "Downloading https://example.org/x.zip"), ("DEBUG", "Done!")]


def test_a_download_that_fails_at_once_is_not_announced_one_that_goes_on_is(tmp_path, monkeypatch, caplog):
    """--skip-missing skips a data set whose download fails: no "Downloading" line for a download that never
    happened, the error says it failed; a download that goes on (the next file, the end, or 2 s) is said."""
    import logging
    import time
    from urllib.error import URLError

    from gbpn.data import datasets
    from gbpn.data.datasets import _library_output_to_log, _pyg

    def offline(root):
        print("Downloading https://example.org/pubmed.x")
        raise URLError("no network")

    with caplog.at_level(logging.INFO, logger="gbpn"), pytest.raises(DatasetNotFoundError, match="no network"):
        _pyg(offline, tmp_path, "planetoid/PubMed", "pubmed", ["ind.pubmed.x"])
    assert not [r for r in caplog.records if "Downloading" in r.getMessage()]
    caplog.clear()
    monkeypatch.setattr(datasets, "DOWNLOAD_NOTICE_S", 0.05)
    with caplog.at_level(logging.INFO, logger="gbpn"), _library_output_to_log():
        print("Downloading https://example.org/a")
        print("Downloading https://example.org/b")  # the next line: a is said
        assert [r.getMessage() for r in caplog.records] == ["Downloading https://example.org/a"]
        time.sleep(0.5)  # a long download: b is said while it runs
        assert [r.getMessage() for r in caplog.records][-1] == "Downloading https://example.org/b"
    assert len(caplog.records) == 2


def test_an_unwritable_cache_for_a_read_only_data_folder_is_a_user_error(tmp_path, monkeypatch):
    from gbpn.data.datasets import _writable_copy
    from gbpn.errors import GBPNError

    root = tmp_path / "data"
    (root / "planetoid" / "Cora" / "raw").mkdir(parents=True)
    (root / "planetoid" / "Cora" / "raw" / "ind.cora.x").write_text("x")
    root.chmod(0o555)  # read-only, as a shared data folder
    try:
        (tmp_path / "file").write_text("")
        monkeypatch.setenv("GBPN_CACHE", str(tmp_path / "file"))
        with pytest.raises(GBPNError, match="set GBPN_CACHE to a writable folder"):
            _writable_copy(root, "planetoid/Cora")
        monkeypatch.setenv("GBPN_CACHE", str(tmp_path / "cache"))
        copy = _writable_copy(root, "planetoid/Cora")
        assert (copy / "planetoid" / "Cora" / "raw" / "ind.cora.x").read_text() == "x"
    finally:
        root.chmod(0o755)
