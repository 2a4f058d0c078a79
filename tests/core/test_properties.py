"""Property-based tests of the ordering rules, durations and trace persistence."""

import tempfile
from decimal import Decimal

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_lab.core import DEFAULT_PASSES, Engine, Event, State, Time, Trace
from composer_lab.core.passes import is_filo_reversed

from .helpers import FakeFusedLayerNorm, FakeMixUp, FakeSelectiveBackprop, Recorder

KINDS = {"plain": Recorder, "sb": FakeSelectiveBackprop, "fln": FakeFusedLayerNorm, "mix": FakeMixUp}
EVENTS = st.sampled_from(list(Event))
# Random lists often hold two loss-interpolating algorithms; the pass's warning is tested elsewhere.
pytestmark = pytest.mark.filterwarnings("ignore:.*interpolate the loss:UserWarning")


@st.composite
def algorithm_lists(draw):
    log: list = []
    specs = draw(st.lists(st.tuples(st.sampled_from(sorted(KINDS)), st.sets(EVENTS, min_size=1)), max_size=8))
    return [KINDS[kind](f"{kind}{i}", events, log) for i, (kind, events) in enumerate(specs)], log


def new_state(algorithms):
    state = State(torch.nn.Linear(2, 2), "1ep", algorithms=algorithms)
    state.batch = (torch.zeros(1, 2), torch.zeros(1))
    return state


def ordered(algorithms, event):
    for p in DEFAULT_PASSES:
        algorithms = p(algorithms, event)
    return list(algorithms)


@settings(max_examples=200, deadline=None)
@given(algorithm_lists(), EVENTS)
def test_default_passes_permute_and_pin(algos_log, event):
    algorithms, _ = algos_log
    out = ordered(algorithms, event)
    assert sorted(map(id, out)) == sorted(map(id, algorithms))  # nothing lost or duplicated
    sbs = [a for a in out if a.selects_batch]
    assert out[:len(sbs)] == sbs  # Selective Backprop first where present
    flns = [a for a in out if a.fuses_layernorm]
    assert out[len(out) - len(flns):] == flns  # FusedLayerNorm last
    others = [a for a in algorithms if not (a.selects_batch or a.fuses_layernorm)]
    expected = others[::-1] if is_filo_reversed(event) else others
    assert [a for a in out if a in others] == expected  # after-events reverse the others


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(algorithm_lists(), st.lists(EVENTS, min_size=1, max_size=6))
def test_plan_equals_what_run_event_does(algos_log, events):
    algorithms, log = algos_log
    engine = Engine(new_state(algorithms))
    for event in events:
        planned = [a.name for a in engine.plan(event)]
        log.clear()
        engine.run_event(event)
        assert log == planned


@given(st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.integers(0, 10**9), st.sampled_from(["ep", "ba", "sp"])),
    st.builds(lambda x: f"{format(Decimal(repr(x)), 'f')}dur", st.floats(0, 1, allow_nan=False))))
def test_duration_strings_round_trip(text):
    t = Time.from_timestring(text)
    assert Time.from_timestring(str(t)) == t
    assert t.value == (float(text[:-3]) if text.endswith("dur") else int(text[:-2]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(algorithm_lists(), st.lists(EVENTS, max_size=10), st.sampled_from(["all", "ran"]))
def test_trace_survives_save_and_load(algos_log, events, level):
    algorithms, _ = algos_log
    engine = Engine(new_state(algorithms), trace=level)
    for event in events:
        engine.run_event(event)
    with tempfile.TemporaryDirectory() as folder:
        engine.trace.save(folder)
        loaded = Trace.load(folder)
        for name in ("events", "invocations", "notes"):
            pd.testing.assert_frame_equal(getattr(loaded, name), getattr(engine.trace, name))
