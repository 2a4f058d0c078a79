"""The order preview agrees with the engine: what it draws solid is what runs at the next batch."""

from __future__ import annotations

import warnings

import pytest

from composer_lab.algorithms import ALGORITHMS, LabelSmoothing
from composer_lab.lab import Control, OrderPreview
from tests.trainer.every_algorithm import trainer_for

STEP_EVENTS = ["after_dataloader", "batch_start", "before_train_batch", "before_forward", "after_forward",
               "before_loss", "after_loss", "before_backward", "after_backward", "after_train_batch", "batch_end"]


def _ran_at(trainer, batch):
    inv = trainer.trace.invocations
    rows = inv[(inv["batch"] == batch) & inv["matched"] & (inv["kind"].astype(str) == "algorithm")]
    return {e: set(rows.loc[rows["event"].astype(str) == e, "name"].astype(str)) for e in STEP_EVENTS}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_the_preview_draws_solid_what_runs_at_the_next_batch(name):
    trainer = trainer_for(name)
    length = trainer.state.max_duration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit("2ba")
        trainer.state.max_duration = length  # as a run paused at batch 2 of its length
        preview = OrderPreview(Control(trainer))
        trainer.fit("1ba")
    shown = {e: preview.now.get(e, set()) for e in STEP_EVENTS}
    assert shown == _ran_at(trainer, 2)


def test_label_smoothing_is_solid_where_it_puts_the_targets_back():
    trainer = trainer_for("label_smoothing")
    assert isinstance(trainer.state.algorithms[0], LabelSmoothing)
    preview = OrderPreview(Control(trainer))
    assert preview.now["after_loss"] == {"LabelSmoothing"} and preview.now["before_loss"] == {"LabelSmoothing"}
