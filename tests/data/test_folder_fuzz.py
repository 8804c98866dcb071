"""Property: a small bring-your-own folder with random corruptions either trains (and ``predict``
then gives one row per node) or is refused with exit code 2 and one error line. Never exit code 1
(an internal error), never a traceback."""
import csv

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gbpn.cli import main

CORRUPTIONS = ["nan_feature", "inf_feature", "text_feature", "huge_feature", "short_row", "blank_label_line",
               "label_big", "label_negative", "label_fraction", "label_inf", "edge_outside", "edge_fraction",
               "edge_inf", "duplicate_edges", "headers", "extra_label", "no_edges", "class_names_duplicate",
               "class_names_blank", "class_names_formula", "complex_npy", "one_column_edges"]


def _write(folder, n, x, edges, labels, corruptions, rng):
    folder.mkdir()
    feat = [[f"{v:.3f}" for v in row] for row in x]
    lab = [str(v) for v in labels]
    edg = [[str(a), str(b)] for a, b in edges]
    cell = lambda rows: (int(rng.integers(len(rows))), int(rng.integers(len(rows[0]))))  # noqa: E731
    for c in corruptions:
        if c in ("nan_feature", "inf_feature", "text_feature", "huge_feature"):
            r, k = cell(feat)
            feat[r][k] = {"nan_feature": "nan", "inf_feature": "inf", "text_feature": "abc", "huge_feature": "1e39"}[c]
        elif c == "short_row" and len(feat[0]) > 1:
            feat[int(rng.integers(n))].pop()
        elif c.startswith("label_"):
            lab[int(rng.integers(n))] = {"label_big": "1000000", "label_negative": "-5", "label_fraction": "1.5",
                                         "label_inf": "inf"}[c]
        elif c.startswith("edge_") and edg:
            r, k = cell(edg)
            edg[r][k] = {"edge_outside": str(n + 3), "edge_fraction": "1.5", "edge_inf": "inf"}[c]
        elif c == "duplicate_edges" and edg:
            edg += edg[:2]
        elif c == "extra_label":
            lab.append("0")
        elif c == "no_edges":
            edg = []
        elif c == "one_column_edges" and edg:
            edg = [[a] for a, _ in edg]
    text = lambda rows: "".join(",".join(r) + "\n" for r in rows)  # noqa: E731
    headers = "headers" in corruptions
    (folder / "features.csv").write_text(("f0,f1,f2\n"[: 3 * len(feat[0]) - 1] + "\n" if headers else "")
                                         + text(feat))
    (folder / "edges.csv").write_text(("source,target\n" if headers else "") + text(edg))
    body = "".join(v + "\n" for v in lab)
    if "blank_label_line" in corruptions:
        lines = body.splitlines(keepends=True)
        body = "".join(lines[:1] + ["\n"] + lines[1:])
    (folder / "labels.csv").write_text(("label\n" if headers else "") + body)
    if "complex_npy" in corruptions:
        (folder / "features.csv").unlink()
        np.save(folder / "features.npy", np.asarray(x) + 1j)
    names = None
    if "class_names_duplicate" in corruptions:
        names = "a\na\n"
    elif "class_names_blank" in corruptions:
        names = "a\n\nb\n"
    elif "class_names_formula" in corruptions:
        names = "=1+1\n@b\n"
    if names is not None:
        (folder / "class_names.txt").write_text(names)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(4, 9), nf=st.integers(1, 3), seed=st.integers(0, 2**16),
       corruptions=st.lists(st.sampled_from(CORRUPTIONS), max_size=2, unique=True))
def test_a_corrupted_folder_trains_or_is_refused_in_one_line(tmp_path_factory, capsys, n, nf, seed, corruptions):
    rng = np.random.default_rng(seed)
    tmp = tmp_path_factory.mktemp("fuzz")
    x = rng.normal(size=(n, nf))
    ring = [(i, (i + 1) % n) for i in range(n)]
    labels = [i % 2 for i in range(n)]
    _write(tmp / "g", n, x, ring, labels, corruptions, rng)
    code = main(["train", "--dataset", str(tmp / "g"), "--epochs", "1", "--trials", "1", "--hidden", "4", "-q",
                 "--output", str(tmp / "run")])
    err = capsys.readouterr().err
    assert "Traceback" not in err and code in (0, 2), (corruptions, code, err)
    if code == 2:
        assert len([line for line in err.splitlines() if "error:" in line]) == 1, (corruptions, err)
        return
    assert main(["predict", "--checkpoint", str(tmp / "run" / "model.pt"), "--output", str(tmp / "p.csv"),
                 "-q"]) == 0, (corruptions, capsys.readouterr().err)
    with open(tmp / "p.csv") as fh:
        assert len(list(csv.reader(fh))) == n + 1
