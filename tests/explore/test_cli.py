"""``composer-lab sweep``: bad input ends with the message and status 2 (the command's training is
tested on a Dask scheduler in test_dask.py)."""

from __future__ import annotations

from composer_lab.cli import main


def test_no_seeds_is_an_error_with_status_2(tmp_path, capsys):
    assert main(["sweep", "--algorithms", "label_smoothing", "--seeds", "0", "--epochs", "1",
                 "--folder", str(tmp_path / "s")]) == 2
    assert "composer-lab: error: no seeds: a sweep trains every order once per seed" in capsys.readouterr().err


def test_unknown_algorithms_are_named(capsys):
    assert main(["sweep", "--algorithms", "cutout,shuffle"]) == 2
    assert "composer-lab: error: unknown algorithm(s) shuffle; choose from" in capsys.readouterr().err
