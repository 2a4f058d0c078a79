"""Durations and timestamps."""

import copy
import dataclasses
import datetime
import pickle

import pytest
import torch

from composer_lab.core import State, Time, Timestamp, TimeUnit, ensure_time


@pytest.mark.parametrize("text, value, unit", [
    ("3ep", 3, TimeUnit.EPOCH), ("120ba", 120, TimeUnit.BATCH), ("4096sp", 4096, TimeUnit.SAMPLE),
    ("0.5dur", 0.5, TimeUnit.DURATION), ("1dur", 1.0, TimeUnit.DURATION), ("0ba", 0, TimeUnit.BATCH),
    ("2.0ep", 2, TimeUnit.EPOCH), ("3.000ba", 3, TimeUnit.BATCH), ("2.0sp", 2, TimeUnit.SAMPLE),  # Composer's
])
def test_parse(text, value, unit):
    t = Time.from_timestring(text)
    assert (t.value, t.unit) == (value, unit)
    assert Time.from_timestring(str(t)) == t


@pytest.mark.parametrize("text", ["3 epochs", "-1ep", "", "1.5ba", "2.01sp", "ep", "3", "1.5dur", "3EP", "3eps"])
def test_bad_durations_are_value_errors_that_show_examples(text):
    with pytest.raises(ValueError, match=r"e\.g\. '\d"):
        Time.from_timestring(text)


def test_whole_numbers_written_with_decimals_are_counts():
    assert Time.from_timestring("2.0ep") == Time(2, "ep") and isinstance(Time.from_timestring("3.000ba").value, int)


@pytest.mark.parametrize("text, unit, alternative", [("30sec", "sec", r"state\.stop_training\(\)"),
                                                     ("512tok", "tok", "'600ba'"), ("10iter", "iter", "'3ep'")])
def test_composers_other_units_are_refused_with_the_alternative(text, unit, alternative):
    with pytest.raises(ValueError, match=rf"max_duration: .*'{unit}' is a unit of Composer's that composer_lab does "
                                         rf"not take: .*{alternative}"):
        ensure_time(text, "max_duration")


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


# -- Composer's Time arithmetic and comparison --------------------------------------------------------
def test_from_constructors():
    assert Time.from_epoch(3) == Time(3, "ep") and Time.from_batch(120).unit is TimeUnit.BATCH
    assert Time.from_sample(64) == Time(64, "sp") and Time.from_duration(0.5) == Time(0.5, "dur")
    assert Time.from_epoch(5).to_timestring() == "5ep"


def test_times_of_one_unit_add_subtract_and_compare():
    assert Time(1, "ep") + Time(2, "ep") == Time(3, "ep")
    assert Time(5, "ba") - "2ba" == Time(3, "ba") and 10 - Time(4, "ba") == Time(6, "ba")
    assert sum([Time(1, "ep"), Time(2, "ep")]) == Time(3, "ep")
    assert Time(3, "ep") < Time(4, "ep") <= "4ep" and Time(4, "ba") > 3 and Time(4, "ba") >= 4
    assert Time(4, "ba") == 4 and Time(4, "ba") == "4ba" and Time(4, "ba") != Time(4, "ep")
    assert Time(4, "ba") != "not a time" and len({Time(4, "ba"), Time(4, "ba"), Time(4, "ep")}) == 2
    assert int(Time(4, "ba")) == 4 and float(Time(0.25, "dur")) == 0.25


def test_times_scale_by_numbers_and_fractions_of_the_run():
    assert Time(2, "ep") * 0.5 == Time(1, "ep") and 3 * Time(2, "ba") == Time(6, "ba")
    assert Time(3, "ep") * 0.5 == Time(1, "ep")  # counts truncate, as in Composer
    assert Time(10, "ep") * Time(0.5, "dur") == Time(5, "ep") == Time(0.5, "dur") * Time(10, "ep")
    assert Time(4, "ep") / 2 == Time(2, "ep") and (Time(4, "ep") / 2).value.__class__ is int
    assert Time(0.5, "dur") * 0.5 == Time(0.25, "dur")


@pytest.mark.parametrize("operation", [
    lambda: Time(1, "ep") + Time(1, "ba"), lambda: Time(1, "ep") - "1ba", lambda: Time(1, "ep") < Time(2, "ba"),
    lambda: Time(1, "ep") >= "1sp", lambda: Time(2, "ep") * Time(3, "ba"),
])
def test_mixing_units_is_a_value_error_naming_both(operation):
    with pytest.raises(ValueError, match="units differ|must be a fraction of the run"):
        operation()


def test_arithmetic_with_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="give a Time"):
        Time(1, "ep") + [1]
    with pytest.raises(TypeError):
        Time(1, "ep") * "2"


def test_timestamp_fields_and_wall_clock():
    second = datetime.timedelta(seconds=1)
    ts = Timestamp().to_next_batch(8, duration=second).to_next_batch(Time(8, "sp"), duration=2 * second)
    assert (ts.batch, ts.sample, ts.total_wct, ts.epoch_wct, ts.batch_wct) == (2, 16, 3 * second, 3 * second,
                                                                              2 * second)
    ts = ts.to_next_epoch()
    assert (ts.epoch, ts.batch_in_epoch, ts.sample_in_epoch, ts.epoch_wct, ts.total_wct) == (
        1, 0, 0, datetime.timedelta(0), 3 * second)
    assert Timestamp().to_next_batch().batch == 1  # samples default to 0, as in Composer
    saved = ts.state_dict()
    assert saved["total_wct"] == 3.0 and Timestamp.from_state_dict(saved) == ts


def test_timestamps_built_by_to_next_are_like_constructed_ones():
    """to_next_batch / to_next_epoch skip the dataclass __init__: the result must not tell."""
    second = datetime.timedelta(seconds=1)
    start = Timestamp(epoch=1, batch=4, sample=40, batch_in_epoch=2, sample_in_epoch=20, total_wct=second,
                      epoch_wct=second, batch_wct=second)
    built = [start.to_next_batch(8, duration=second), start.to_next_epoch(second)]
    made = [Timestamp(1, 5, 48, 3, 28, 2 * second, 2 * second, second), Timestamp(2, 4, 40, 0, 0, 2 * second,
                                                                                 datetime.timedelta(0), second)]
    for ts, expected in zip(built, made):
        assert type(ts) is Timestamp and ts == expected and hash(ts) == hash(expected)
        assert repr(ts) == repr(expected) and list(vars(ts).items()) == list(vars(expected).items())
        assert pickle.loads(pickle.dumps(ts)) == ts and copy.deepcopy(ts) == ts
        assert dataclasses.replace(ts, batch=9) == dataclasses.replace(expected, batch=9)
        assert dataclasses.astuple(ts) == dataclasses.astuple(expected)
        with pytest.raises(dataclasses.FrozenInstanceError):
            ts.batch = 0
