"""The wall clock of a run (issue 45): ``state.timestamp``'s ``total_wct``, ``epoch_wct`` and
``batch_wct`` advance with each batch's duration, read from the trainer's time source (a fake
one here: no sleeps), evaluations left out; a callback stopping on ``total_wct`` stops."""

from __future__ import annotations

import datetime

import pytest

from composer_lab import Callback, Event
from composer_lab.core.time import Time
from composer_lab.trainer.clock import WallClock

from tests.trainer.helpers import OnEvent, make_trainer, tiny_loader

SECONDS_PER_BATCH, SECONDS_PER_EVAL = 2.0, 100.0


class FakeNow:
    """A time source that stands still until told to move."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def _seconds(delta: datetime.timedelta) -> float:
    return delta.total_seconds()


def _timed_trainer(now: FakeNow, **kwargs):
    """A trainer whose batches take 2 s of fake time each (at AFTER_FORWARD) and whose evaluations take 100 s."""
    work = OnEvent(Event.AFTER_FORWARD, lambda state: now.advance(SECONDS_PER_BATCH))
    evaluating = OnEvent(Event.EVAL_BATCH_START, lambda state: now.advance(SECONDS_PER_EVAL))
    trainer = make_trainer(algorithms=[work, evaluating], **kwargs)
    trainer.clock = WallClock(now)
    return trainer


def test_the_clock_advances_with_each_batch_and_resets_per_epoch():
    now = FakeNow()
    seen = []
    trainer = _timed_trainer(now, max_duration="2ep")  # 3 batches an epoch
    trainer.state.callbacks.append(_Record(seen))
    trainer.fit()
    ts = trainer.state.timestamp
    assert _seconds(ts.total_wct) == 6 * SECONDS_PER_BATCH
    assert [_seconds(t.batch_wct) for t in seen] == [SECONDS_PER_BATCH] * 6
    assert [_seconds(t.total_wct) for t in seen] == [SECONDS_PER_BATCH * i for i in range(1, 7)]
    assert [_seconds(t.epoch_wct) for t in seen] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0], "epoch_wct starts again"


def test_evaluations_are_left_out_of_the_training_clock():
    now = FakeNow()
    trainer = _timed_trainer(now, max_duration="2ep", eval_dataloader=tiny_loader(8, 8), eval_interval="1ba")
    trainer.fit()
    assert now.t - 1000.0 > 6 * SECONDS_PER_EVAL, "the evaluations took fake time"
    assert _seconds(trainer.state.timestamp.total_wct) == 6 * SECONDS_PER_BATCH


def test_a_second_fit_goes_on_from_the_first_ones_clock():
    now = FakeNow()
    trainer = _timed_trainer(now, max_duration="2ba")
    trainer.fit()
    now.advance(500.0)  # time between the cells is not training time
    trainer.fit("1ba")
    assert _seconds(trainer.state.timestamp.total_wct) == 3 * SECONDS_PER_BATCH


def test_a_callback_stops_the_run_on_total_wct():
    """What the '30sec' refusal advises: stop from a callback once total_wct passes the time."""
    with pytest.raises(ValueError, match=r"state\.stop_training\(\) once state\.timestamp\.total_wct"):
        Time.from_timestring("30sec")
    now = FakeNow()
    trainer = _timed_trainer(now, max_duration="10ep")
    trainer.state.callbacks.append(_StopAfter(datetime.timedelta(seconds=5)))
    trainer.fit()
    assert trainer.state.timestamp.batch == 3, "stopped at the first batch end past 5 s (2, 4, 6 s)"


class _Record(Callback):
    def __init__(self, seen: list) -> None:
        self.seen = seen

    def batch_end(self, state, logger) -> None:
        self.seen.append(state.timestamp)


class _StopAfter(Callback):
    def __init__(self, limit: datetime.timedelta) -> None:
        self.limit = limit

    def batch_end(self, state, logger) -> None:
        if state.timestamp.total_wct >= self.limit:
            state.stop_training()
