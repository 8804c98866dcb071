"""The raw files of the paper's own data sets under ``<data-dir>``: Elliptic (Kaggle's CSV layout), the
election and sexual-interaction graphs and the reference grids (``ising+``, ``ising-``, ``mrf+``, ``mrf-``)
of the GBPN files, read with numpy into :class:`torch_geometric.data.Data` (cleaned by
:func:`gbpn.data.datasets.load_dataset`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from gbpn.errors import DatasetNotFoundError, GBPNError

ELLIPTIC_FILES = ("elliptic_txs_features.csv", "elliptic_txs_classes.csv", "elliptic_txs_edgelist.csv")


def load_elliptic(root: Path) -> Data:
    """Elliptic bitcoin transactions in the public Kaggle CSV layout (under ``<data-dir>/elliptic/``
    or ``<data-dir>/elliptic_bitcoin_dataset/``): features (txId, time step, 165 more columns, no
    header), classes (txId,class with 1 = illicit, 2 = licit, unknown) and the edge list
    (txId1,txId2). Label 1 = illicit, 0 = licit, -1 = unknown (never trained on or scored)."""
    folder = next((root / d for d in ("elliptic", "elliptic_bitcoin_dataset") if (root / d).is_dir()), root / "elliptic")
    require_files(folder, ELLIPTIC_FILES, "elliptic")
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


def require_files(folder: Path, files: Sequence[str], name: str) -> None:
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


def load_election(root: Path) -> Data:
    folder = root / "gbpn" / "county_facebook"
    require_files(folder, ["adj.csv", "dat.csv"], "election")
    dat = _finite(_loadtxt(folder / "dat.csv", delimiter=",", skiprows=1, ndmin=2), folder / "dat.csv", 1)
    edges = _loadtxt(folder / "adj.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    x = dat[:, :9]
    x = (x - x.mean(0)) / x.std(0)
    y = (dat[:, 9] > dat[:, 10]).astype(np.int64)  # 1 = DEM won the county
    data = Data(x=torch.tensor(x, dtype=torch.float32), y=torch.from_numpy(y), edge_index=torch.from_numpy(edges.T))
    data.num_classes = 2
    data.class_names = ["GOP", "DEM"]
    return data


def load_sexual(root: Path) -> Data:
    folder = root / "gbpn" / "sexual_interaction"
    require_files(folder, ["adj.csv", "dat.csv"], "sexual")
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


def load_reference_grid(kind: str, root: Path, sample: int) -> Data:
    folder = root / "gbpn" / kind
    require_files(folder, ["adj", "coord", "label"], kind)
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
