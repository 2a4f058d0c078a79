"""``composer-lab frontier``: bad input refused before any training, with the CLI's exit status."""

from __future__ import annotations

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
