"""What the command line says: help that points to the docs that hold the facts, summary lines that say what a
spread covers and what was kept."""
import argparse

from gbpn.cli import build_parser, main


def _helps(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _helps(sub)
        elif action.help:
            yield action.option_strings, action.help


def test_help_texts_point_to_docs_usage_not_the_readme():
    helps = list(_helps(build_parser()))
    assert not [flags for flags, text in helps if "README" in text]
    assert any("--threads" in flags and "docs/usage.md" in text for flags, text in helps)
    assert any("--quick" in flags and "docs/usage.md" in text for flags, text in helps)


def test_the_summary_says_what_the_spread_covers_and_which_encoders_were_kept(monkeypatch, capsys):
    from gbpn import api

    trials = [{"trial": k, "potential": p, "test_accuracy": 0.7193} for k, p in enumerate(["sage", "gcn", "sage"])]
    summary = {"num_trials": 3, "test_accuracy_mean": 0.7193, "test_accuracy_std": 0.0}
    monkeypatch.setattr(api, "train", lambda *a, **k: ({"trials": trials, "summary": summary}, "runs/x"))
    assert main(["train", "--potential", "auto", "--epochs", "2", "--trials", "3", "-q"]) == 0
    line = capsys.readouterr().out.strip()
    assert "test accuracy 71.93 ± 0.00 (mean ± std over 3 trials); kept sage in 2 trials, gcn in 1 trial;" in line


def test_a_budgeted_summary_names_the_configuration_each_trial_kept(monkeypatch, capsys):
    from gbpn import api

    kept = [{"potential": "sage", "hidden": 256, "lr": 0.01, "separate": False},
            {"potential": "res-sage", "potential_blocks": 3, "hidden": 512, "dropout": 0.2},
            {"potential": "sage", "hidden": 256, "lr": 0.01, "separate": False}]
    trials = [{"trial": k, "potential": p["potential"], "test_accuracy": 0.7, "auto_search": {"chosen": {"params": p}}}
              for k, p in enumerate(kept)]
    summary = {"num_trials": 3, "test_accuracy_mean": 0.7, "test_accuracy_std": 0.0}
    monkeypatch.setattr(api, "train", lambda *a, **k: ({"trials": trials, "summary": summary}, "runs/x"))
    assert main(["train", "--potential", "auto", "--budget", "2", "--epochs", "2", "--trials", "3", "-q"]) == 0
    line = capsys.readouterr().out.strip()
    assert ("(mean ± std over 3 trials); kept sage --hidden 256 --lr 0.01 --no-separate in trials 0, 2, "
            "res-sage --potential-blocks 3 --hidden 512 --dropout 0.2 in trial 1;") in line
