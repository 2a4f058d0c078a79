"""The command line as a user meets it: a taken run name refused before any work, every message
in the command line's terms (flags, not Python arguments), help that says each default once."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.cli import SweepExperiment, build_parser, main
from composer_lab.cli.parser import DESCRIPTION
from composer_lab.cli.sweep import result_line
from composer_lab.cli.terms import in_cli_terms
from composer_lab.explore import InlineExecutor, Sweep

RUN = ["run", "--epochs", "1", "--model", "mlp", "--no-progress", "--no-plots", "--algorithms", "none"]
SWEEP = ["sweep", "--data", "synthetic", "--model", "mlp", "--algorithms", "cutout,mixup", "--seeds", "1",
         "--workers", "1"]


class NoWork:
    """Stands for the data loaders and the Trainer: records that work began, then stops it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        raise ValueError("work began")


@pytest.fixture
def no_work(monkeypatch) -> NoWork:
    from composer_lab.data import DATASETS

    stand_in = NoWork()
    for name in list(DATASETS):
        monkeypatch.setitem(DATASETS, name, stand_in)
    monkeypatch.setattr("composer_lab.trainer.Trainer", stand_in)
    return stand_in


def test_a_taken_run_name_is_refused_before_any_data_is_loaded(tmp_path, capsys, no_work):
    taken = tmp_path / "co-ls"
    taken.mkdir()
    (taken / "config.json").write_text(json.dumps({"format": "composer_lab.run/1", "name": "co-ls"}))
    assert main([*RUN, "--runs-dir", str(tmp_path), "--name", "co-ls"]) == 2
    err = capsys.readouterr().err
    assert err == (f"composer-lab: error: the run folder {taken} already holds a run; give this run another --name, "
                   f"or pass --overwrite to replace the folder's run\n")
    assert no_work.calls == 0, "refused before the data was loaded or a trainer built"
    assert json.loads((taken / "config.json").read_text())["name"] == "co-ls"


def test_a_file_or_other_files_under_the_name_are_refused_and_an_empty_folder_or_overwrite_goes_on(
        tmp_path, capsys, no_work):
    (tmp_path / "a-file").write_text("mine")
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    assert main([*RUN, "--runs-dir", str(tmp_path), "--name", "a-file"]) == 2
    assert "it is a file; give the run another --name (or another --runs-dir)" in capsys.readouterr().err
    assert main([*RUN, "--runs-dir", str(tmp_path), "--name", "others"]) == 2
    assert "already holds other files; give this run another --name, or pass --overwrite" in capsys.readouterr().err
    assert no_work.calls == 0
    assert main([*RUN, "--runs-dir", str(tmp_path), "--name", "empty"]) == 2
    assert main([*RUN, "--runs-dir", str(tmp_path), "--name", "others", "--overwrite"]) == 2
    assert no_work.calls == 2 and capsys.readouterr().err.count("work began") == 2, "these went on to the work"


def test_a_stale_sweep_folder_names_the_flags_and_restart_starts_over(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "sweep"
    Sweep(SweepExperiment("synthetic", "mlp", epochs=3), [CutOut(), MixUp()], folder=folder,
          executor=InlineExecutor())
    assert main([*SWEEP, "--epochs", "1", "--folder", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "holds results of another experiment: --epochs: 3 -> 1." in err
    assert "choose a new folder, or pass --restart to delete its runs and start over" in err
    assert "resume=False" not in err and "SweepExperiment" not in err
    assert main([*SWEEP, "--epochs", "3", "--metric", "loss/eval", "--folder", str(folder)]) == 2
    assert "another experiment: --metric: 'metrics/eval/Accuracy' -> 'loss/eval'." in capsys.readouterr().err

    trained = []

    def interrupted(self, on_result=None, stop=None):  # the training, stopped as soon as it begins
        trained.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Sweep, "run", interrupted)
    assert main([*SWEEP, "--epochs", "1", "--folder", str(folder), "--restart"]) == 130
    assert len(trained) == 1, "started over: the sweep went on to train"
    assert main([*SWEEP, "--epochs", "1", "--folder", str(folder)]) == 130
    assert len(trained) == 2 and "another experiment" not in capsys.readouterr().err, "the folder is now --epochs 1's"


def test_python_arguments_in_library_messages_become_flags():
    assert in_cli_terms("give this run another name (Trainer(run_name=...)), or pass overwrite=True to replace it") \
        == "give this run another name (--name), or pass --overwrite to replace it"


def test_each_result_of_a_sweep_is_printed_to_four_decimals(tmp_path, capsys, monkeypatch):
    def one_result(self, on_result=None, stop=None):
        on_result({"order": "after_dataloader: CutOut > MixUp", "seed": 0, "metrics/eval/Accuracy": 0.1 + 0.2})
        raise KeyboardInterrupt

    monkeypatch.setattr(Sweep, "run", one_result)
    assert main([*SWEEP, "--epochs", "1", "--folder", str(tmp_path / "s")]) == 130
    assert "  after_dataloader: CutOut > MixUp  seed 0: 0.3000\n" in capsys.readouterr().out
    assert result_line({"order": "o", "seed": 1}, "metrics/eval/Accuracy") == "  o  seed 1: n/a"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", ["run", "sweep", "lab", "check-notebooks"])
def test_every_option_has_help_and_says_its_default_once(command):
    parser = _subcommands()[command]
    text = parser.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    for action in parser._actions:
        shown = parser._get_formatter()._expand_help(action) if action.help else ""
        assert shown.strip(), f"{command} {action.option_strings or action.dest}: no help text"
        assert not ("(default:" in shown and "default " in shown.replace("(default:", "")), \
            f"{command} {action.option_strings}: the default said twice: {shown!r}"
    seeds = _subcommands()["sweep"].format_help()
    assert re.search(r"default\s+20\)\n", seeds), "--seeds says its defaults in its own words, and only there"


def test_the_description_is_whole_and_names_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(DESCRIPTION.split()) in out and DESCRIPTION.endswith(".")
    assert all(f"`{name}`" in DESCRIPTION for name in _subcommands())


def test_a_misspelt_algorithm_gets_a_guess_from_the_command_line(capsys):
    assert main(["run", "--algorithms", "cutout,label_smothing"]) == 2
    assert "unknown algorithm(s) label_smothing (did you mean label_smoothing?); choose from" in \
        capsys.readouterr().err
