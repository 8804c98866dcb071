"""The bring-your-own reader: headers are never taken for data nor data for headers (issue 12, item 1)."""
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gbpn.cli import main
from gbpn.data import load_byo, load_dataset
from gbpn.errors import GBPNError


def _graph(n=6):
    rng = np.random.default_rng(0)
    edges = np.array([[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]])
    return rng.random((n, 4)), edges, np.array([0, 1, 2, 0, 1, 2])


def _write_pandas(folder, x, edges, y):
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(x).to_csv(folder / "features.csv", index=False)  # header "0,1,2,3"
    pd.DataFrame(edges).to_csv(folder / "edges.csv", index=False)  # header "0,1"
    if y is not None:
        pd.Series(y).to_csv(folder / "labels.csv", index=False)  # header "0"


def test_pandas_default_headers_are_not_read_as_a_node(tmp_path):
    x, edges, y = _graph()
    _write_pandas(tmp_path / "g", x, edges, y)
    # 0,1,2,3 / 0 / 0,1 could be headers or data: the counts agree either way, so ask
    with pytest.raises(GBPNError, match="pass --header or --no-header"):
        load_dataset(str(tmp_path / "g"))
    d = load_byo(tmp_path / "g", header=True)
    assert d.num_nodes == 6 and np.allclose(d.x.numpy(), x) and d.y.tolist() == y.tolist()
    assert d.edge_index.T.tolist() == edges.tolist()


def test_pandas_features_resolved_by_the_label_count(tmp_path, caplog):
    x, edges, y = _graph()
    _write_pandas(tmp_path / "g", x, edges, None)
    np.savetxt(tmp_path / "g" / "labels.csv", y, fmt="%d")  # no header: 6 lines, features 7
    d = load_byo(tmp_path / "g")
    assert d.num_nodes == 6 and d.edge_index.T.tolist() == edges.tolist() and d.y.tolist() == y.tolist()
    assert "features.csv, " in caplog.text and "edges.csv as a header" in caplog.text  # said, not silent


def test_a_numeric_first_row_of_data_is_kept(tmp_path):
    x, edges, y = _graph()
    (tmp_path / "g").mkdir()
    np.savetxt(tmp_path / "g" / "features.csv", x, delimiter=",")
    np.savetxt(tmp_path / "g" / "edges.csv", np.array([[0, 1], *edges]), fmt="%d", delimiter=",")
    np.savetxt(tmp_path / "g" / "labels.csv", y, fmt="%d")
    d = load_byo(tmp_path / "g")
    assert d.num_nodes == 6 and d.edge_index.size(1) == 6 and d.y[0] == 0


def test_a_missing_value_in_the_first_row_is_not_a_header(tmp_path):
    x, edges, y = _graph()
    (tmp_path / "g").mkdir()
    lines = ["NA," + ",".join(map(str, x[0, 1:]))] + [",".join(map(str, r)) for r in x[1:]]
    (tmp_path / "g" / "features.csv").write_text("\n".join(lines) + "\n")
    np.savetxt(tmp_path / "g" / "edges.csv", edges, fmt="%d", delimiter=",")
    with pytest.raises(GBPNError, match="mixes numbers and text"):
        load_byo(tmp_path / "g")
    # said to be data, NA is a missing value the graph check names
    with pytest.raises(GBPNError, match="NaN"):
        load_dataset(str(tmp_path / "g"), header=False)


def test_a_text_row_in_the_middle_names_its_line(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "features.csv").write_text("a,b\n1,2\n3,oops\n")
    (tmp_path / "g" / "edges.csv").write_text("0,1\n")
    with pytest.raises(GBPNError, match=r"line 3, column 2: 'oops' is not a number"):
        load_byo(tmp_path / "g")


def test_a_short_row_names_its_line(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "features.csv").write_text("a,b,c\n1,2,3\n\n4,5\n6,7,8\n")
    (tmp_path / "g" / "edges.csv").write_text("0,1\n")
    with pytest.raises(GBPNError, match="line 4 has 2 value.s. where the other rows have 3"):
        load_byo(tmp_path / "g")


def test_empty_edges_file_is_a_graph_without_edges(tmp_path, caplog):
    x, _, y = _graph()
    (tmp_path / "g").mkdir()
    np.savetxt(tmp_path / "g" / "features.csv", x, delimiter=",")
    (tmp_path / "g" / "edges.csv").write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "empty input file" warning used to leak out
        d = load_dataset(str(tmp_path / "g"))
    assert d.num_nodes == 6 and d.edge_index.shape == (2, 0)
    assert "holds no edges" in caplog.text


def test_cli_asks_for_header_and_writes_nothing(tmp_path, capsys):
    x, edges, y = _graph()
    _write_pandas(tmp_path / "g", x, edges, y)
    out = tmp_path / "run"
    assert main(["train", "--dataset", str(tmp_path / "g"), "--epochs", "1", "--hidden", "4",
                 "--output", str(out), "--quiet"]) == 2
    assert "pass --header or --no-header" in capsys.readouterr().err and not out.exists()
    assert main(["train", "--dataset", str(tmp_path / "g"), "--header", "--epochs", "1", "--hidden", "4",
                 "--output", str(out), "--quiet"]) == 0
    import json

    assert json.loads((out / "config.json").read_text())["graph"]["num_nodes"] == 6


WRITERS = ("numpy", "numpy-named", "pandas", "pandas-named", "pandas-index")


def _write(folder, writer, x, edges, y):
    folder.mkdir(parents=True, exist_ok=True)
    if writer.startswith("pandas"):
        named, index = writer.endswith("named"), writer.endswith("index")  # index: pandas's default index column
        pd.DataFrame(x, columns=[f"f{k}" for k in range(x.shape[1])] if named else None).to_csv(
            folder / "features.csv", index=index)
        pd.DataFrame(edges, columns=["source", "target"] if named else None).to_csv(folder / "edges.csv", index=index)
        if y is not None:
            pd.Series(y, name="label" if named else None).to_csv(folder / "labels.csv", index=index)
    else:
        named = writer == "numpy-named"
        kw = dict(delimiter=",", comments="")
        np.savetxt(folder / "features.csv", x, fmt="%d" if x.dtype.kind == "i" else "%.18e", header=",".join(f"f{k}" for k in range(x.shape[1])) if named else "", **kw)
        np.savetxt(folder / "edges.csv", edges, fmt="%d", header="source,target" if named else "", **kw)
        if y is not None:
            np.savetxt(folder / "labels.csv", y, fmt="%d", header="label" if named else "", **kw)


@st.composite
def _graphs(draw):
    n = draw(st.integers(2, 7))
    f = draw(st.integers(1, 3))
    # integer features too: a first row 0,1,... then reads exactly like pandas's header
    value = st.integers(0, 3) if draw(st.booleans()) else st.floats(-1e3, 1e3, allow_subnormal=False)
    x = np.array(draw(st.lists(st.lists(value, min_size=f, max_size=f), min_size=n, max_size=n)))
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    edges = np.array(draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=10)), dtype=np.int64)
    y = draw(st.none() | st.lists(st.integers(-1, 2), min_size=n, max_size=n).map(np.array))
    return x, edges, y


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=_graphs(), writer=st.sampled_from(WRITERS), told=st.booleans())
def test_byo_roundtrip_property(tmp_path_factory, graph, writer, told):
    """Any small graph written by numpy or pandas, with or without a header, reads back exactly as
    written or is rejected with a GBPNError; told whether there is a header, it always reads back.
    Written with pandas's index column, it is always rejected."""
    x, edges, y = graph
    folder = tmp_path_factory.mktemp("g")
    _write(folder, writer, x, edges, y)
    has_header = writer != "numpy"
    try:
        d = load_byo(folder, header=has_header if told else None)
    except GBPNError:
        assert not told or writer == "pandas-index", "an explicit --header/--no-header must read the folder"
        return
    assert writer != "pandas-index", "an index column must never be read as a feature or a node id"
    assert d.num_nodes == len(x)
    np.testing.assert_array_equal(d.x.numpy(), x.astype(np.float32))
    assert d.edge_index.T.tolist() == edges.tolist()
    if y is not None:
        assert d.y.tolist() == y.tolist()


def test_edges_starting_0_1_beside_a_named_header_must_be_said(tmp_path):
    x, edges, y = _graph()
    (tmp_path / "g").mkdir()
    np.savetxt(tmp_path / "g" / "features.csv", x, delimiter=",", header="a,b,c,d", comments="")
    np.savetxt(tmp_path / "g" / "edges.csv", np.array([[0, 1], *edges]), fmt="%d", delimiter=",")
    with pytest.raises(GBPNError, match=r"\(0,1\) is a header .* or the edge 0-1"):
        load_byo(tmp_path / "g")
    # --no-header: lines of numbers are data (a line of names stays a header)
    assert load_byo(tmp_path / "g", header=False).edge_index.size(1) == 6
    # a symmetric list repeats the edge as 1,0: either reading gives the same graph
    np.savetxt(tmp_path / "g" / "edges.csv", np.array([[0, 1], [1, 0], *edges]), fmt="%d", delimiter=",")
    assert load_dataset(str(tmp_path / "g")).edge_index.size(1) == 12


def _folder(path, features="a,b\n1,2\n3,4\n5,6\n", edges="s,t\n0,1\n1,2\n", labels=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "features.csv").write_text(features)
    (path / "edges.csv").write_text(edges)
    if labels is not None:
        (path / "labels.csv").write_text(labels)
    return path


@pytest.mark.parametrize("edges,message", [
    ("s,t\n0,1\n1,2.5\n", r"edge 2 \(1, 2.5\) is not a pair of whole-number node ids"),
    ("s,t\n0,1\n1,\n", r"edges.csv line 3, column 2 is empty"),
    ("s,t\n0,1\n1,7\n", r"edge 2 \(1, 7\) names a node outside 0..2: node ids count the rows of features.csv \(3\)"),
    ("s,t\n0,1\n-1,2\n", r"edge 2 \(-1, 2\) names a node outside"),
    ("s,t,u\n0,1,2\n1,2,0\n", "must have two columns"),
])
def test_a_bad_edge_names_its_row(tmp_path, edges, message):
    with pytest.raises(GBPNError, match=message):
        load_byo(_folder(tmp_path / "g", edges=edges))


def test_a_trailing_comma_is_named(tmp_path):
    with pytest.raises(GBPNError, match="a comma at the end of a line"):
        load_byo(_folder(tmp_path / "g", features="1,2,\n3,4,\n5,6,\n", edges="1,2\n"))


def test_an_empty_label_names_its_line(tmp_path):
    with pytest.raises(GBPNError, match="labels.csv line 3 is empty"):
        load_byo(_folder(tmp_path / "g", labels="label\n0\n\n1\n"))
    load_byo(_folder(tmp_path / "h", labels="label\n0\n1\n1\n\n\n"))  # blank lines at the end are fine


def test_two_files_for_one_part_are_refused(tmp_path):
    g = _folder(tmp_path / "g", labels="y\n0\n1\n1\n")
    np.save(g / "labels.npy", np.array([1, 0, 0]))
    with pytest.raises(GBPNError, match="holds labels.npy and labels.csv: keep one"):
        load_byo(g)


def test_only_self_loops_is_reported(tmp_path, caplog):
    d = load_byo(_folder(tmp_path / "g", edges="s,t\n0,0\n1,1\n"))
    assert "only self-loops" in caplog.text and d.num_nodes == 3


@pytest.mark.parametrize("masks,message", [
    ({"train": [1, 0, 0], "val": [0, 1, 0]}, r"it lacks test \(it holds: train, val\)"),
    ({"train": [True] * 2, "val": [False] * 2, "test": [False] * 2}, r"got \(2,\), \(2,\), \(2,\)"),
])
def test_bad_splits_say_what_is_wrong(tmp_path, masks, message):
    g = _folder(tmp_path / "g", labels="y\n0\n1\n1\n")
    np.savez(g / "splits.npz", **{k: np.array(v) for k, v in masks.items()})
    with pytest.raises(GBPNError, match=message):
        load_byo(g)


def _text_folder(folder, x, edges, y, ext=".csv", sep=","):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"features{ext}").write_text("\n".join(sep.join(f"{v:.6f}" for v in row) for row in x) + "\n")
    (folder / f"edges{ext}").write_text("\n".join(f"{a}{sep}{b}" for a, b in edges) + "\n")
    (folder / f"labels{ext}").write_text("\n".join(str(v) for v in y) + "\n")


def test_a_byte_order_mark_is_read_past(tmp_path):
    x, edges, y = _graph()
    _text_folder(tmp_path / "g", x, edges, y)
    for name in ("edges.csv", "labels.csv"):  # Excel's "CSV UTF-8" starts with a BOM
        p = tmp_path / "g" / name
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    (tmp_path / "g" / "class_names.txt").write_bytes("\ufeffcat\ndog\nemu\n".encode())
    d = load_byo(tmp_path / "g")
    assert d.y.tolist() == y.tolist() and d.edge_index.T.tolist() == edges.tolist()
    assert d.class_names == ["cat", "dog", "emu"]


@pytest.mark.parametrize("name,content", [("labels.csv", "label\ncaf\xe9\n".encode("latin-1")),
                                          ("features.csv", "a,b\n1,2\n".encode("utf-16")),
                                          ("class_names.txt", "caf\xe9\n".encode("latin-1"))])
def test_text_that_is_not_utf8_is_named(tmp_path, name, content):
    x, edges, y = _graph()
    _text_folder(tmp_path / "g", x, edges, y)
    (tmp_path / "g" / name).write_bytes(content)
    with pytest.raises(GBPNError, match=f"{name} is not UTF-8 text"):
        load_byo(tmp_path / "g")


def test_an_empty_cell_is_named_and_a_tsv_keeps_its_columns(tmp_path):
    x, edges, y = _graph()
    _text_folder(tmp_path / "t", x, edges, y, ext=".tsv", sep="\t")
    feats = tmp_path / "t" / "features.tsv"
    lines = feats.read_text().splitlines()
    cells = lines[3].split("\t")
    cells[2] = ""
    feats.write_text("\n".join(lines[:3] + ["\t".join(cells)] + lines[4:]) + "\n")
    with pytest.raises(GBPNError, match=r"line 4 has an empty field \(two tabs in a row\)"):  # not merged away
        load_byo(tmp_path / "t")
    # trailing tabs and space-separated lines in a .tsv still read as before
    _text_folder(tmp_path / "u", x, edges, y, ext=".tsv", sep="\t")
    feats = tmp_path / "u" / "features.tsv"
    feats.write_text("".join(line + "\t\n" for line in feats.read_text().splitlines()))
    (tmp_path / "u" / "edges.tsv").write_text("\n".join(f"{a} {b}" for a, b in edges) + "\n")
    d = load_byo(tmp_path / "u")
    assert np.allclose(d.x.numpy(), x, atol=1e-6) and d.edge_index.T.tolist() == edges.tolist()
    _text_folder(tmp_path / "c", x, edges, y)
    first = (tmp_path / "c" / "features.csv").read_text().splitlines()
    cells = first[0].split(",")
    cells[1] = ""
    (tmp_path / "c" / "features.csv").write_text("\n".join([",".join(cells)] + first[1:]) + "\n")
    with pytest.raises(GBPNError, match="column 2 is empty"):
        load_byo(tmp_path / "c")


def test_an_id_column_and_one_based_ids_are_warned_about(tmp_path, caplog):
    x, edges, y = _graph()
    x = np.column_stack([np.arange(6), x])  # an id column
    _text_folder(tmp_path / "g", x, edges, y)  # the edges never name node 0
    with caplog.at_level("WARNING", logger="gbpn"):
        load_byo(tmp_path / "g")
    assert "an id column is read as a feature" in caplog.text and "never names node 0" in caplog.text


def test_classes_without_a_training_node_are_warned_about(caplog):
    from torch_geometric.data import Data
    import torch

    from gbpn.train.config import TrainConfig
    from gbpn.train.fit import fit

    n = 30
    data = Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.arange(n) % 5)
    masks = (torch.arange(n) < 6, (torch.arange(n) >= 6) & (torch.arange(n) < 12), torch.arange(n) >= 12)
    masks[0][:] = False
    masks[0][torch.tensor([0, 1, 5])] = True  # classes 0 and 1 only
    with caplog.at_level("WARNING", logger="gbpn"):
        fit(data, TrainConfig(epochs=1, hidden=8), masks=masks)
    assert "3 of 5 classes have no training node" in caplog.text
