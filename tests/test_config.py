"""The training config in parts: flat names of older versions, config.json read back, flags generated."""
import dataclasses

import pytest

from gbpn.errors import GBPNError
from gbpn.train.config import OPTIONS, TrainConfig

# config.json's "train" as 2cbaa7b wrote it: every option at the top level
FLAT_2CBAA7B = {
    "variant": "gbpn-i", "num_steps": 3, "hidden": 32, "num_hidden": 1, "dropout": 0.3, "epochs": 40, "patience": 5,
    "lr": 0.003, "weight_decay": 0.0001, "degree_weight": False, "warmup": 0.1, "damping": 0.2, "backward": "implicit",
    "tol": 0.001, "max_steps": 50, "learn_coupling": True, "coupling_lr": None, "coupling_init": "empirical",
    "precision": "fp32", "batch_size": 64, "fanout": 4, "num_hops": 2, "sampler": "exp3", "exp3_gamma": 0.1,
    "edge_chunk": 1000, "class_weight": True, "train_frac": 0.4, "val_frac": 0.1, "device": "cpu",
    "potential": "sign", "potential_hops": 3, "potential_layers": 1, "residual": True, "layer_norm": True,
    "separate": False, "metric": "macro_f1",
}


def test_an_old_flat_config_maps_to_the_parts():
    config = TrainConfig.from_dict(FLAT_2CBAA7B)
    assert set(FLAT_2CBAA7B) <= set(OPTIONS)  # every option of then has a place now
    added = set(OPTIONS) - set(FLAT_2CBAA7B)  # options added since (--motifs, --budget, ...) take their defaults
    assert config.flat_dict() == {**{name: OPTIONS[name].field.default for name in added}, **FLAT_2CBAA7B}
    assert (config.model.num_steps, config.optim.epochs, config.sampling.num_hops, config.evaluation.metric) == (3, 40, 2,
                                                                                                              "macro_f1")
    assert (config.encoder.potential, config.encoder.separate, config.encoder.sign.hops) == ("sign", False, 3)
    assert (config.encoder.gnn.num_layers, config.encoder.gnn.residual, config.encoder.gnn.layer_norm) == (1, True, True)
    nested = config.to_dict()
    assert set(nested) == {"model", "encoder", "optim", "sampling", "evaluation", "device"}
    assert nested["encoder"] == {"potential": "sign", "separate": False, "sign": {"hops": 3},
                                 "gnn": {"num_layers": 1, "residual": True, "layer_norm": True, "batch_norm": False},
                                 "block": {"blocks": 2}}
    assert TrainConfig.from_dict(nested) == config
    assert config.potential_options() == {"hops": 3, "separate": False}


def test_config_json_values_are_checked_by_path():
    with pytest.raises(GBPNError, match=r"does not know: encoder\.sign\.bar, model\.foo"):
        TrainConfig.from_dict({"model": {"foo": 1}, "encoder": {"sign": {"bar": 2}}})
    with pytest.raises(GBPNError, match=r"hidden \(--hidden\) must be int, got '5'"):
        TrainConfig.from_dict({"model": {"hidden": "5"}})
    with pytest.raises(GBPNError, match=r"potential_hops \(--potential-hops\) must be int"):
        TrainConfig.from_dict({"encoder": {"sign": {"hops": 2.5}}})
    # a part without every option (a newer option unknown to the writer) takes the defaults
    assert TrainConfig.from_dict({"optim": {"epochs": 7}}) == TrainConfig(epochs=7)


def test_flat_names_construct_replace_and_read_the_parts():
    config = TrainConfig(epochs=3, potential="sign", potential_hops=4)
    assert config.optim.epochs == config.epochs == 3 and config.encoder.sign.hops == 4
    other = dataclasses.replace(config, lr=0.5, separate=False)
    assert (other.lr, other.separate, other.potential_hops) == (0.5, False, 4)
    assert (config.lr, config.separate) == (1e-3, True)  # the original's parts are not shared
    config.num_hops = 2
    assert config.sampling.num_hops == 2
    with pytest.raises(TypeError, match="unknown options: nope"):
        TrainConfig(nope=1)


def test_train_flags_are_generated_from_the_fields():
    from gbpn.cli import build_parser
    from gbpn.cli.options import command_parser

    train = command_parser(build_parser(), ("train",))
    actions = {a.dest: a for a in train._actions if a.option_strings}
    flagged = {name for name, o in OPTIONS.items() if o.field.metadata.get("cli", True)}
    assert flagged == set(OPTIONS) - {"learn_coupling", "coupling_init", "train_frac", "val_frac",
                                      "search_space"}
    for name in flagged:
        assert actions[name].help.replace("%%", "%") == OPTIONS[name].field.metadata["help"]
        assert actions[name].default == OPTIONS[name].field.default
    assert actions["num_steps"].option_strings == ["--steps", "-K"]
    assert actions["degree_weight"].option_strings == ["--no-degree-weight"]
    assert actions["potential_layers"].option_strings == ["--potential-layers"]
    args = build_parser().parse_args(["train", "--no-separate", "--potential", "gcn", "--potential-layers", "3", "-K", "2"])
    config = TrainConfig(**{name: getattr(args, name) for name in OPTIONS if name in args})
    assert config.potential_options() == {"num_layers": 3, "residual": False, "layer_norm": False, "batch_norm": False,
                                          "separate": False}
    assert config.num_steps == 2


def test_options_of_an_encoder_that_does_not_read_them_are_refused():
    from gbpn.cli.train import check_applicable

    with pytest.raises(GBPNError, match=r"--potential-layers: only for --potential gcn, sage, gat, classic-gcn, classic-sage or classic-gat"):
        check_applicable(TrainConfig(potential="sign"), {"potential_layers": "--potential-layers"})
    with pytest.raises(GBPNError, match=r"--potential-hops: only for --potential sign"):
        check_applicable(TrainConfig(), {"potential_hops": "--potential-hops"})
    check_applicable(TrainConfig(potential="auto"), {"potential_hops": "--potential-hops", "residual": "--residual"})
