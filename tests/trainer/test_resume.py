"""Resuming a run: exact for every algorithm, even when the data draws random numbers as it is
read, and the metrics of a resumed run hold one row per (name, step)."""

from __future__ import annotations

import warnings

import pytest
import torch

from composer_lab import Callback
from composer_lab.algorithms import ALGORITHMS

from tests.trainer.every_algorithm import trainer_for
from tests.trainer.helpers import counts, make_trainer


def _fit(trainer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit()


def _assert_same_training(a, b) -> None:
    for (name, x), (_, y) in zip(a.state.model.state_dict().items(), b.state.model.state_dict().items()):
        assert torch.equal(x, y), f"{name} differs"
    for opt_a, opt_b in zip(a.state.optimizers, b.state.optimizers):
        for key, saved in opt_a.state_dict()["state"].items():
            loaded = opt_b.state_dict()["state"][key]
            assert all(torch.equal(saved[k], loaded[k]) for k in saved), f"optimizer state {key} differs"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("checkpoint,num_workers", [("ep0-ba2.pt", 0), ("ep1-ba7.pt", 2)])
def test_resume_mid_epoch_is_exact_when_the_data_draws_lazily(tmp_path, name, checkpoint, num_workers):
    """5 batches an epoch; resumed at the 3rd batch of an epoch, after skipping 2 batches whose
    reading drew random numbers (in this process, or in worker processes): the data, and so
    the training, are the uninterrupted run's. In the second epoch, LayerFreezing has frozen
    layers at the first epoch's end, which the resumed run did not see."""
    full = trainer_for(name, num_workers, save_folder=tmp_path, save_interval="1ba")
    _fit(full)
    resumed = trainer_for(name, num_workers, load_path=tmp_path / checkpoint)
    _fit(resumed)
    assert counts(resumed.state.timestamp) == counts(full.state.timestamp)
    _assert_same_training(full, resumed)


class DrawsAtFitStart(Callback):
    """Draws from the global generator at FIT_START, which a resumed run fires and the
    uninterrupted run did not at that point."""

    def fit_start(self, state, logger) -> None:
        torch.rand(1)


@pytest.mark.parametrize("checkpoint,interval", [("ep0-ba2.pt", "1ba"), ("ep1-ba5.pt", "1ep")])
def test_resume_restores_random_state_after_the_events_before_the_first_batch(tmp_path, checkpoint, interval):
    """The checkpoint's random state is restored where the saving run went on from it (mid-epoch
    and at an epoch's start), not at load, before AFTER_LOAD and FIT_START draw from it."""
    full = trainer_for("cutout", callbacks=[DrawsAtFitStart()], save_folder=tmp_path, save_interval=interval)
    _fit(full)
    resumed = trainer_for("cutout", callbacks=[DrawsAtFitStart()], load_path=tmp_path / checkpoint)
    _fit(resumed)
    _assert_same_training(full, resumed)


class LogsAtInit(Callback):
    """Logs one metric at INIT, as a callback reporting its setup would."""

    def init(self, state, logger) -> None:
        logger.log_metrics({"setup/params": sum(p.numel() for p in state.model.parameters())})


def test_metrics_logged_at_init_are_not_repeated_by_resumes(tmp_path):
    first = make_trainer(callbacks=[LogsAtInit()], save_folder=tmp_path / "a", save_interval="1ba",
                         max_duration="2ba")
    first.fit()
    second = make_trainer(callbacks=[LogsAtInit()], load_path=first.checkpoints[-1], save_folder=tmp_path / "a",
                          save_interval="1ba", max_duration="4ba")
    second.fit()
    third = make_trainer(callbacks=[LogsAtInit()], load_path=second.checkpoints[-1], max_duration="6ba")
    third.fit()
    metrics = third.metrics.astype({"name": str})
    assert not metrics.duplicated(["batch", "epoch", "phase", "name"]).any(), metrics
    assert (metrics["name"] == "setup/params").sum() == 1
    assert metrics.query("name == 'loss/train'")["batch"].tolist() == list(range(6))
