"""table.md reports each data set by the metric its runs selected on."""
from gbpn.experiments.tables import grid_table


def _row(dataset, model, trial, acc, auc=None, metric="accuracy"):
    row = {"dataset": dataset, "model": model, "trial": trial, "test_accuracy": acc, "metric": metric}
    if auc is not None:
        row["test_roc_auc"] = auc
    return row


def test_the_table_shows_the_selection_metric_of_each_data_set():
    rows = [_row("a", "gbpn", t, 0.80 + t / 100) for t in (0, 1)] + [_row("a", "mlp", t, 0.70) for t in (0, 1)]
    rows += [_row("b", "gbpn", t, 0.95, auc=0.60 + t / 100, metric="roc_auc") for t in (0, 1)]
    rows += [_row("b", "mlp", t, 0.90, auc=0.75, metric="roc_auc") for t in (0, 1)]
    lines = grid_table(rows, ["gbpn", "mlp"], ["a", "b"], 2).splitlines()
    assert lines[2] == "| a | **80.5 ± 0.7** | 70.0 ± 0.0 |"
    # selected on ROC AUC: the ROC AUC, where accuracy (95 against 90) would crown the other model
    assert lines[3] == "| b (ROC AUC) | 60.5 ± 0.7 | **75.0 ± 0.0** |"
