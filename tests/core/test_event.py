"""Event: all 37 members with the values and properties of the seed."""

import pytest

from composer_lab.core import Event

SEED_VALUES = [
    "init", "before_load", "after_load", "fit_start", "epoch_start", "before_dataloader",
    "after_dataloader", "batch_start", "before_train_batch", "before_forward", "after_forward",
    "before_loss", "after_loss", "before_backward", "after_backward", "after_train_batch",
    "batch_end", "batch_checkpoint", "epoch_end", "epoch_checkpoint", "fit_end", "eval_before_all",
    "eval_start", "eval_batch_start", "eval_before_forward", "eval_after_forward", "eval_batch_end",
    "eval_end", "eval_after_all", "eval_standalone_start", "eval_standalone_end", "predict_start",
    "predict_batch_start", "predict_before_forward", "predict_after_forward", "predict_batch_end",
    "predict_end",
]
SEED_BEFORE = {
    "before_load", "fit_start", "epoch_start", "before_dataloader", "batch_start", "before_train_batch",
    "before_forward", "before_loss", "before_backward", "eval_before_all", "eval_start",
    "eval_batch_start", "eval_before_forward", "predict_start", "predict_batch_start",
    "predict_before_forward", "eval_standalone_start",
}
SEED_AFTER = {
    "after_load", "epoch_end", "batch_end", "after_dataloader", "after_train_batch", "after_forward",
    "after_loss", "after_backward", "eval_after_all", "eval_end", "eval_batch_end", "eval_after_forward",
    "fit_end", "predict_end", "predict_batch_end", "predict_after_forward", "eval_standalone_end",
}


def test_all_37_events_in_seed_order():
    assert [e.value for e in Event] == SEED_VALUES
    assert len(Event) == 37
    assert all(e.name == e.value.upper() for e in Event)


def test_lookup_by_value_and_string_equality():
    assert Event("after_loss") is Event.AFTER_LOSS
    assert Event.AFTER_LOSS == "after_loss"
    assert str(Event.BATCH_END) == "batch_end"
    with pytest.raises(ValueError):
        Event("after_losses")


@pytest.mark.parametrize("event", list(Event))
def test_before_after_membership(event):
    assert event.is_before_event == (event.value in SEED_BEFORE)
    assert event.is_after_event == (event.value in SEED_AFTER)


@pytest.mark.parametrize("event", list(Event))
def test_eval_predict_and_phase(event):
    assert event.is_eval == event.value.startswith("eval")
    assert event.is_predict == event.value.startswith("predict")
    expected = "eval" if event.is_eval else "predict" if event.is_predict else "fit"
    assert event.phase == expected


@pytest.mark.parametrize("event, name", [
    (Event.EPOCH_START, "epoch"), (Event.EPOCH_END, "epoch"), (Event.BEFORE_LOSS, "loss"),
    (Event.AFTER_LOSS, "loss"), (Event.EVAL_BEFORE_FORWARD, "eval_forward"),
    (Event.EVAL_STANDALONE_START, "eval_standalone"), (Event.INIT, "init"),
    (Event.BATCH_CHECKPOINT, "batch_checkpoint"), (Event.PREDICT_BATCH_END, "predict_batch"),
])
def test_canonical_name(event, name):
    assert event.canonical_name == name


def test_every_before_event_has_an_after_event_with_the_same_canonical_name():
    after_names = {e.canonical_name for e in Event if e.is_after_event}
    assert {e.canonical_name for e in Event if e.is_before_event} <= after_names
