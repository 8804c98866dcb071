"""Per-class scores on the test split: the confusion matrix and each class's precision, recall and F1
(scikit-learn), for ``gbpn predict --report`` and the confusion figure of ``gbpn plot``.

Only test nodes that were not evidence count: a node clamped to its label (``--known labeled``) reads it back.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from gbpn.errors import GBPNError
from gbpn.io import pyplot, save_figure


def score_report(predicted: np.ndarray, labels: np.ndarray, split: np.ndarray, known: np.ndarray,
                class_names: Sequence[str]) -> Dict:
    """The scores of ``predicted`` (class ids ``[N]``) against ``labels`` (``-1``: none) on the nodes whose
    ``split`` is ``"test"`` and that are not ``known`` (clamped as evidence).

    Returns ``classes``, ``nodes`` (how many were scored), ``clamped`` (test nodes left out as evidence),
    ``accuracy``, ``macro_f1``, ``confusion`` (``[c, c]`` counts, rows the true class, columns the predicted)
    and per class ``precision``, ``recall``, ``f1`` and ``support`` (true nodes of the class); a class never
    predicted has precision 0, as scikit-learn's ``zero_division=0`` gives."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels, predicted = np.asarray(labels), np.asarray(predicted)
    test = (np.asarray(split) == "test") & (labels >= 0)
    clamped = int((test & np.asarray(known, dtype=bool)).sum())
    test &= ~np.asarray(known, dtype=bool)
    if not test.any():
        raise GBPNError("no labelled test node to score" + (f" ({clamped} are clamped as evidence: use --known "
                                                            "train or none)" if clamped else
                                                            " (a graph without the checkpoint's split has none)"))
    c = len(class_names)
    y, p = labels[test], predicted[test]
    precision, recall, f1, support = precision_recall_fscore_support(y, p, labels=list(range(c)), zero_division=0)
    return {"classes": list(class_names), "nodes": int(test.sum()), "clamped": clamped,
            "accuracy": float((y == p).mean()), "macro_f1": float(f1.mean()),
            "confusion": confusion_matrix(y, p, labels=list(range(c))).tolist(),
            "precision": precision.tolist(), "recall": recall.tolist(), "f1": f1.tolist(), "support": support.tolist()}


def format_report(report: Dict) -> str:
    """The report as text: a line of totals, a row per class, and the confusion matrix (rows: true class,
    columns: predicted, by the class numbers of the rows)."""
    names = report["classes"]
    width = max(len("class"), *(len(n) for n in names)) + 4
    lines = [f"test split, {report['nodes']} nodes: accuracy {100 * report['accuracy']:.2f}%, macro F1 "
             f"{100 * report['macro_f1']:.2f}%" + (f" ({report['clamped']} clamped test nodes left out)"
                                                  if report["clamped"] else ""),
             f"{'class':<{width}} precision  recall      F1  support"]
    for k, n in enumerate(names):
        lines.append(f"{f'{k} {n}':<{width}} {100 * report['precision'][k]:9.1f} {100 * report['recall'][k]:7.1f} "
                     f"{100 * report['f1'][k]:7.1f} {report['support'][k]:8d}")
    cell = max(4, *(len(str(v)) + 1 for row in report["confusion"] for v in row))
    lines.append("confusion matrix (rows: true class, columns: predicted):")
    lines.append(" " * width + "".join(f"{k:>{cell}}" for k in range(len(names))))
    for k, row in enumerate(report["confusion"]):
        lines.append(f"{f'{k} {names[k]}':<{width}}" + "".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines)


def read_predictions(path: str | Path) -> Dict[str, np.ndarray]:
    """A ``predictions.csv`` of ``gbpn predict`` as arrays: ``probs`` (the ``p_*`` columns, ``[N, c]``), ``predicted``
    (their argmax), ``labels`` (-1 where empty), ``split``, ``known`` and ``classes`` (from the ``p_*`` column names)."""
    try:
        with open(path, newline="") as fh:
            rows = csv.reader(fh)
            header = next(rows)
            body = list(rows)
        cols = {name: i for i, name in enumerate(header)}
        probs = [i for i, name in enumerate(header) if name.startswith("p_")]
        classes = [header[i][2:] for i in probs]
        index = {n: k for k, n in enumerate(classes)}
        index.update({"'" + n: k for k, n in enumerate(classes)})  # a name the CSV writer kept from being a formula
        index[""] = -1
        p = np.asarray([[float(r[i]) for i in probs] for r in body], dtype=float).reshape(len(body), len(probs))
        return {"probs": p, "predicted": p.argmax(1) if body else np.zeros(0, dtype=int),
                "labels": np.asarray([index[r[cols["label"]]] for r in body], dtype=int),
                "split": np.asarray([r[cols["split"]] for r in body], dtype=str),
                "known": np.asarray([r[cols["known"]] == "1" for r in body], dtype=bool), "classes": classes}
    except (OSError, StopIteration, KeyError, ValueError, IndexError) as err:
        raise GBPNError(f"{path} is not a predictions.csv of gbpn predict with label and split columns "
                        f"({type(err).__name__}: {err}); run gbpn predict --checkpoint RUN/model.pt again") from None


def plot_confusion(report: Dict, stem: str | Path) -> None:
    """The confusion matrix as a figure, ``stem.png`` and ``.svg``: counts in the cells, coloured by the share of
    the true class's nodes (each row sums to 1), so that small classes read as large ones."""
    plt = pyplot()
    counts = np.asarray(report["confusion"])
    share = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    c = len(report["classes"])
    fig, ax = plt.subplots(figsize=(2.5 + 0.7 * c, 2 + 0.6 * c))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    for i in range(c):
        for j in range(c):
            ax.text(j, i, str(counts[i, j]), ha="center", va="center", fontsize=8,
                    color="white" if share[i, j] > 0.5 else "black")
    ax.set_xticks(range(c), report["classes"], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(c), report["classes"], fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"test split, {report['nodes']} nodes: accuracy {100 * report['accuracy']:.1f}%", fontsize=9)
    fig.colorbar(im, ax=ax, label="share of the true class")
    fig.tight_layout()
    save_figure(fig, stem)
