"""Your own graph: a folder of ``edges``, ``features`` and ``labels`` files (CSV, TSV or ``.npy``),
optionally ``class_names.txt`` and ``splits.npz``, read into a cleaned :class:`~torch_geometric.data.Data`
with every problem reported as one clear error naming the file and line."""
from __future__ import annotations

import itertools
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch_geometric.data import Data

from gbpn.errors import DatasetNotFoundError, GBPNError

log = logging.getLogger(__name__)


BYO_FILES = ("edges", "features", "labels")


@dataclass
class _Table:
    """A bring-your-own file read as numbers. ``first`` says what its first line was: ``"header"``
    (names, or ``header=True``; not in ``rows``), ``"data"``, ``"positional"`` (the column numbers
    ``0,1,...,k-1`` that pandas writes as a header, or ``1,...,k`` for k > 1, or data that reads so; kept in
    ``rows`` until :func:`_resolve_headers` decides) or ``"none"`` (``.npy``, an empty file)."""

    path: Path
    first: str
    rows: np.ndarray


# a UTF-8 byte order mark (Excel's "CSV UTF-8") is read past, not taken for part of the first field
_ENCODING = "utf-8-sig"


def _first_fields(path: Path) -> Tuple[Optional[str], List[str]]:
    """The delimiter for pandas (``,`` or whitespace) and the fields of the first non-blank line."""
    try:
        with open(path, encoding=_ENCODING) as fh:
            for line in fh:
                if line.strip():
                    sep = "," if "," in line else r"\s+"
                    return sep, [t.strip().strip('"') for t in (line.split(",") if sep == "," else line.split())]
    except UnicodeDecodeError as err:
        raise GBPNError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8 (in Excel, "
                        "'CSV UTF-8')") from None
    return None, []


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def _first_non_number(path: Path, sep: str, skip: int) -> str:
    """Where the first field that is not a number sits (only called once a parse has failed)."""
    import pandas as pd

    frame = pd.read_csv(path, sep=sep, header=None, skiprows=skip, dtype=str, keep_default_na=False,
                        encoding=_ENCODING)
    bad = frame.apply(lambda col: pd.to_numeric(col, errors="coerce").isna() & (col.str.strip() != ""))
    r, c = np.argwhere(bad.to_numpy())[0]
    return f"line {int(r) + 1 + skip}, column {int(c) + 1}: {frame.iat[r, c]!r} is not a number"


def _read_table(path: Path, header: Optional[bool]) -> _Table:
    """Read one CSV/TSV/TXT file (pandas, explicit options) or ``.npy`` array as a float64 matrix."""
    if path.suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise GBPNError(f"{path} is not a readable .npy array ({err}); write it with numpy.save") from None
        if arr.ndim not in (1, 2) or arr.dtype.kind not in "biuf":
            raise GBPNError(f"{path} must be a 1-D or 2-D array of real numbers (bool, int or float), got {arr.dtype} "
                            f"of shape {arr.shape}" + (": keep the real part (arr.real) or split it into two columns"
                                                       if arr.dtype.kind == "c" else ""))
        arr = arr.astype(np.float64)
        return _Table(path, "none", arr.reshape(-1, 1) if arr.ndim == 1 else arr)
    sep, fields = _first_fields(path)
    if sep is None:
        return _Table(path, "none", np.zeros((0, 0)))
    numeric = [_is_number(t) for t in fields]
    if header is not None:  # a line of names is a header even with --no-header: it cannot be data
        first = "header" if header or not any(numeric) else "data"
    elif all(numeric):
        # column numbers counted from 0 (pandas) or, for two or more columns, from 1: a header or data
        bases = (0, 1) if len(fields) > 1 else (0,)
        first = "positional" if fields in ([str(k + b) for k in range(len(fields))] for b in bases) else "data"
    elif not any(numeric):
        first = "header"
    else:
        hint = (" (an unnamed first column is the index pandas writes unless to_csv(index=False))"
                if fields[0] == "" else " (a comma at the end of a line leaves an empty last column: remove it)"
                if fields[-1] == "" else f" (column {fields.index('') + 1} is empty)" if "" in fields else "")
        raise GBPNError(f"the first line of {path} mixes numbers and text ({','.join(fields)}){hint}: a header "
                        "holds only names and a data row only numbers; fix the line, or pass --header or --no-header")
    import pandas as pd

    skip = int(first == "header")
    try:
        rows = pd.read_csv(path, sep=sep, header=None, skiprows=skip, dtype=np.float64, encoding=_ENCODING).to_numpy()
    except pd.errors.EmptyDataError:  # only a header line
        rows = np.zeros((0, len(fields)))
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise GBPNError(f"could not parse {path}: {err}") from None
    except ValueError:
        raise GBPNError(f"{path} {_first_non_number(path, sep, skip)}"
                        + ("; pass --header if the first line is a header" if header is False else "")) from None
    if len(fields) == 1:  # one value per line: a blank line is an empty cell, not a stray line
        _check_blank_lines(path)
    if sep != "," and path.suffix == ".tsv":
        _check_empty_tab_fields(path)
    if rows.size and np.isnan(rows).any():
        _check_row_lengths(path, sep, skip, rows)
    return _Table(path, first, rows)


def _check_blank_lines(path: Path) -> None:
    """pandas skips a blank line: in a one-column file (labels) inside the data that silently drops
    a node's value and shifts the ones after it, so name the line instead (blank lines at the end
    are harmless)."""
    import re

    text = path.read_bytes()
    gap = re.search(rb"\n[ \t\r]*\n(?=[ \t\r\n]*[^ \t\r\n])", text)
    if gap is not None and text[: gap.start()].strip():
        line = text.count(b"\n", 0, gap.start()) + 2
        raise GBPNError(f"{path} line {line} is empty: every node needs its row (in a labels file, -1 marks an "
                        "unknown label); fill it in or delete the line")


def _check_empty_tab_fields(path: Path) -> None:
    """Whitespace separation merges two tabs into one: an empty field between them would vanish and
    shift the columns after it, so it is named instead."""
    import re

    text = path.read_bytes().decode(_ENCODING, errors="replace")
    gap = re.search(r"\S\t[ ]*\t[ ]*\S", text)
    if gap:
        line = text.count("\n", 0, gap.start()) + 1
        raise GBPNError(f"{path} line {line} has an empty field (two tabs in a row): every cell needs a value")


def _check_row_lengths(path: Path, sep: str, skip: int, rows: np.ndarray) -> None:
    """pandas pads a short row with NaN: name the line instead of reporting NaN features later."""
    import re

    first_nan = int(np.isnan(rows).any(1).nonzero()[0][0])
    with open(path, errors="replace", encoding=_ENCODING) as fh:
        data_lines = ((k + 1, line) for k, line in enumerate(fh) if line.strip())
        for _ in range(skip):
            next(data_lines, None)
        for r, (line_no, line) in enumerate(data_lines):
            if r == first_nan:
                tokens = line.rstrip("\r\n").split(sep) if sep in (",", "\t") else re.split(sep, line.strip())
                if len(tokens) < rows.shape[1]:
                    raise GBPNError(f"{path} line {line_no} has {len(tokens)} value(s) where the other rows have "
                                    f"{rows.shape[1]}: every row needs one value per column")
                col = int(np.isnan(rows[first_nan]).nonzero()[0][0])
                if col < len(tokens) and not tokens[col].strip():
                    raise GBPNError(f"{path} line {line_no}, column {col + 1} is empty: every cell needs a value")
                return


def _resolve_headers(tables: Dict[str, _Table]) -> Dict[str, np.ndarray]:
    """Each table's data rows. A first line ``0,1,...`` or ``1,2,...`` (``positional``) is a header
    or data, whichever makes the features and labels have equal row counts and every node id in
    the edges lie below the number of nodes; the edges file follows a features file without a
    header (both written the same way), and with a header or as ``.npy`` its first edge must
    recur to be read as one. When both readings fit, ask for ``--header`` / ``--no-header``."""
    unknown = [s for s in ("features", "labels") if s in tables and tables[s].first == "positional"]
    fits = []
    for choice in itertools.product([False, True], repeat=len(unknown)):
        drop = dict(zip(unknown, choice))
        drop["edges"] = tables["edges"].first == "positional" and drop.get("features", False)
        rows = {s: t.rows[1:] if drop.get(s) else t.rows for s, t in tables.items()}
        n, e = len(rows["features"]), rows["edges"]
        if ("labels" not in rows or len(rows["labels"]) == n) and not (e.size and np.nanmax(e) >= n):
            fits.append((rows, [s for s in drop if drop[s]]))
    edges = tables["edges"]
    if (edges.first == "positional" and tables["features"].first in ("header", "none")
            and edges.rows.ndim == 2 and edges.rows.shape[1] == 2):
        # nothing to follow: "0,1" is read as an edge, which is harmless only if that edge recurs
        a, b = edges.rows[0].astype(np.int64)
        rest = edges.rows[1:]
        if not ((rest == edges.rows[0]).all(1) | (rest == edges.rows[0, ::-1]).all(1)).any():
            raise GBPNError(f"cannot tell whether the first line of {edges.path} ({a},{b}) is a header (as pandas "
                            f"writes it) or the edge {a}-{b}; pass --header or --no-header")
    if not fits:  # the graph check names what is wrong
        return {s: t.rows for s, t in tables.items()}
    if len(fits) == 1:
        rows, dropped = fits[0]
        if dropped:
            log.warning("read the first line of %s as a header (only then do the row counts and node ids agree); "
                        "pass --header to say so", ", ".join(str(tables[s].path) for s in dropped))
        return rows
    lines = ", ".join(f"{s}: {len(tables[s].rows)} lines" for s in ("features", "labels") if s in tables)
    if tables["edges"].rows.size:
        lines += f", largest node id in edges: {int(np.nanmax(tables['edges'].rows))}"
    raise GBPNError(
        f"cannot tell whether the first line of {' and '.join(tables[s].path.name for s in unknown)} (the column "
        f"numbers 0,1,... or 1,2,... that pandas and others write as a header) is a header or data: both "
        f"readings fit ({lines}); pass --header or --no-header")


def _check_is_file(path: Path) -> None:
    """A path that is there but is no readable file (a folder, a broken link) is named, not skipped."""
    if path.is_symlink() and not path.exists():
        raise GBPNError(f"{path} is a broken link (to {os.readlink(path)}): point it at the file or remove it")
    if path.exists() and not path.is_file():
        raise GBPNError(f"{path} is a folder, not a file: the graph folder's files must be plain files")


def find_byo_file(folder: Path, stem: str) -> Optional[Path]:
    """The file ``stem`` of a bring-your-own folder (``.npy``, ``.csv``, ``.txt`` or ``.tsv``), or ``None``."""
    for ext in (".npy", ".csv", ".txt", ".tsv"):
        _check_is_file(folder / (stem + ext))
    found = [folder / (stem + ext) for ext in (".npy", ".csv", ".txt", ".tsv") if (folder / (stem + ext)).is_file()]
    if len(found) > 1:
        raise GBPNError(f"{folder} holds {' and '.join(p.name for p in found)}: keep one of them, so that it is clear "
                        "which one is read")
    return found[0] if found else None


def _read_splits(path: Path, num_nodes: int) -> torch.Tensor:
    """``splits.npz`` as ``[3, S, N]`` boolean masks (train, val, test)."""
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise GBPNError(f"{path} is a single .npy array, not an .npz archive: write the masks with "
                            "numpy.savez(path, train=..., val=..., test=...)")
        missing = [k for k in ("train", "val", "test") if k not in z.files]
        if missing:
            raise GBPNError(f"{path} must hold the boolean masks train, val and test; it lacks {', '.join(missing)} "
                            f"(it holds: {', '.join(z.files) or 'nothing'})")
        given = [np.asarray(z[k]) for k in ("train", "val", "test")]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise GBPNError(f"could not read {path} as an .npz archive ({type(err).__name__}: {err or 'empty file'}); "
                        "write it with numpy.savez(path, train=..., val=..., test=...)") from None
    masks = [m.reshape(1, -1) if m.ndim == 1 else m for m in given]
    shapes = {m.shape for m in masks}
    if len(shapes) != 1 or masks[0].ndim != 2 or masks[0].shape[1] != num_nodes:
        raise GBPNError(f"{path}: train, val and test must each be [N] or [S, N] boolean masks with N = {num_nodes} "
                        f"nodes, got {', '.join(str(m.shape) for m in given)} (from node indices idx: "
                        "mask = np.zeros(N, bool); mask[idx] = True)")
    if masks[0].shape[0] == 0:
        raise GBPNError(f"{path} holds no split (masks of shape {given[0].shape}): give at least one row per mask")
    if any(m.dtype != np.bool_ and not np.isin(m, (0, 1)).all() for m in masks):
        raise GBPNError(f"{path}: masks must be boolean (or 0/1)")
    out = torch.from_numpy(np.stack(masks).astype(bool))
    if bool((out.sum(0) > 1).any()):
        raise GBPNError(f"{path}: a node is in more than one of train, val and test in the same split")
    for name, m in zip(("training", "validation", "test"), out):
        empty = (m.sum(-1) == 0).nonzero().view(-1)
        if empty.numel():  # model selection and the reported score need nodes in each part
            raise GBPNError(f"{path}: split {int(empty[0])} has no {name} node; every split needs some of each")
    return out


def _check_node_ids(edges_path: Path, features_path: Path, edges: np.ndarray, num_nodes: int) -> None:
    """Every entry of the edge list a node id: a whole number in ``0..num_nodes-1`` (one per row of
    the features); the message names the edge row at fault."""
    whole = np.isfinite(edges) & (edges == np.round(edges))  # False for NaN (an empty cell) and inf too
    if not whole.all():
        r = int(np.argwhere(~whole)[0, 0])
        raise GBPNError(f"{edges_path}: edge {r + 1} ({', '.join(f'{v:g}' for v in edges[r])}) is not a pair of "
                        "whole-number node ids")
    bad = (edges < 0) | (edges >= num_nodes)
    if bad.any():
        r = int(np.argwhere(bad)[0, 0])
        raise GBPNError(f"{edges_path}: edge {r + 1} ({int(edges[r, 0])}, {int(edges[r, 1])}) names a node outside "
                        f"0..{num_nodes - 1}: node ids count the rows of {features_path.name} ({num_nodes}) from 0")


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_float32(path: Path, x: np.ndarray) -> None:
    """Features are trained on in float32: a finite value beyond its range would become inf."""
    big = np.isfinite(x) & (np.abs(x) > _FLOAT32_MAX)
    if big.any():
        r, c = (int(i) for i in np.argwhere(big)[0])
        raise GBPNError(f"{path}: node {r} (row {r + 1} of the data), column {c + 1} holds {x[r, c]:g}, beyond the "
                        f"float32 range (|x| <= {_FLOAT32_MAX:.3g}) that features are trained in: rescale that feature")


# A class id beyond the node count (and this) is a typo: it would make the model carry that many classes.
_MIN_CLASS_CAP = 1024


def _check_labels(path: Path, y: np.ndarray, class_names: Optional[List[str]]) -> None:
    """Class ids are whole numbers ``0..c-1`` (or -1 for unknown), and ``c`` is at most the number of
    nodes (or of the names in ``class_names.txt``): a larger id is a typo, not a class."""
    whole = np.isfinite(y) & (y == np.round(y))
    if not whole.all():
        r = int(np.argwhere(~whole)[0, 0])
        raise GBPNError(f"{path}: node {r} (row {r + 1} of the data) has label {y[r]:g}: labels must hold integer "
                        "class ids 0..c-1 (or -1 for unknown)")
    low = y < -1
    if low.any():
        r = int(np.argwhere(low)[0, 0])
        raise GBPNError(f"{path}: node {r} (row {r + 1} of the data) has label {int(y[r])}: labels must lie in "
                        "0..c-1 (or -1 for unknown)")
    cap = max(len(class_names or ()), y.size, _MIN_CLASS_CAP)
    high = y >= cap
    if high.any():
        r = int(np.argwhere(high)[0, 0])
        raise GBPNError(f"{path}: node {r} (row {r + 1} of the data) has label {y[r]:.0f}, beyond the {cap} classes "
                        "allowed here (the larger of the node count, the names in class_names.txt and "
                        f"{_MIN_CLASS_CAP}): class ids count 0..c-1 (a typo?)")


def _read_class_names(path: Path) -> Optional[List[str]]:
    """``class_names.txt``: one distinct, non-empty name per line (blank lines at the end are fine)."""
    _check_is_file(path)
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding=_ENCODING)
    except UnicodeDecodeError as err:
        raise GBPNError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8") from None
    lines = [s.strip() for s in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if "" in lines:  # dropping it would shift every later name onto the wrong class
        raise GBPNError(f"{path} line {lines.index('') + 1} is empty: class k is named on line k + 1, so every class "
                        "needs its line; fill it in or delete the line")
    seen: Dict[str, int] = {}
    for i, name in enumerate(lines):
        if name in seen:
            raise GBPNError(f"{path} names {name!r} twice (lines {seen[name] + 1} and {i + 1}): each class needs its "
                            "own name")
        seen[name] = i
    return lines


def load_byo(folder: str | Path, header: Optional[bool] = None) -> Data:
    """Load your own graph from a folder holding, in CSV (optional header) or ``.npy``:

    * ``edges.csv``: two integer columns ``source,target`` (0-based node ids; either
      direction or both; duplicates and self-loops are cleaned away);
    * ``features.csv``: one row per node, one column per feature;
    * ``labels.csv`` (optional): one integer per node, ``0..c-1``, or ``-1`` if unknown;
    * ``class_names.txt`` (optional): one class name per line; labels must then lie in
      ``0..len(names)-1``;
    * ``splits.npz`` (optional): boolean masks ``train``, ``val`` and ``test``, each ``[N]`` (one
      split) or ``[S, N]`` (``S`` splits, trial ``k`` uses split ``k mod S``), like the public
      splits of the built-in data sets; without it every trial draws a random split.

    ``header``: ``True`` if the first line of every CSV file is a header, ``False`` if a first
    line of numbers is data (a line of names is a header all the same), ``None`` (default) to tell: a first line of names is a header, one of numbers is data,
    except the column numbers ``0,1,...,k-1`` (what pandas writes as a header by default) or
    ``1,...,k`` (``k > 1``), decided by the row counts of features and labels and the largest
    node id in the edges (see :func:`_resolve_headers`); if that does not decide, an error
    asks for ``header``.
    """
    folder = Path(folder)
    paths, rows = _read_folder(folder, header)
    x = rows["features"]
    edges = _checked_rows(paths, x, rows["edges"])
    data = Data(x=torch.from_numpy(x.astype(np.float32)), edge_index=torch.from_numpy(edges.T.astype(np.int64)))
    data.num_nodes = x.shape[0]
    known = _add_labels(data, folder, paths["labels"], rows["labels"]) if "labels" in rows else None
    _add_splits(data, folder, labelled=known is not None)
    _add_class_names(data, folder, paths["labels"])
    if known is not None:
        _warn_empty_classes(data, folder, paths["labels"], known)
    return data


def _read_folder(folder: Path, header: Optional[bool]) -> Tuple[Dict[str, Optional[Path]], Dict[str, np.ndarray]]:
    """The folder's files (stem -> path, None where absent) and their rows, headers told apart."""
    paths: Dict[str, Optional[Path]] = {stem: find_byo_file(folder, stem) for stem in BYO_FILES}
    missing = [s for s in ("edges", "features") if paths[s] is None]
    if missing:
        raise DatasetNotFoundError(
            f"{folder} is not a graph folder: it lacks {', '.join(m + '.csv (or .npy)' for m in missing)}"
        )
    return paths, _resolve_headers({stem: _read_table(p, header) for stem, p in paths.items() if p is not None})


def _checked_rows(paths: Dict[str, Optional[Path]], x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The edges ``[E, 2]`` after the checks of the features and edges (errors and warnings)."""
    if not x.shape[0]:
        raise GBPNError(f"{paths['features']} holds no rows: it needs one row of numbers per node")
    _check_float32(paths["features"], x)
    if not edges.size:
        log.warning("%s holds no edges: every node is isolated and its belief is its own evidence", paths["edges"])
        edges = np.zeros((0, 2))
    elif edges.shape[1] != 2:
        raise GBPNError(f"{paths['edges']} must have two columns (source, target), got {edges.shape[1]}")
    else:
        _check_node_ids(paths["edges"], paths["features"], edges, x.shape[0])
        if x.shape[0] > 2 and edges.min() == 1 and not (edges == 0).any():
            log.warning("%s never names node 0: if its ids count from 1, every node is shifted by one (ids are "
                        "0-based rows of %s)", paths["edges"], paths["features"].name)
    n = x.shape[0]
    if n > 2 and x.shape[1] > 1 and any(np.array_equal(x[:, 0], np.arange(n) + b) for b in (0, 1)):
        log.warning("the first column of %s counts the rows (%s..%d): an id column is read as a feature; drop it "
                    "(rows are matched to nodes by position)", paths["features"], int(x[0, 0]), int(x[-1, 0]))
    if edges.size and (edges[:, 0] == edges[:, 1]).all():
        log.warning("%s holds only self-loops, which BP drops: every node is isolated and its belief is its own "
                    "evidence", paths["edges"])
    return edges


def _add_labels(data: Data, folder: Path, path: Path, y: np.ndarray) -> np.ndarray:
    """``data.y`` and ``data.num_classes`` from the labels' rows; returns the known labels (``>= 0``)."""
    if y.ndim == 2 and y.shape[1] > 1:
        raise GBPNError(f"{path} must have one column (a class id per node), got {y.shape[1]}")
    y = y.reshape(-1)
    _check_labels(path, y, _read_class_names(folder / "class_names.txt"))
    data.y = torch.from_numpy(y.astype(np.int64))
    known = y[y >= 0]
    data.num_classes = int(known.max()) + 1 if known.size else 0
    return known


def _add_splits(data: Data, folder: Path, labelled: bool) -> None:
    """``data.public_splits`` from ``splits.npz``, where there is one; every node in a split has a label."""
    _check_is_file(folder / "splits.npz")
    if (folder / "splits.npz").is_file():
        data.public_splits = _read_splits(folder / "splits.npz", data.num_nodes)
        in_split = data.public_splits.any(0).any(0)
        unlabelled = in_split & (data.y < 0) if labelled else in_split
        if bool(unlabelled.any()):
            raise GBPNError(f"{folder / 'splits.npz'} puts {int(unlabelled.sum())} node(s) without a label in a split")


def _add_class_names(data: Data, folder: Path, labels: Optional[Path]) -> None:
    """``data.class_names`` (and the class count) from ``class_names.txt``, where there is one."""
    names = folder / "class_names.txt"
    class_names = _read_class_names(names)
    if class_names is not None:
        data.class_names = class_names
        top = int(getattr(data, "num_classes", 0))
        if top > len(data.class_names):
            raise GBPNError(f"{labels} has label {top - 1} but {names} names {len(data.class_names)} "
                            f"classes (0..{len(data.class_names) - 1}); fix the labels or add the missing names")
        data.num_classes = len(data.class_names)


def _warn_empty_classes(data: Data, folder: Path, labels: Path, known: np.ndarray) -> None:
    """A warning naming the classes no node has."""
    names = folder / "class_names.txt"
    empty = np.setdiff1d(np.arange(data.num_classes), known).tolist()
    if empty:
        top = int(known.max())
        why = (f"{names.name} names {data.num_classes} classes" if names.is_file() else
               f"classes are counted up to the largest label ({top}, on {int((known == top).sum())} node(s); "
               "a typo?)")
        listed = ", ".join(map(str, empty[:10])) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
        log.warning("no node of %s has class %s: %s, and the model learns such a class from no example",
                    labels, listed, why)
