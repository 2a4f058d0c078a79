"""Durations and timestamps."""

import pytest
import torch

from composer_lab.core import State, Time, Timestamp, TimeUnit, ensure_time


@pytest.mark.parametrize("text, value, unit", [
    ("3ep", 3, TimeUnit.EPOCH), ("120ba", 120, TimeUnit.BATCH), ("4096sp", 4096, TimeUnit.SAMPLE),
    ("0.5dur", 0.5, TimeUnit.DURATION), ("1dur", 1.0, TimeUnit.DURATION), ("0ba", 0, TimeUnit.BATCH),
])
def test_parse(text, value, unit):
    t = Time.from_timestring(text)
    assert (t.value, t.unit) == (value, unit)
    assert Time.from_timestring(str(t)) == t


@pytest.mark.parametrize("text", ["3 epochs", "-1ep", "", "1.5ba", "2.0sp", "ep", "3", "1.5dur", "3EP"])
def test_bad_durations_are_value_errors_that_show_examples(text):
    with pytest.raises(ValueError, match=r"e\.g\. '\d"):
        Time.from_timestring(text)


def test_non_string_duration_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="max_duration"):
        ensure_time(3, "max_duration")


def test_time_rejects_negative_and_fractional_counts():
    with pytest.raises(ValueError, match="whole number"):
        Time(-1, "ep")
    with pytest.raises(ValueError, match="whole number"):
        Time(1.5, "ba")
    with pytest.raises(ValueError, match="between 0 and 1"):
        Time(2.0, "dur")


def test_timestamp_advances():
    ts = Timestamp().to_next_batch(32).to_next_batch(16)
    assert (ts.batch, ts.sample, ts.batch_in_epoch, ts.sample_in_epoch) == (2, 48, 2, 48)
    ts = ts.to_next_epoch()
    assert (ts.epoch, ts.batch, ts.batch_in_epoch, ts.sample_in_epoch) == (1, 2, 0, 0)
    assert Timestamp.from_state_dict(ts.state_dict()) == ts
    assert ts.get("ep") == 1 and ts.get(TimeUnit.SAMPLE) == 48


def test_elapsed_duration_moves_every_batch_of_an_epoch_run():
    state = State(torch.nn.Linear(1, 1), "2ep", dataloader=[0, 1, 2, 3])
    assert state.get_elapsed_duration() == 0.0
    state.timestamp = Timestamp(epoch=1, batch=6, batch_in_epoch=2)
    assert state.get_elapsed_duration() == pytest.approx(0.75)
    state.max_duration = "12ba"
    assert state.get_elapsed_duration() == pytest.approx(0.5)


def test_max_duration_cannot_be_a_fraction():
    with pytest.raises(ValueError, match="max_duration"):
        State(torch.nn.Linear(1, 1), "0.5dur")
