import pytest

from gbpn.train.config import default_dropout


@pytest.mark.parametrize(
    "features,train,expected",
    [
        (1433, 812, 0.6),  # Cora under the 30/20/50 split
        (3703, 998, 0.6),  # CiteSeer
        (6805, 5500, 0.3),  # CS
        (8415, 10348, 0.3),  # Physics
        (500, 5915, 0.3),  # PubMed
        (166, 13969, 0.1),  # Elliptic
        (9, 932, 0.1),  # Election
        (2, 780, 0.1),  # the grids
        (128, 90941, 0.1),  # ogbn-arxiv
    ],
)
def test_dropout_follows_the_papers_rule_not_the_data_set_name(features, train, expected):
    assert default_dropout(features, train) == expected
