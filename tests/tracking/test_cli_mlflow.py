"""``composer-lab sweep --mlflow URI``: the sweep logged to MLflow; a store that cannot be reached
ends with its message and status 2 before any training."""

from __future__ import annotations

import pytest

from composer_lab.cli import main
from tests.tracking.test_mlflow_logger import read_back


def test_an_unreachable_store_is_refused_before_training(tmp_path, capsys):
    assert main(["sweep", "--mlflow", "http://127.0.0.1:9", "--folder", str(tmp_path / "s")]) == 2
    assert "'http://127.0.0.1:9' cannot be reached" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_the_sweep_is_logged_to_mlflow(tmp_path, uri, capsys):
    assert main(["sweep", "--algorithms", "cutout,mixup", "--seeds", "1", "--epochs", "1", "--data", "synthetic",
                 "--model", "mlp", "--workers", "1", "--folder", str(tmp_path / "s"), "--mlflow", uri]) == 0
    assert f"logged to MLflow {uri}: parent run" in capsys.readouterr().out
    runs = read_back(uri, "composer_lab")[0]
    assert sorted(runs["tags.composer_lab.trial"].str.startswith("sweep")) == [False, False, True]
