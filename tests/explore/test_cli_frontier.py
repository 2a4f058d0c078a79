"""``composer-lab frontier``: bad input refused before any training, with the CLI's exit status."""

from __future__ import annotations

import pytest

from composer_lab.cli import main


def test_durations_that_do_not_grow_are_refused_before_training(tmp_path, capsys):
    status = main(["frontier", "--durations", "4ep,2ep", "--folder", str(tmp_path / "f")])
    assert status == 2
    assert "composer-lab: error: durations must grow" in capsys.readouterr().err
    assert not (tmp_path / "f" / "rows").exists() or not any((tmp_path / "f" / "rows").iterdir())


def test_the_factory_trains_for_the_duration_it_is_given():
    from composer_lab.cli.frontier import FrontierExperiment

    trainer = FrontierExperiment(batch_size=256)([], 0, "2ep")
    assert str(trainer.state.max_duration) == "2ep"
    assert trainer.state.schedulers[0].lr_lambdas[0](2 * len(trainer.state.dataloader)) == 0.0


def test_race_takes_its_level_and_names_the_runs_it_trained(tmp_path, capsys, monkeypatch):
    import composer_lab.explore as explore
    from composer_lab.cli.parser import build_parser

    assert build_parser().parse_args(["frontier", "--race"]).race == 0.05
    assert build_parser().parse_args(["frontier"]).race is None
    levels = []
    race = explore.Frontier.race
    monkeypatch.setattr(explore, "local_pool", lambda workers: explore.InlineExecutor())
    monkeypatch.setattr(explore.Frontier, "race", lambda self, alpha, **kw: levels.append(alpha) or race(self, alpha,
                                                                                                         **kw))
    status = main(["frontier", "--algorithms", "label_smoothing", "--durations", "1ba,2ba", "--seeds", "3", "--race",
                   "0.1", "--batch-size", "16", "--cost", "samples", "--folder", str(tmp_path / "f")])
    out = capsys.readouterr().out
    assert status == 0 and levels == [0.1]
    assert "the race trained 12 of the grid's 12 runs" in out and "(3 seeds, cost: samples)" in out
    assert (tmp_path / "f" / "speedups.csv").exists() and (tmp_path / "f" / "frontier.png").exists()


def test_a_race_level_outside_0_1_is_refused_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:  # (argparse, before any work)
        main(["frontier", "--race", "1.5", "--folder", str(tmp_path / "f")])
    assert refused.value.code == 2 and not (tmp_path / "f").exists()
    assert "argument --race: the race's level must lie in (0, 1), got '1.5'" in capsys.readouterr().err
