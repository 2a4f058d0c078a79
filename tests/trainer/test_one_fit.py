"""One trainer trains in one place at a time, from any thread; a longer run is a note in the trace."""

from __future__ import annotations

import threading

import pytest

from composer_lab import Callback
from composer_lab.algorithms import SelectiveBackprop
from tests.trainer.helpers import make_trainer


class Gate(Callback):
    """Holds the fit at its first BATCH_END until ``release`` is set."""

    def __init__(self) -> None:
        self.reached, self.release = threading.Event(), threading.Event()

    def batch_end(self, state, logger) -> None:
        self.reached.set()
        self.release.wait(30)


def test_a_second_fit_while_one_is_live_is_refused_across_threads():
    gate = Gate()
    trainer = make_trainer(callbacks=[gate], max_duration="2ba", run_name="live")
    worker = threading.Thread(target=trainer.fit, name="worker")
    worker.start()
    assert gate.reached.wait(30)
    with pytest.raises(RuntimeError, match=r"run 'live' is already training \(fit started in thread 'worker' at "
                                           r"batch 0\).*stop it"):
        trainer.fit("5ba")
    gate.release.set()
    worker.join(30)
    assert trainer.state.timestamp.batch == 2, "the refused fit changed neither the run nor max_duration"
    assert str(trainer.state.max_duration) == "2ba"
    assert (trainer.trace.events["event"].astype(str) == "fit_start").sum() == 1
    trainer.fit("1ba")  # the lock is free again once the live fit ended
    assert trainer.state.timestamp.batch == 3


def test_a_fit_called_from_inside_a_fit_is_refused():
    errors = []

    class Reenter(Callback):
        def batch_end(self, state, logger) -> None:
            try:
                trainer.fit("1ba")
            except RuntimeError as err:
                errors.append(err)

    trainer = make_trainer(callbacks=[Reenter()], max_duration="2ba")
    trainer.fit()
    assert len(errors) == 2 and "already training" in str(errors[0])
    assert trainer.state.timestamp.batch == 2


def test_fit_trains_to_the_end_from_a_thread():
    """No signal is installed off the main thread (Python allows signals only there)."""
    trainer = make_trainer(max_duration="12ba")
    failures = []
    worker = threading.Thread(target=lambda: _catching(trainer.fit, failures))
    worker.start()
    worker.join(60)
    assert failures == [] and trainer.state.timestamp.batch == 12


def _catching(fn, failures):
    try:
        fn()
    except BaseException as err:  # noqa: BLE001 - the test reports whatever the thread raised
        failures.append(err)


def test_a_longer_duration_is_a_note_naming_the_schedule_that_moves():
    trainer = make_trainer(max_duration="10ba", algorithms=[SelectiveBackprop(start=0.5, end=0.9, scale_factor=1)])
    trainer.fit()
    trainer.fit("10ba")
    notes = trainer.trace.notes
    note = notes[notes["kind"] == "duration"]
    assert list(note["batch"]) == [10]
    assert note["text"].iloc[0] == ("max_duration 10ba -> 20ba; schedules in fractions of the run move: "
                                    "SelectiveBackprop [5, 9) -> [10, 18) batches")
