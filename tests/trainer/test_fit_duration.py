"""fit(duration) after an interrupt (issue 45): a duration within max_duration trains that much
and keeps max_duration, so schedules in fractions of the run keep their batches; one past it
extends max_duration, with a warning in the cell naming the schedules that move."""

from __future__ import annotations

import warnings

import pytest

from composer_lab.algorithms import SelectiveBackprop

from tests.trainer.helpers import make_trainer


def _selective(**kwargs):
    return make_trainer(algorithms=[SelectiveBackprop(start=0.5, end=0.9, scale_factor=1)], **kwargs)


def test_a_shorter_fit_duration_keeps_max_duration_and_the_schedules():
    trainer = _selective(max_duration="10ep")  # 3 batches an epoch: 30 batches
    trainer.fit("2ba")  # (as after an interrupt: a little more of a long run)
    assert trainer.state.timestamp.batch == 2
    assert str(trainer.state.max_duration) == "10ep", "max_duration as the user set it"
    assert trainer.state.get_elapsed_duration() == pytest.approx(2 / 30)
    note = trainer.trace.notes.query("kind == 'duration'")["text"].iloc[-1]
    assert note == "fit('2ba') stops at 2ba; max_duration 10ep is kept, so schedules in fractions of the run keep " \
                   "their batches"
    trainer.fit("1ep")  # epochs too: to the end of the next epoch
    assert trainer.state.timestamp.epoch == 1 and str(trainer.state.max_duration) == "10ep"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit("1ba")  # nothing moves: no warning


def test_a_fit_past_max_duration_extends_it_and_warns_about_the_schedules_that_move():
    trainer = _selective(max_duration="10ba")
    trainer.fit()
    with pytest.warns(UserWarning, match=r"fit\('10ba'\): max_duration 10ba -> 20ba; schedules in fractions of "
                                         r"the run move: SelectiveBackprop \[5, 9\) -> \[10, 18\) batches; to keep"):
        trainer.fit("10ba")
    assert str(trainer.state.max_duration) == "20ba" and trainer.state.timestamp.batch == 20


def test_a_fit_past_max_duration_without_schedules_does_not_warn():
    trainer = make_trainer(max_duration="2ba")
    trainer.fit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.fit("2ba")
    assert str(trainer.state.max_duration) == "4ba"
