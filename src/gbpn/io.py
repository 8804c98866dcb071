"""Files a run writes, all atomically: JSON and CSV records, predictions, figures, torch payloads; and the library versions a record carries."""
from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

import numpy as np
import torch

from gbpn._version import __version__
from gbpn.errors import GBPNError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cannot_write(path: Path, err: OSError, what: str = "output path") -> GBPNError:
    """The error for ``path`` that cannot be created: a read-only folder, a file where a folder should be, a
    symbolic link that loops or leads nowhere (``mkdir`` says "File exists" of both)."""
    file = next((p for p in path.parents if p.is_file()), None)
    link = _bad_link(path)
    why = (f"{file} is a file, not a folder" if file is not None else link if link is not None
           else err.strerror or err)
    return GBPNError(f"cannot write {path}: {why}; choose another {what}")


def check_writable(folder: str | Path, what: str = "--output folder") -> None:
    """:func:`cannot_write`'s error now, creating nothing, where ``folder`` (existing or not) could not be written:
    its nearest existing part is a file, a bad symbolic link, read-only or not ours. A command checks this before
    it says what it is about to do, so that a read-only folder is its first and only line."""
    folder = Path(folder)
    near = next(p for p in [folder, *folder.parents] if os.path.lexists(p))
    if not near.is_dir():
        err = OSError(errno.ENOTDIR, f"{near} is a file, not a folder")  # (a bad link: cannot_write says so)
    elif os.access(near, os.W_OK | os.X_OK):
        return
    else:
        read_only = bool(os.statvfs(near).f_flag & os.ST_RDONLY)
        code = errno.EROFS if read_only else errno.EACCES
        err = OSError(code, f"{near} is {'on a read-only file system' if read_only else 'not writable'}")
    raise cannot_write(folder, err, what)


def _bad_link(path: Path) -> Optional[str]:
    """What is wrong with the first symbolic link on ``path`` that leads to no folder, or None."""
    for p in [*reversed(path.parents), path]:
        if not p.is_symlink():
            continue
        try:
            p.stat()
        except OSError as err:
            if err.errno == errno.ELOOP:
                return f"{p} is a symbolic link that loops (it leads back to itself through {os.readlink(p)})"
            return f"{p} is a symbolic link to {os.readlink(p)}, which does not exist"
    return None


def atomic_write(path: str | Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Write through ``write(fileobj)`` into a temporary file beside ``path``, then rename.

    A crash leaves either the old file or the new one, never half of one.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # a read-only folder, a file where a folder should be, a full disk
        raise cannot_write(path, err) from None
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise GBPNError(f"cannot write {path}: {err.strerror or err}; choose another output path") from None
        raise


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (an undefined score, e.g. ROC AUC on one class) as ``None``:
    JSON has no NaN, and strict parsers (``jq``, browsers) reject Python's bare ``NaN``. NumPy arrays
    become lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, np.ndarray):  # a result's per-step or per-bin values
        return strict_json(obj.tolist())
    return obj


def is_score(value: Any) -> bool:
    """Whether a value read back from JSON is a score: a number, or null (undefined, see :func:`strict_json`)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def score_or_nan(value: Any) -> float:
    """A score read back from JSON as a float: null, missing (None) or not a number as NaN."""
    return float(value) if is_score(value) and value is not None else math.nan


def write_json(path: str | Path, obj: Any) -> None:
    """``obj`` as strict JSON (undefined numbers as ``null``), written atomically."""
    text = json.dumps(strict_json(obj), indent=2, sort_keys=False, default=str, allow_nan=False)
    atomic_write(path, lambda fh: fh.write(text))


# Cells a spreadsheet reads as a formula when they start with one of these (OWASP: CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Text that is a plain number ("-0.5", "+1e-05", "-inf") stays as it is: a spreadsheet reads it as a number.
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows and never runs: text starting with ``= + - @``, a tab or a
    carriage return (a formula to Excel, LibreOffice and Sheets) gets a leading quote mark, as the OWASP
    advice on CSV injection says; numbers, and text that is a plain number, are unchanged."""
    if isinstance(value, str) and value[:1] in _FORMULA_START and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A header and rows as CSV text, every cell through :func:`csv_cell` and quoted where it holds a comma,
    a quote or a line break. Every CSV the package writes for people goes through here."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_cell(h) for h in header])
    w.writerows([csv_cell(v) for v in row] for row in rows)
    return buf.getvalue()


def write_table(path: str | Path, header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> None:
    """A header and rows as CSV (see :func:`csv_text`), written atomically."""
    text = csv_text(header, rows)
    atomic_write(path, lambda fh: fh.write(text))


def write_csv(path: str | Path, rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None) -> None:
    """Rows of dicts as CSV (see :func:`csv_text`), written atomically: the ``columns`` given (default: the
    first row's keys); a row's other keys are left out and its missing ones left empty."""
    columns = list(columns if columns is not None else rows[0] if rows else [])
    if not columns:  # nothing to write: an empty file, not a blank header line
        atomic_write(path, lambda fh: fh.write(""))
        return
    write_table(path, columns, ([r.get(k, "") for k in columns] for r in rows))


def write_predictions(path: str | Path, probs: np.ndarray, class_names: Sequence[str], known: np.ndarray,
                      nodes: Optional[np.ndarray] = None, labels: Optional[np.ndarray] = None,
                      split: Optional[np.ndarray] = None) -> None:
    """Per-node class probabilities as CSV: ``node,prediction,label,split,known,p_<class>...`` (atomically);
    ``node`` is the row number, or ``nodes[row]`` when given (a part of a partitioned graph); ``label`` the
    true class (``labels``, -1 or none given: empty), ``split`` each row's ``train/val/test/unlabelled``
    (:func:`gbpn.data.splits.node_splits`; none given: empty)."""
    def quoted(name: str) -> str:  # one class name as a CSV cell (see csv_cell), once, not once per row
        return csv_text([name], []).rstrip("\n")

    pred = probs.argmax(1)
    header = ",".join(["node", "prediction", "label", "split", "known"] + [quoted(f"p_{n}") for n in class_names])
    # whole columns at once: a Python loop per row is minutes at millions of nodes
    ids = np.arange(len(pred)) if nodes is None else np.asarray(nodes)
    names = np.asarray([quoted(n) for n in class_names] + [""])  # label -1: the empty cell at the end
    labels = np.full(len(pred), -1) if labels is None else np.asarray(labels)
    split = np.full(len(pred), "") if split is None else np.asarray(split, dtype=str)  # plain words: no quoting
    cols = np.column_stack([ids.astype(str), names[pred], names[np.where(labels < 0, -1, labels)], split,
                            known.astype(int).astype(str), np.char.mod("%.6g", probs)])
    buf = io.StringIO()
    np.savetxt(buf, cols, fmt="%s", delimiter=",", header=header, comments="")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def install_hint(extra: str) -> str:
    """The command that installs gbpn's ``extra`` the way gbpn itself was installed: ``pip install -e
    '<folder>[extra]'`` for a clone installed in place (as the README does), else from PyPI."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlparse

    try:
        where = json.loads(distribution("gbpn").read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, ValueError):
        where = {}
    url = urlparse(where.get("url", ""))
    if url.scheme == "file" and (where.get("dir_info") or {}).get("editable"):
        folder = "." if os.path.realpath(unquote(url.path)) == os.path.realpath(os.getcwd()) else unquote(url.path)
        return f"pip install -e '{folder}[{extra}]'"
    return f"pip install 'gbpn[{extra}]'"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend, imported here, where a figure is drawn: matplotlib is
    the ``analysis`` extra's, and without it a :class:`GBPNError` says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise GBPNError(f"drawing figures needs matplotlib, which is not installed: {install_hint('analysis')}") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, stem: str | Path, formats: Sequence[str] = ("png", "svg")) -> None:
    """Save a matplotlib figure as ``stem.png`` and ``stem.svg`` (atomically) and close it."""
    plt = pyplot()
    for ext in formats:
        atomic_write(Path(f"{stem}.{ext}"), lambda fh: fig.savefig(fh, format=ext, dpi=120), mode="wb")
    plt.close(fig)


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; a :class:`GBPNError` naming the file when it is unreadable or not JSON."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GBPNError(f"{path} is unreadable or not valid JSON ({err}); delete it (finished results in its "
                        "folder are then run again) or choose another output folder") from None


def installed_version(package: str) -> str:
    """``package``'s installed version, read from its metadata without importing it (scikit-learn alone takes a
    second to import); ``"not installed"`` when it is not."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def versions() -> Dict[str, str]:
    """Versions of Python and the libraries a result depends on (from their installed metadata: a record
    imports nothing the run does not need)."""
    import scipy.linalg.cython_blas  # noqa: F401 (the fused kernels' BLAS, loaded to report its kernels)
    from threadpoolctl import ThreadpoolController

    return {
        "gbpn": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_geometric": installed_version("torch-geometric"),
        "numpy": installed_version("numpy"),
        "scipy": installed_version("scipy"),
        "scikit-learn": installed_version("scikit-learn"),
        "num_threads": str(torch.get_num_threads()),
        # the kernels OpenBLAS runs (its choice, or OPENBLAS_CORETYPE's) change speed and last bits
        "openblas": ", ".join(f"{getattr(lib, 'architecture', '?')} ({Path(lib.filepath).name})"
                              for lib in ThreadpoolController().lib_controllers if lib.internal_api == "openblas"),
    }


class _WriteErrors:
    """A file's ``write`` that keeps the ``OSError`` it raised: ``torch.save``'s zip writer reports it
    as a ``RuntimeError``."""

    def __init__(self, fh: Any):
        self.fh, self.error = fh, None

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str) -> Any:  # flush, seek, tell: the file's own
        return getattr(self.fh, name)


def save_torch(path: str | Path, obj: Any) -> None:
    """``torch.save(obj)`` written atomically, straight to the file (no copy in memory); a full disk
    is reported as the ``OSError`` it is."""
    def write(fh: Any) -> None:
        out = _WriteErrors(fh)
        try:
            torch.save(obj, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise

    atomic_write(path, write, mode="wb")


