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
import logging
import os
import shutil
import stat
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch
from filelock import FileLock
from torch_geometric.data import Data

from gbpn.data.byo import load_byo
from gbpn.data.graph import clean_graph, validate_data
from gbpn.data.mrf import make_synthetic
from gbpn.data.names import (  # noqa: F401  (the names, where callers have always imported them)
    ALIASES,
    COAUTHOR,
    OGB,
    PLANETOID,
    PLANETOID_CLASSES,
    REFERENCE_GRIDS,
    SYNTHETIC_KINDS,
    TRIANGLE_MRF,
    WIKIPEDIA,
    YANDEX,
    available_datasets,
    check_dataset_name,
    dataset_name,
)
from gbpn.data.reference import load_election, load_elliptic, load_reference_grid, load_sexual, require_files
from gbpn.data.triangle_mrf import make_triangle_mrf
from gbpn.errors import DatasetNotFoundError, GBPNError

TRIANGLE_MRF_SETTINGS = {"rows": 32, "cols": 32, "num_classes": 2, "pair_strength": 0.0, "triangle_strength": 0.5,
                         "field_strength": 0.5}
log = logging.getLogger(__name__)


def data_root(data_dir: Optional[str] = None) -> Path:
    """The data directory: the argument, else ``$GBPN_DATA``, else ``~/.cache/gbpn/data``."""
    return Path(data_dir or os.environ.get("GBPN_DATA") or Path.home() / ".cache" / "gbpn" / "data").expanduser()


def cache_root() -> Path:
    return Path(os.environ.get("GBPN_CACHE") or Path.home() / ".cache" / "gbpn").expanduser()


@contextlib.contextmanager
def loading_lock(key: str) -> Iterator[None]:
    """Hold the data set ``key``'s lock file (in the cache folder, through ``filelock``) while preparing
    it: several runs started together (a grid's workers, ``torchrun`` ranks) would otherwise copy the
    same raw files and let PyG / OGB write the same processed files at once. Unlocked where the cache
    folder cannot be written."""
    lock = None
    try:
        folder = cache_root() / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(folder / f"{key}.lock")
        lock.acquire()
    except OSError:
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


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


# a "Downloading ..." line waits this long (or for the next line, or the end of the load) before it is said: a download
# that fails at once (offline, a data set --skip-missing then skips) says nothing of a download that never happened
DOWNLOAD_NOTICE_S = 2.0


class _LinesToLog(io.TextIOBase):
    """A text stream whose complete lines become log messages: a download at INFO (it takes a while),
    the rest (PyG's "Processing...", "Done!") at DEBUG, shown with ``-v``. A "Downloading" line is held
    until the next line, :data:`DOWNLOAD_NOTICE_S` or the end of the load (:meth:`release`), and dropped
    if the load fails first (:meth:`drop`): the error says that the download failed."""

    def __init__(self) -> None:
        import threading

        self._pending = ""
        self._held: Optional[str] = None
        self._timer = None
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        import threading

        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            msg = line.strip().split("\r")[-1]
            if not msg:
                continue
            self.release()
            if msg.startswith("Downloading"):
                with self._lock:
                    self._held = msg
                    self._timer = threading.Timer(DOWNLOAD_NOTICE_S, self.release)
                    self._timer.daemon = True
                    self._timer.start()
            else:
                log.log(logging.INFO if msg.startswith("Extracting") else logging.DEBUG, msg)
        return len(text)

    def release(self) -> None:
        """Say the held "Downloading" line, if any."""
        with self._lock:
            held, self._held = self._held, None
            if self._timer is not None:
                self._timer.cancel()
        if held:
            log.info(held)

    def drop(self) -> None:
        """Forget the held "Downloading" line: the load failed before the download got anywhere."""
        with self._lock:
            self._held = None
            if self._timer is not None:
                self._timer.cancel()


@contextlib.contextmanager
def _library_output_to_log() -> Iterator[None]:
    """What PyG and OGB print while they download and process ("Processing...", "Done!") goes through
    logging like the rest of gbpn's messages, not straight to the terminal or into stdout's results."""
    sink, failed = _LinesToLog(), True
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
        failed = False
    finally:
        sink.write("\n")  # an unfinished last line
        sink.drop() if failed else sink.release()  # a download that failed at once is not announced


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
    data = _pyg(lambda r: Planetoid(r, name), root, f"planetoid/{name}", key, files)
    if key in PLANETOID_CLASSES and int(data.num_classes) == len(PLANETOID_CLASSES[key]):
        data.class_names = list(PLANETOID_CLASSES[key])
    return data


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
    require_files(folder, [fname], key)
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
             "elliptic": lambda _key, where: load_elliptic(where)}
    built_in = (key in files or key in ("election", "sexual") or key in REFERENCE_GRIDS
                or (key.startswith("synth-") and key[6:] in SYNTHETIC_KINDS) or key == TRIANGLE_MRF)
    if header is not None and built_in:
        raise GBPNError(f"--header / --no-header describe your own folder's CSV files; {name} is a built-in data "
                        "set: leave it out")
    if key in files:  # loaders that write a cache (raw copies, processed files): one process at a time
        with loading_lock(key):
            data = files[key](key, root)
    elif key == "election":
        data = load_election(root)
    elif key == "sexual":
        data = load_sexual(root)
    elif key in REFERENCE_GRIDS:
        data = load_reference_grid(key, root, sample)
    elif key.startswith("synth-") and key[6:] in SYNTHETIC_KINDS:
        data = make_synthetic(key[6:], sample=sample, seed=seed)
    elif key == TRIANGLE_MRF:
        data = make_triangle_mrf(**TRIANGLE_MRF_SETTINGS, sample=sample, seed=seed)
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
