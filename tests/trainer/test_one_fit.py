"""One trainer runs one loop (fit, eval, predict, close) at a time, from any thread; a longer run is a
note in the trace."""

from __future__ import annotations

import threading

import pytest

from composer_lab import Callback
from composer_lab.algorithms import SelectiveBackprop
from composer_lab.trainer.lifecycle import TrainerBusy
from tests.trainer.helpers import make_trainer, tiny_loader


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
    with pytest.raises(TrainerBusy, match=r"run 'live' is already training \(fit started in thread 'worker' at "
                                          r"batch 0\); one trainer runs one loop \(fit, eval, predict, close\) at "
                                          r"a time: .*stop it .*then call fit\(\) again"):
        trainer.fit("5ba")
    gate.release.set()
    worker.join(30)
    assert trainer.state.timestamp.batch == 2, "the refused fit changed neither the run nor max_duration"
    assert str(trainer.state.max_duration) == "2ba"
    assert (trainer.trace.events["event"].astype(str) == "fit_start").sum() == 1
    trainer.fit("1ba")  # the lock is free again once the live fit ended
    assert trainer.state.timestamp.batch == 3


@pytest.mark.parametrize("loop", ["eval", "predict", "close"])
def test_eval_predict_and_close_during_a_fit_are_refused_like_a_second_fit(loop):
    """They share the state's batch, outputs, loss and the model's mode with the fit."""
    gate = Gate()
    trainer = make_trainer(callbacks=[gate], max_duration="2ba", run_name="live", eval_dataloader=tiny_loader())
    worker = threading.Thread(target=trainer.fit, name="worker")
    worker.start()
    assert gate.reached.wait(30) and trainer.busy
    call = {"eval": trainer.eval, "predict": lambda: trainer.predict(trainer.eval_dataloader),
            "close": trainer.close}[loop]
    events_before = len(trainer.trace.events)
    with pytest.raises(TrainerBusy, match=rf"run 'live' is already training \(fit started in thread 'worker' at batch "
                                          rf"0\); .*then call {loop}\(\) again"):
        call()
    assert len(trainer.trace.events) == events_before, "the refused loop fired no event"
    assert trainer.state.model.training, "nor switched the model to eval mode under the fit"
    gate.release.set()
    worker.join(30)
    assert trainer.state.timestamp.batch == 2 and not trainer.busy
    call()  # free again once the fit ended


def test_the_exit_hook_leaves_a_trainer_that_trains_in_a_thread_alone():
    """At interpreter exit a panel's daemon thread may still train: closing under it would fail."""
    gate = Gate()
    trainer = make_trainer(callbacks=[gate], max_duration="2ba")
    worker = threading.Thread(target=trainer.fit, name="worker")
    worker.start()
    assert gate.reached.wait(30)
    trainer._close_at_exit()  # what atexit calls
    gate.release.set()
    worker.join(30)
    assert trainer.state.timestamp.batch == 2, "not closed: the fit went on"
    trainer._close_at_exit()
    with pytest.raises(RuntimeError, match="closed"):
        trainer.fit("1ba")


def test_a_fit_during_an_evaluation_names_the_evaluation():
    errors = []

    class FitDuringEval(Callback):
        def eval_batch_end(self, state, logger) -> None:
            try:
                trainer.fit("1ba")
            except TrainerBusy as err:
                errors.append(str(err))

    trainer = make_trainer(callbacks=[FitDuringEval()], max_duration="2ba", run_name="ev",
                           eval_dataloader=tiny_loader())
    trainer.eval()
    assert errors and errors[0].startswith("run 'ev' is already evaluating (eval started in thread 'MainThread' "
                                           "at batch 0)")
    assert trainer.state.timestamp.batch == 0


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
    with pytest.warns(UserWarning, match="SelectiveBackprop"):
        trainer.fit("10ba")
    notes = trainer.trace.notes
    note = notes[notes["kind"] == "duration"]
    assert list(note["batch"]) == [10]
    assert note["text"].iloc[0] == ("max_duration 10ba -> 20ba; schedules in fractions of the run move: "
                                    "SelectiveBackprop [5, 9) -> [10, 18) batches")


def test_a_change_from_another_thread_during_a_fit_waits_for_the_batch_boundary():
    """Never between two events of one batch (an algorithm's BEFORE_LOSS and AFTER_LOSS)."""
    at_loss, go_on = threading.Event(), threading.Event()

    class HoldAtLoss(Callback):
        def before_loss(self, state, logger) -> None:
            if state.timestamp.batch == 2:
                at_loss.set()
                go_on.wait(30)

    trainer = make_trainer(callbacks=[HoldAtLoss()], max_duration="5ba")
    ran_at = []
    worker = threading.Thread(target=trainer.fit, name="worker")
    worker.start()
    assert at_loss.wait(30)
    trainer.between_batches(lambda: ran_at.append((trainer.state.timestamp.batch, str(trainer.engine.event))))
    assert ran_at == [], "queued while batch 2 is in flight"
    go_on.set()
    worker.join(30)
    assert ran_at == [(3, "batch_end")], "after batch 2's BATCH_END, before batch 3"
    trainer.between_batches(lambda: ran_at.append("now"))
    assert ran_at[-1] == "now", "no fit elsewhere: at once"
