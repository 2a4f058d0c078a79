"""A sweep's results row: the last value of each metric, a keep ratio over the batches it selected."""

from __future__ import annotations

import pandas as pd
import pytest

from composer_lab.explore.trials import final_metrics


def _metrics(rows):
    return pd.DataFrame(rows, columns=["batch", "name", "value"]).astype({"name": "category"})


def test_a_keep_ratio_is_the_mean_over_the_selected_batches_not_the_last_one_after_the_interval():
    metrics = _metrics([(0, "sb/keep_ratio", 1.0), (1, "sb/keep_ratio", 0.5), (2, "sb/keep_ratio", 0.25),
                        (3, "sb/keep_ratio", 1.0), (0, "loss/train", 2.0), (3, "loss/train", 0.5),
                        (3, "metrics/eval/Accuracy", 0.9)])
    assert final_metrics(metrics) == {"loss/train": 0.5, "metrics/eval/Accuracy": 0.9, "sb/keep_ratio": 0.375}


def test_a_keep_ratio_that_never_selected_is_left_out():
    metrics = _metrics([(0, "random_subset/keep_ratio", 1.0), (1, "random_subset/keep_ratio", 1.0),
                        (1, "loss/train", 1.5)])
    assert final_metrics(metrics) == {"loss/train": 1.5}


@pytest.mark.slow
def test_a_run_with_selective_backprop_reports_its_selected_keep_ratio():
    from composer_lab.algorithms import SelectiveBackprop
    from tests.trainer.helpers import make_trainer as small_trainer

    trainer = small_trainer(algorithms=[SelectiveBackprop(start=0.2, end=0.6, keep=0.5, scale_factor=1)],
                            max_duration="10ba")
    trainer.fit()
    assert final_metrics(trainer.metrics)["sb/keep_ratio"] == pytest.approx(0.5, abs=0.1)
