"""The passes, alone and as the engine composes them by default."""

import warnings

import pytest

from composer_lab.core import (COMPOSER_PASSES, DEFAULT_PASSES, Engine, Event, set_filo_order,
                               sort_fused_layernorm_last, sort_selective_backprop_first, sort_to_back, sort_to_front,
                               warn_if_multiple_loss_interpolation, warn_if_multiple_mixers)
from composer_lab.core.passes import is_filo_reversed, set_filo_order_composer, sort_low_precision_layernorm_last

from .helpers import FakeFusedLayerNorm, FakeMixUp, FakeSelectiveBackprop, Recorder

ALL = list(Event)


def test_sort_to_front_and_back_seed_examples():
    assert sort_to_front([1, "b", 3], str) == ["b", 1, 3]
    assert sort_to_back([1, "b", 3], str) == [1, 3, "b"]
    assert sort_to_front([1, "a", 2, "b"], str) == ["a", "b", 1, 2]  # stable on both sides
    assert sort_to_back(["a", 1, "b", 2], str) == [1, 2, "a", "b"]


@pytest.mark.parametrize("before, after", [
    (Event.BEFORE_LOSS, Event.AFTER_LOSS), (Event.BEFORE_FORWARD, Event.AFTER_FORWARD),
    (Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD), (Event.BEFORE_DATALOADER, Event.AFTER_DATALOADER),
    (Event.BEFORE_TRAIN_BATCH, Event.AFTER_TRAIN_BATCH), (Event.BEFORE_LOAD, Event.AFTER_LOAD),
    (Event.EVAL_BEFORE_FORWARD, Event.EVAL_AFTER_FORWARD), (Event.EVAL_BEFORE_ALL, Event.EVAL_AFTER_ALL),
    (Event.PREDICT_BEFORE_FORWARD, Event.PREDICT_AFTER_FORWARD),
])
def test_filo_reverses_after_events_only(before, after):
    algos = ["A", "B", "C", "D"]
    assert set_filo_order(algos, before) == ["A", "B", "C", "D"]
    assert set_filo_order(algos, after) == ["D", "C", "B", "A"]


@pytest.mark.parametrize("event", [e for e in Event if e.value.endswith(("_start", "_end"))])
def test_filo_leaves_start_and_end_events_alone(event):
    assert set_filo_order(["A", "B", "C"], event) == ["A", "B", "C"]


def test_filo_reverses_exactly_the_after_events():
    """Ours: every ``*after_*`` event; Composer's: only names starting with AFTER_ (docs/composer_differences.md)."""
    assert {e for e in ALL if is_filo_reversed(e)} == {e for e in ALL if "after_" in e.value}
    assert {e for e in ALL if set_filo_order(["A", "B"], e) == ["B", "A"]} == {e for e in ALL if "after_" in e.value}
    composer = {e for e in ALL if set_filo_order_composer(["A", "B"], e) == ["B", "A"]}
    assert composer == {e for e in ALL if e.name.startswith("AFTER_")}
    assert Event.EVAL_AFTER_ALL not in composer and Event.EVAL_AFTER_ALL in {e for e in ALL if is_filo_reversed(e)}


def test_selective_backprop_first_and_fused_layernorm_last():
    log = []
    a, sb, b = Recorder("A", ALL, log), FakeSelectiveBackprop("SB", ALL, log), Recorder("B", ALL, log)
    fln, c = FakeFusedLayerNorm("FLN", ALL, log), Recorder("C", ALL, log)
    assert sort_selective_backprop_first([a, sb, b], Event.INIT) == [sb, a, b]
    assert sort_fused_layernorm_last([fln, a, c], Event.INIT) == [a, c, fln]


def test_loss_interpolation_warns_as_composer_reads_interpolate_loss():
    """Composer's pass: only algorithms whose ``interpolate_loss`` is true count, whatever they are."""
    log = []
    mix1, mix2, a = FakeMixUp("M1", ALL, log), FakeMixUp("M2", ALL, log), Recorder("A", ALL, log)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_multiple_loss_interpolation([mix1, a, mix2], Event.BEFORE_FORWARD)  # default False: quiet
        mix1.interpolate_loss = True
        warn_if_multiple_loss_interpolation([mix1, a, mix2], Event.BEFORE_FORWARD)  # one: quiet
    a.interpolate_loss = True  # not a mixer, but it says it interpolates the loss
    with pytest.warns(UserWarning, match="interpolate the loss"):
        assert warn_if_multiple_loss_interpolation([mix1, a, mix2], Event.BEFORE_FORWARD) == [mix1, a, mix2]


def test_multiple_mixers_warns_as_its_own_pass():
    log = []
    mix1, mix2, a = FakeMixUp("M1", ALL, log), FakeMixUp("M2", ALL, log), Recorder("A", ALL, log)
    with pytest.warns(UserWarning, match="mix examples"):
        assert warn_if_multiple_mixers([mix1, a, mix2], Event.BEFORE_FORWARD) == [mix1, a, mix2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_multiple_mixers([mix1, a], Event.BEFORE_FORWARD)


def test_default_pass_order():
    assert [p.__name__ for p in DEFAULT_PASSES] == [
        "set_filo_order", "sort_selective_backprop_first", "sort_fused_layernorm_last",
        "sort_low_precision_layernorm_last", "warn_if_multiple_loss_interpolation", "warn_if_multiple_mixers"]


def test_composer_passes_are_composers_list(state):
    """SB-first, layernorm-last, then FILO with Composer's rule (AFTER_ names only), then the warning."""
    assert COMPOSER_PASSES == (sort_selective_backprop_first, sort_fused_layernorm_last,
                               sort_low_precision_layernorm_last, set_filo_order_composer,
                               warn_if_multiple_loss_interpolation)
    log = []
    state.algorithms = [Recorder("A", ALL, log), FakeSelectiveBackprop("SB", ALL, log), Recorder("B", ALL, log)]
    engine = Engine(state)
    engine.passes = COMPOSER_PASSES
    engine.run_event(Event.EVAL_AFTER_FORWARD)  # not reversed under Composer's rule
    engine.run_event(Event.AFTER_DATALOADER)  # reversed: SB ends up last
    assert log == ["SB", "A", "B", "B", "A", "SB"]


@pytest.mark.parametrize("event", [Event.AFTER_DATALOADER, Event.INIT])
def test_selective_backprop_runs_first_under_the_default_passes(state, event):
    """Composer's defect: SB sorted first, then FILO-reversed to last on AFTER_DATALOADER."""
    log = []
    state.algorithms = [Recorder("A", [event], log), FakeSelectiveBackprop("SB", [event], log),
                        Recorder("B", [event], log)]
    engine = Engine(state)
    engine.run_event(event)
    assert log[0] == "SB"
    expected_rest = ["B", "A"] if is_filo_reversed(event) else ["A", "B"]
    assert log[1:] == expected_rest


def test_composer_pass_order_reproduces_the_defect(state):
    """With Composer's order (SB-first before FILO), SB would end up last: why ours differs."""
    log = []
    state.algorithms = [Recorder("A", ALL, log), FakeSelectiveBackprop("SB", ALL, log), Recorder("B", ALL, log)]
    engine = Engine(state)
    engine.passes = [sort_selective_backprop_first, sort_fused_layernorm_last, set_filo_order]
    engine.run_event(Event.AFTER_DATALOADER)
    assert log == ["B", "A", "SB"]
