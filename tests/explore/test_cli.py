"""``composer-lab sweep``: bad input ends with a message in the command line's terms and status 2
before any work; a race trains and prints its decision; a failed run ends with one line that
says how to go on (the command's training on a Dask scheduler: test_dask.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from composer_lab.cli import DEFAULT_SWEEP_ALGORITHMS, main, parse_algorithms
from composer_lab.explore import Sweep, orderings
from composer_lab.explore.scheduler import SweepFailed
from composer_lab.explore.trials import Trial


@pytest.mark.parametrize("option", ["--seeds", "--workers", "--epochs", "--min-seeds"])
def test_a_count_below_one_is_refused_by_the_parser(tmp_path, capsys, option):
    with pytest.raises(SystemExit) as exit:
        main(["sweep", option, "0", "--folder", str(tmp_path / "s")])
    assert exit.value.code == 2 and not (tmp_path / "s").exists()
    assert f"composer-lab sweep: error: argument {option}: must be a whole number >= 1, got '0'" in \
        capsys.readouterr().err


@pytest.mark.parametrize("options, message", [
    (["--delta", "0"], "--delta must be a positive number, got 0: the smallest difference of the metric that "
                       "matters, in its units; e.g. --delta 0.005 (half a point of accuracy)"),
    (["--alpha", "1"], "--alpha must lie between 0 and 1, got 1: the error rate a verdict accepts; e.g. --alpha 0.05"),
    (["--min-seeds", "1"], "--min-seeds must be 2 or more, got 1: a paired test needs 2 seeds of every order"),
    (["--seeds", "2"], "--seeds 2 is fewer than --min-seeds 3, so the race could not reach a verdict; give more "
                       "seeds (a race trains only what it needs), e.g. --seeds 20"),
])
def test_impossible_race_settings_are_refused_before_any_work(tmp_path, capsys, options, message):
    assert main(["sweep", "--race", *options, "--folder", str(tmp_path / "s")]) == 2
    assert f"composer-lab: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_unknown_algorithms_are_named(capsys):
    assert main(["sweep", "--algorithms", "cutout,shuffle"]) == 2
    assert "composer-lab: error: unknown algorithm(s) shuffle; choose from" in capsys.readouterr().err


def test_the_default_algorithms_have_orders_to_compare():
    assert len(orderings(parse_algorithms(DEFAULT_SWEEP_ALGORITHMS))) >= 2


def test_a_race_prints_its_decision_and_writes_it(tmp_path, capsys):
    folder = tmp_path / "race"
    assert main(["sweep", "--race", "--seeds", "3", "--min-seeds", "2", "--data", "synthetic", "--epochs", "1",
                 "--workers", "1", "--delta", "0.5", "--folder", str(folder)]) == 0
    out = capsys.readouterr().out
    decision = pd.read_csv(folder / "decision.csv")
    assert set(decision["verdict"]) <= {"best", "equivalent", "worse", "undecided"} and len(decision) == 2
    assert "at most (race)" in out and out.rstrip().splitlines()[-1].startswith(
        ("the order of CutOut and MixUp changes accuracy by less than 50 points", "best:",
         "undecided"))
    assert (folder / "ranking.png").is_file() and (folder / "commutation.parquet").is_file()


def test_a_failed_run_ends_with_one_line_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    def fail(self, on_result=None, stop=None):
        trial = Trial("after_dataloader: MixUp > CutOut", (0, 1, 2), 1, "k", "")
        raise SweepFailed(trial, RuntimeError("a worker died\nand said more"), 3, 10, self.folder.path)

    monkeypatch.setattr(Sweep, "run", fail)
    assert main(["sweep", "--seeds", "5", "--epochs", "1", "--workers", "1", "--folder", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("composer-lab: error: the run of 'after_dataloader: MixUp > CutOut' with seed 1 failed "
                          "(RuntimeError: a worker died); 3 of 10 runs finished and are saved in ")
    assert err.rstrip().endswith(": run the same command again to finish (finished runs are kept)")


def test_a_warning_repeated_by_every_run_is_shown_once(monkeypatch, recwarn):
    import os
    import warnings

    from composer_lab.cli.sweep import _once_per_sweep_warnings

    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    with _once_per_sweep_warnings():
        assert os.environ["PYTHONWARNINGS"] == "once"  # what the worker processes started now read
        for run in range(3):
            warnings.warn("the same warning from every run", UserWarning)
            warnings.simplefilter("ignore", DeprecationWarning)  # (code that touches the filters, as runs do)
    assert shown == ["the same warning from every run"] and "PYTHONWARNINGS" not in os.environ
