"""Each encoder's special cases come from its registry entry (issue 63): the node count it takes, the precisions it
implements, whether a node's potential reads that node's features alone."""
import pytest

from gbpn.errors import GBPNError
from gbpn.models.encoders.registry import ENCODERS, check_precision, graph_options, reads_own_features
from gbpn.train.config import TrainConfig


def test_only_linkx_takes_the_graphs_node_count():
    assert graph_options("linkx", 7) == {"num_nodes": 7}
    assert all(graph_options(p, 7) == {} for p in ENCODERS if p != "linkx") and graph_options("auto", 7) == {}
    with pytest.raises(GBPNError, match="the linkx potential needs the graph's number of nodes"):
        graph_options("linkx", None)


def test_model_args_ask_the_registry_for_the_node_count():
    from gbpn.train.fit import model_args

    assert model_args(3, 2, TrainConfig(potential="linkx"), 0.1, num_nodes=11)["potential_options"] == {"num_nodes": 11}
    assert "num_nodes" not in model_args(3, 2, TrainConfig(potential="sign"), 0.1, num_nodes=11)["potential_options"]


def test_bf16_is_the_mlps_alone():
    check_precision("mlp", "bf16")
    for potential in ("sign", "linkx", "auto"):
        with pytest.raises(GBPNError, match="--precision bf16 is implemented for the mlp potential only"):
            check_precision(potential, "bf16")
    with pytest.raises(GBPNError, match="--precision bf16 is implemented for the mlp potential only"):
        TrainConfig(potential="sign", precision="bf16").validate()


def test_only_the_mlp_reads_its_own_features_alone():
    assert [p for p in ENCODERS if reads_own_features(p)] == ["mlp"] and not reads_own_features("auto")
