"""Dataset loaders: PyG benchmark graphs, the reference GBPN files, generated grids, and your own graph.

Every loader returns a cleaned :class:`torch_geometric.data.Data` with ``x``,
``y`` (``-1`` = unknown), ``edge_index`` (symmetric, coalesced, no self-loops),
``rev_index``, ``num_classes``, ``name`` and ``class_names``.

Where data comes from: ``data_dir`` (the ``--data-dir`` option), else the
``GBPN_DATA`` environment variable, else ``~/.cache/gbpn/data``. A read-only data
directory is never written to: the raw files a PyG class needs are copied into
the writable cache (``GBPN_CACHE``, default ``~/.cache/gbpn``) first.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import shutil
import stat
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch_geometric.data import Data

from gbpn.data.graph import clean_graph, validate_data
from gbpn.data.mrf import SYNTHETIC_KINDS, make_synthetic
from gbpn.errors import DatasetNotFoundError, GBPNError

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
COAUTHOR = {"cs": "CS", "physics": "Physics"}
WIKIPEDIA = ("chameleon", "squirrel")
# Platonov et al. (2023) npz files; the filtered ones drop duplicate nodes that leak across splits.
YANDEX = {"chameleon-filtered": "chameleon_filtered", "squirrel-filtered": "squirrel_filtered",
          "chameleon-yandex": "chameleon", "squirrel-yandex": "squirrel"}
OGB = ("ogbn-arxiv", "ogbn-products")
REFERENCE_GRIDS = SYNTHETIC_KINDS
ALIASES = {"county_facebook": "election", "sexual_interaction": "sexual"}
log = logging.getLogger(__name__)


def data_root(data_dir: Optional[str] = None) -> Path:
    """The data directory: the argument, else ``$GBPN_DATA``, else ``~/.cache/gbpn/data``."""
    return Path(data_dir or os.environ.get("GBPN_DATA") or Path.home() / ".cache" / "gbpn" / "data").expanduser()


def cache_root() -> Path:
    return Path(os.environ.get("GBPN_CACHE") or Path.home() / ".cache" / "gbpn").expanduser()


@contextlib.contextmanager
def loading_lock(key: str) -> Iterator[None]:
    """Hold the data set ``key``'s lock file (in the cache folder) while preparing it: several runs
    started together (a grid's workers, ``torchrun`` ranks) would otherwise copy the same raw files
    and let PyG / OGB write the same processed files at once. Unlocked where the cache folder cannot
    be written or ``fcntl`` does not exist (Windows)."""
    fh = None
    try:
        import fcntl

        folder = cache_root() / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        fh = open(folder / f"{key}.lock", "a")
        fcntl.flock(fh, fcntl.LOCK_EX)
    except (ImportError, OSError):
        if fh is not None:
            fh.close()
            fh = None
    try:
        yield
    finally:
        if fh is not None:
            fh.close()  # releases the lock


def available_datasets() -> List[str]:
    return (
        list(PLANETOID) + list(COAUTHOR) + list(WIKIPEDIA) + list(YANDEX) + ["election", "sexual", "elliptic"] + list(OGB)
        + list(REFERENCE_GRIDS)
        + [f"synth-{k}" for k in SYNTHETIC_KINDS]
    )


def _is_writable(path: Path) -> bool:
    # Root passes os.access on anything; the owner write bit tells a folder that is meant read-only.
    return path.is_dir() and os.access(path, os.W_OK) and bool(path.stat().st_mode & stat.S_IWUSR)


def _writable_copy(root: Path, sub: str, whole: bool = False) -> Path:
    """``root`` if a loader may write there, else a cache folder holding a copy of ``root/sub``'s
    raw files (its ``raw`` folders, or with ``whole`` everything but ``processed``)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if _is_writable(root):
        return root
    target = cache_root() / "pyg" / root.resolve().as_posix().strip("/").replace("/", "_")
    src = root / sub
    try:
        target.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            for folder in [src] if whole else src.rglob("raw"):
                dest = target / folder.relative_to(root)
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    tmp = dest.with_name(dest.name + ".partial")
                    shutil.rmtree(tmp, ignore_errors=True)
                    shutil.copytree(folder, tmp, ignore=shutil.ignore_patterns("processed"))
                    os.replace(tmp, dest)  # a half-finished copy never looks complete
    except OSError as err:
        raise GBPNError(f"{root} is read-only, so its raw files are copied to the cache {cache_root()}, which cannot "
                        f"be written ({err.strerror or err}: {err.filename or target}); set GBPN_CACHE to a writable "
                        "folder") from None
    return target


class _LinesToLog(io.TextIOBase):
    """A text stream whose complete lines become ``log.info`` messages (so ``-q`` hides them)."""

    def __init__(self) -> None:
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            if line.strip():
                log.info(line.strip().split("\r")[-1])
        return len(text)


@contextlib.contextmanager
def _library_output_to_log() -> Iterator[None]:
    """What PyG and OGB print while they download and process ("Processing...", "Done!") goes through
    logging like the rest of gbpn's messages, not straight to the terminal or into stdout's results."""
    sink = _LinesToLog()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        sink.write("\n")  # an unfinished last line


@contextlib.contextmanager
def _tidy_on_failure(folder: Path) -> Iterator[None]:
    """If the body fails, remove the empty folders it made in ``folder`` and the ancestors it created
    (PyG and OGB make ``raw/`` before a download fails): a typo in ``--data-dir`` leaves nothing behind."""
    new = [p for p in [folder, *folder.parents] if not p.exists()]
    try:
        yield
    except BaseException:
        if new and new[-1].is_dir():
            made = sorted((p for p in new[-1].rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in [*made, *new]:  # deepest first; a folder that holds anything stays
                with contextlib.suppress(OSError):
                    d.rmdir()
        raise


def _pyg(make: Callable[[str], object], root: Path, sub: str, name: str, files: Sequence[str]) -> Data:
    with _tidy_on_failure(root / sub):
        return _pyg_load(make, root, sub, name, files)


def _pyg_load(make: Callable[[str], object], root: Path, sub: str, name: str, files: Sequence[str]) -> Data:
    where = _writable_copy(root, sub)
    try:
        with _library_output_to_log():
            ds = make(str(where / sub.split("/")[0]))
    except Exception as err:  # PyG raises URLError, FileNotFoundError, ... when offline
        raw = where / sub
        if raw.is_dir() and all(any(raw.rglob(f)) for f in files):  # all there: one is damaged
            raise GBPNError(f"dataset {name!r}: the files in {raw} could not be read ({type(err).__name__}: "
                            f"{err}); one of {', '.join(files)} is damaged or cut short: download it again "
                            f"(and delete {raw / 'processed'} if present)") from None
        raise DatasetNotFoundError(
            f"dataset {name!r} not found in {root / sub} (looked for {', '.join(files)}) "
            f"and could not download it ({type(err).__name__}: {err}); "
            "set --data-dir or GBPN_DATA to a folder holding it"
        ) from None
    data = ds[0]
    data.num_classes = int(ds.num_classes)
    return data


def _planetoid(key: str, root: Path) -> Data:
    from torch_geometric.datasets import Planetoid

    name = PLANETOID[key]
    files = [f"ind.{key}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]
    return _pyg(lambda r: Planetoid(r, name), root, f"planetoid/{name}", key, files)


def _coauthor(key: str, root: Path) -> Data:
    from torch_geometric.datasets import Coauthor

    name = COAUTHOR[key]
    files = [f"ms_academic_{'cs' if key == 'cs' else 'phy'}.npz"]
    return _pyg(lambda r: Coauthor(r, name), root, f"coauthor/{name}", key, files)


def _wikipedia(key: str, root: Path) -> Data:
    from torch_geometric.datasets import WikipediaNetwork

    files = ["out1_graph_edges.txt", "out1_node_feature_label.txt"] + [f"{key}_split_0.6_0.2_{k}.npz" for k in range(10)]
    data = _pyg(lambda r: WikipediaNetwork(r, key, geom_gcn_preprocess=True), root,
                f"wikipedia_network/{key}/geom_gcn", key, files)
    # the 10 public splits (columns of the [N, 10] masks) as [3, 10, N]
    data.public_splits = torch.stack([data.train_mask.T, data.val_mask.T, data.test_mask.T])
    del data.train_mask, data.val_mask, data.test_mask
    return data


def _yandex(key: str, root: Path) -> Data:
    folder = root / "yandex_npz"
    fname = YANDEX[key] + ".npz"
    _require(folder, [fname], key)
    try:
        with np.load(folder / fname) as z:
            z = {k: z[k] for k in ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as err:
        raise GBPNError(f"could not read {folder / fname} ({type(err).__name__}: {err}); the file is damaged "
                        "or cut short: download it again") from None
    data = Data(x=torch.from_numpy(z["node_features"]).float(), y=torch.from_numpy(z["node_labels"]).long(),
                edge_index=torch.from_numpy(z["edges"].T.astype(np.int64)))
    data.num_classes = int(z["node_labels"].max()) + 1
    data.public_splits = torch.from_numpy(np.stack([z["train_masks"], z["val_masks"], z["test_masks"]])).bool()
    return data


def _ogb(key: str, root: Path) -> Data:
    """ogbn-arxiv / ogbn-products through ``ogb``'s ``PygNodePropPredDataset``, from
    ``<data-dir>/ogbn_arxiv/`` (the folder the OGB zip unpacks to: ``raw/``, ``split/`` and
    ``RELEASE_v1.txt``), copied into the cache first when the data folder is read-only;
    downloaded by ``ogb`` when absent and online. The official split becomes
    ``public_splits``. The graph is made undirected, as in the paper."""
    try:
        import ogb.nodeproppred  # noqa: F401
    except ImportError:
        raise GBPNError(f"{key} needs the ogb package: pip install ogb (or pip install 'gbpn[scale]')") from None
    sub = key.replace("-", "_")
    src = root / sub
    if src.is_dir() and not (src / "RELEASE_v1.txt").is_file():
        # ogb would stop and ask on stdin whether to delete the folder
        raise DatasetNotFoundError(f"{src} is not an OGB dataset folder (RELEASE_v1.txt is missing); "
                                   "unpack the OGB zip there or remove the folder")
    with _tidy_on_failure(src):
        return _ogb_load(key, root, sub, src)


def _ogb_load(key: str, root: Path, sub: str, src: Path) -> Data:
    from ogb.nodeproppred import PygNodePropPredDataset

    where = _writable_copy(root, sub, whole=True)
    where.mkdir(parents=True, exist_ok=True)
    # ogb reloads the file it has just written with a bare torch.load, which torch >= 2.6
    # refuses for PyG objects unless full unpickling is allowed for this trusted local file.
    old = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with warnings.catch_warnings():  # ogb's own warnings about its torch.load and numpy use
            warnings.simplefilter("ignore", UserWarning)
            with _library_output_to_log():
                ds = PygNodePropPredDataset(key, root=str(where))
            split = ds.get_idx_split()
    except (Exception, SystemExit) as err:  # offline download, a refused prompt (ogb calls exit), bad files
        raise DatasetNotFoundError(
            f"dataset {key!r} not found in {src} and could not be downloaded ({type(err).__name__}: {err}); "
            "set --data-dir or GBPN_DATA to a folder holding the unpacked OGB files"
        ) from None
    finally:
        if old is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = old
    g = ds[0]
    data = Data(x=g.x.float(), y=g.y.view(-1).long(), edge_index=g.edge_index)
    data.num_classes = int(ds.num_classes)
    masks = []
    for part in ("train", "valid", "test"):
        m = torch.zeros(data.num_nodes, dtype=torch.bool)
        m[split[part]] = True
        masks.append(m)
    data.public_splits = torch.stack(masks).unsqueeze(1)  # [3, 1, N]: one official split
    return data


ELLIPTIC_FILES = ("elliptic_txs_features.csv", "elliptic_txs_classes.csv", "elliptic_txs_edgelist.csv")


def _elliptic(root: Path) -> Data:
    """Elliptic bitcoin transactions in the public Kaggle CSV layout (under ``<data-dir>/elliptic/``
    or ``<data-dir>/elliptic_bitcoin_dataset/``): features (txId, time step, 165 more columns, no
    header), classes (txId,class with 1 = illicit, 2 = licit, unknown) and the edge list
    (txId1,txId2). Label 1 = illicit, 0 = licit, -1 = unknown (never trained on or scored)."""
    folder = next((root / d for d in ("elliptic", "elliptic_bitcoin_dataset") if (root / d).is_dir()), root / "elliptic")
    _require(folder, ELLIPTIC_FILES, "elliptic")
    feats = _finite(_loadtxt(folder / ELLIPTIC_FILES[0], delimiter=",", dtype=np.float64, ndmin=2),
                    folder / ELLIPTIC_FILES[0], 0)
    tx = feats[:, 0].astype(np.int64)
    order = np.argsort(tx)

    def rows_of(ids: np.ndarray, what: Path) -> np.ndarray:
        """Feature rows of transaction ids (one sorted lookup); every id must have features."""
        pos = np.clip(np.searchsorted(tx[order], ids), 0, len(tx) - 1)
        missing = tx[order][pos] != ids
        if missing.any():
            raise GBPNError(f"{what} names transaction {int(ids[missing][0])} that has no features")
        return order[pos]

    classes = _loadtxt(folder / ELLIPTIC_FILES[1], delimiter=",", skiprows=1, dtype=str, ndmin=2)
    known = np.isin(classes[:, 1], ["1", "2"]) & np.isin(classes[:, 0].astype(np.int64), tx)  # ids without features are skipped
    y = np.full(len(tx), -1, dtype=np.int64)
    y[rows_of(classes[known, 0].astype(np.int64), folder / ELLIPTIC_FILES[1])] = (classes[known, 1] == "1").astype(np.int64)
    edges = _loadtxt(folder / ELLIPTIC_FILES[2], delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    ei = rows_of(edges.T.reshape(-1), folder / ELLIPTIC_FILES[2]).reshape(2, -1)
    x = feats[:, 1:]
    x = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0)
    data = Data(x=torch.tensor(x, dtype=torch.float32), y=torch.from_numpy(y), edge_index=torch.from_numpy(ei))
    data.num_classes = 2
    data.class_names = ["licit", "illicit"]
    data.positive_class = 1  # scored with F1 on the illicit class
    return data


def _require(folder: Path, files: Sequence[str], name: str) -> None:
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        raise DatasetNotFoundError(
            f"dataset {name!r} not found: {folder} lacks {', '.join(missing)}; "
            "set --data-dir or GBPN_DATA to the folder that holds gbpn/<dataset>/"
        )


def _loadtxt(path: Path, **kwargs) -> np.ndarray:
    """``np.loadtxt`` of a raw data file; a :class:`GBPNError` naming the file when it is cut short or damaged."""
    try:
        return np.loadtxt(path, **kwargs)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise GBPNError(f"could not read {path} ({err}); the file is damaged or cut short: "
                        "download the data set again") from None


def _finite(arr: np.ndarray, path: Path, header_lines: int) -> np.ndarray:
    """``arr`` if every value is finite, else a :class:`GBPNError` naming the lines of ``path`` to fix
    (checked on the raw values, before a standardisation spreads a NaN over a whole column)."""
    bad = ~np.isfinite(arr).reshape(len(arr), -1).all(1)
    if bad.any():
        lines = (np.flatnonzero(bad)[:5] + 1 + header_lines).tolist()
        raise GBPNError(f"{path} has missing or non-finite values on line(s) {lines}"
                        f"{' and more' if bad.sum() > 5 else ''}; fix or remove those rows")
    return arr


def _election(root: Path) -> Data:
    folder = root / "gbpn" / "county_facebook"
    _require(folder, ["adj.csv", "dat.csv"], "election")
    dat = _finite(_loadtxt(folder / "dat.csv", delimiter=",", skiprows=1, ndmin=2), folder / "dat.csv", 1)
    edges = _loadtxt(folder / "adj.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    x = dat[:, :9]
    x = (x - x.mean(0)) / x.std(0)
    y = (dat[:, 9] > dat[:, 10]).astype(np.int64)  # 1 = DEM won the county
    data = Data(x=torch.tensor(x, dtype=torch.float32), y=torch.from_numpy(y), edge_index=torch.from_numpy(edges.T))
    data.num_classes = 2
    data.class_names = ["GOP", "DEM"]
    return data


def _sexual(root: Path) -> Data:
    folder = root / "gbpn" / "sexual_interaction"
    _require(folder, ["adj.csv", "dat.csv"], "sexual")
    dat = _finite(_loadtxt(folder / "dat.csv", delimiter=",", ndmin=2), folder / "dat.csv", 0)
    edges = _loadtxt(folder / "adj.csv", delimiter=",", dtype=np.int64, ndmin=2)
    data = Data(
        x=torch.tensor(dat[:, 1:21], dtype=torch.float32),
        y=torch.tensor(dat[:, 0], dtype=torch.long),
        edge_index=torch.from_numpy(edges.T),
    )
    data.num_classes = 2
    data.class_names = ["sex=0", "sex=1"]
    return data


def _reference_grid(kind: str, root: Path, sample: int) -> Data:
    folder = root / "gbpn" / kind
    _require(folder, ["adj", "coord", "label"], kind)
    edges = _loadtxt(folder / "adj", dtype=np.int64, ndmin=2) - 1  # the files count from 1
    coords = _loadtxt(folder / "coord", ndmin=2)
    labels = _loadtxt(folder / "label", dtype=np.int64, ndmin=2)
    if not 0 <= sample < labels.shape[1]:
        raise GBPNError(f"{kind} has {labels.shape[1]} label samples; --sample must be in 0..{labels.shape[1] - 1}")
    y = labels[:, sample]
    if y.min() < 0:  # Ising files use -1/+1
        y = (y > 0).astype(np.int64)
    data = Data(x=torch.tensor(coords, dtype=torch.float32), y=torch.from_numpy(y), edge_index=torch.from_numpy(edges.T))
    data.num_classes = 2 if kind.startswith("ising") else 3
    return data


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
        if arr.ndim not in (1, 2) or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise GBPNError(f"{path} must be a 1-D or 2-D numeric array, got {arr.dtype} of shape {arr.shape}")
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


def find_byo_file(folder: Path, stem: str) -> Optional[Path]:
    """The file ``stem`` of a bring-your-own folder (``.npy``, ``.csv``, ``.txt`` or ``.tsv``), or ``None``."""
    found = [folder / (stem + ext) for ext in (".npy", ".csv", ".txt", ".tsv") if (folder / (stem + ext)).is_file()]
    if len(found) > 1:
        raise GBPNError(f"{folder} holds {' and '.join(p.name for p in found)}: keep one of them, so that it is clear "
                        "which one is read")
    return found[0] if found else None


def _read_splits(path: Path, num_nodes: int) -> torch.Tensor:
    """``splits.npz`` as ``[3, S, N]`` boolean masks (train, val, test)."""
    try:
        z = np.load(path, allow_pickle=False)
        missing = [k for k in ("train", "val", "test") if k not in z.files]
        if missing:
            raise GBPNError(f"{path} must hold the boolean masks train, val and test; it lacks {', '.join(missing)} "
                            f"(it holds: {', '.join(z.files) or 'nothing'})")
        given = [np.asarray(z[k]) for k in ("train", "val", "test")]
    except (OSError, ValueError) as err:
        raise GBPNError(f"could not read {path}: {err}") from None
    masks = [m.reshape(1, -1) if m.ndim == 1 else m for m in given]
    shapes = {m.shape for m in masks}
    if len(shapes) != 1 or masks[0].ndim != 2 or masks[0].shape[1] != num_nodes:
        raise GBPNError(f"{path}: train, val and test must each be [N] or [S, N] boolean masks with N = {num_nodes} "
                        f"nodes, got {', '.join(str(m.shape) for m in given)} (from node indices idx: "
                        "mask = np.zeros(N, bool); mask[idx] = True)")
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
    whole = edges == np.round(edges)  # False for NaN (an empty cell) too
    if not whole.all():
        r = int(np.argwhere(~whole)[0, 0])
        raise GBPNError(f"{edges_path}: edge {r + 1} ({', '.join(f'{v:g}' for v in edges[r])}) is not a pair of "
                        "whole-number node ids")
    bad = (edges < 0) | (edges >= num_nodes)
    if bad.any():
        r = int(np.argwhere(bad)[0, 0])
        raise GBPNError(f"{edges_path}: edge {r + 1} ({int(edges[r, 0])}, {int(edges[r, 1])}) names a node outside "
                        f"0..{num_nodes - 1}: node ids count the rows of {features_path.name} ({num_nodes}) from 0")


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
    paths: Dict[str, Optional[Path]] = {stem: find_byo_file(folder, stem) for stem in BYO_FILES}
    missing = [s for s in ("edges", "features") if paths[s] is None]
    if missing:
        raise DatasetNotFoundError(
            f"{folder} is not a graph folder: it lacks {', '.join(m + '.csv (or .npy)' for m in missing)}"
        )
    rows = _resolve_headers({stem: _read_table(p, header) for stem, p in paths.items() if p is not None})
    x, edges = rows["features"], rows["edges"]
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
    data = Data(x=torch.from_numpy(x.astype(np.float32)), edge_index=torch.from_numpy(edges.T.astype(np.int64)))
    data.num_nodes = x.shape[0]
    if "labels" in rows:
        y = rows["labels"]
        if y.ndim == 2 and y.shape[1] > 1:
            raise GBPNError(f"{paths['labels']} must have one column (a class id per node), got {y.shape[1]}")
        y = y.reshape(-1)
        if not np.all(y == np.round(y)):
            raise GBPNError(f"{paths['labels']} must hold integer class ids (or -1 for unknown)")
        data.y = torch.from_numpy(y.astype(np.int64))
        known = y[y >= 0]
        data.num_classes = int(known.max()) + 1 if known.size else 0
    if (folder / "splits.npz").is_file():
        data.public_splits = _read_splits(folder / "splits.npz", x.shape[0])
        in_split = data.public_splits.any(0).any(0)
        unlabelled = in_split & (data.y < 0) if "labels" in rows else in_split
        if bool(unlabelled.any()):
            raise GBPNError(f"{folder / 'splits.npz'} puts {int(unlabelled.sum())} node(s) without a label in a split")
    names = folder / "class_names.txt"
    if names.is_file():
        try:
            text = names.read_text(encoding=_ENCODING)
        except UnicodeDecodeError as err:
            raise GBPNError(f"{names} is not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8") from None
        data.class_names = [s.strip() for s in text.splitlines() if s.strip()]
        top = int(getattr(data, "num_classes", 0))
        if top > len(data.class_names):
            raise GBPNError(f"{paths['labels']} has label {top - 1} but {names} names {len(data.class_names)} "
                            f"classes (0..{len(data.class_names) - 1}); fix the labels or add the missing names")
        data.num_classes = len(data.class_names)
    if "labels" in rows:
        empty = np.setdiff1d(np.arange(data.num_classes), known).tolist()
        if empty:
            top = int(known.max())
            why = (f"{names.name} names {data.num_classes} classes" if names.is_file() else
                   f"classes are counted up to the largest label ({top}, on {int((known == top).sum())} node(s); "
                   "a typo?)")
            log.warning("no node of %s has class %s: %s, and the model learns such a class from no example",
                        paths["labels"], ", ".join(map(str, empty)), why)
    return data


def dataset_name(dataset: str) -> str:
    """How runs and tables name a data set: a folder by its last component (``~`` and ``.`` expanded),
    a built-in name as it is."""
    path = Path(os.path.abspath(os.path.expanduser(dataset)))
    return path.name if path.is_dir() else dataset


def check_dataset_name(name: str) -> None:
    """Raise :class:`GBPNError` unless ``name`` is a data set of :func:`available_datasets` or an existing
    folder: the check :func:`load_dataset` makes first, without loading anything."""
    if ALIASES.get(name.lower(), name.lower()) in available_datasets() or Path(name).expanduser().is_dir():
        return
    if "/" in name or os.sep in name or name.startswith((".", "~")):
        raise GBPNError(f"no such folder: {name} (a bring-your-own data set is a folder with edges.csv and "
                        "features.csv)")
    raise GBPNError(f"unknown dataset {name!r}: choose one of {', '.join(available_datasets())}, "
                    "or give the path of a folder with edges.csv and features.csv")


def load_dataset(
    name: str,
    data_dir: Optional[str] = None,
    sample: int = 0,
    seed: int = 0,
    header: Optional[bool] = None,
) -> Data:
    """Load a dataset by name (see :func:`available_datasets`) or a bring-your-own folder path.

    Args:
        name: dataset name, or a folder in the :func:`load_byo` format.
        data_dir: where raw files live (default: ``$GBPN_DATA`` or ``~/.cache/gbpn/data``).
        sample: which label sample of a synthetic grid (0..9).
        seed: seed of the MRF sampler for generated ``synth-*`` grids (fixed per data set, not per trial).
        header: whether the CSV files of a bring-your-own folder start with a header (see :func:`load_byo`).
    """
    key = ALIASES.get(name.lower(), name.lower())
    root = data_root(data_dir)
    if sample != 0 and key not in REFERENCE_GRIDS and not key.startswith("synth-"):
        raise GBPNError(f"--sample {sample} picks a label sample of a synthetic grid (ising+, ising-, mrf+, mrf-, "
                        f"synth-*); {name} has one labelling: leave --sample out")
    files = {**dict.fromkeys(PLANETOID, _planetoid), **dict.fromkeys(COAUTHOR, _coauthor),
             **dict.fromkeys(WIKIPEDIA, _wikipedia), **dict.fromkeys(YANDEX, _yandex), **dict.fromkeys(OGB, _ogb),
             "elliptic": lambda _key, where: _elliptic(where)}
    built_in = (key in files or key in ("election", "sexual") or key in REFERENCE_GRIDS
                or (key.startswith("synth-") and key[6:] in SYNTHETIC_KINDS))
    if header is not None and built_in:
        raise GBPNError(f"--header / --no-header describe your own folder's CSV files; {name} is a built-in data "
                        "set: leave it out")
    if key in files:  # loaders that write a cache (raw copies, processed files): one process at a time
        with loading_lock(key):
            data = files[key](key, root)
    elif key == "election":
        data = _election(root)
    elif key == "sexual":
        data = _sexual(root)
    elif key in REFERENCE_GRIDS:
        data = _reference_grid(key, root, sample)
    elif key.startswith("synth-") and key[6:] in SYNTHETIC_KINDS:
        data = make_synthetic(key[6:], sample=sample, seed=seed)
    else:
        check_dataset_name(name)
        data = load_byo(Path(name).expanduser(), header)
        key = Path(name).name
    data.name = key
    if not hasattr(data, "class_names") or data.class_names is None:
        data.class_names = [str(k) for k in range(int(getattr(data, "num_classes", 0) or 0))]
    if getattr(data, "y", None) is None:
        data.y = torch.full((data.num_nodes,), -1, dtype=torch.long)
        data.num_classes = int(getattr(data, "num_classes", 0) or 0)
    validate_data(data)
    return clean_graph(data)
