"""Property-based tests: the ordering rules of the passes on any list of algorithms and any
event, ``plan`` against what ``run_event`` then does, durations round-tripping through their
strings, and traces round-tripping through ``save`` / ``load``.

The algorithm lists hold instances of the real algorithm classes (several of one class, the
same instance twice, Selective Backprop with RandomSubset, FusedLayerNorm with
GatedLinearUnits, MixUp with CutMix), so the passes see exactly what they would see in a run;
only ``events``, ``match`` and ``apply`` are replaced per instance (:func:`spy`), so the
algorithms listen and say yes at drawn events and record themselves instead of training.
"""

from __future__ import annotations

import functools
import re
import tempfile
import warnings
from collections import Counter
from typing import Any, Optional, Sequence

import pandas as pd
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_lab.algorithms import ALGORITHMS, CutMix, FusedLayerNorm, LowPrecisionLayerNorm, MixUp
from composer_lab.algorithms.batch_selection import BatchSelection
from composer_lab.core import (DEFAULT_PASSES, Algorithm, Callback, Engine, Event, State, Time, TimeUnit,
                               Trace, ensure_time)

BEFORE_AFTER = {
    Event.BEFORE_LOAD: Event.AFTER_LOAD,
    Event.BEFORE_DATALOADER: Event.AFTER_DATALOADER,
    Event.BEFORE_TRAIN_BATCH: Event.AFTER_TRAIN_BATCH,
    Event.BEFORE_FORWARD: Event.AFTER_FORWARD,
    Event.BEFORE_LOSS: Event.AFTER_LOSS,
    Event.BEFORE_BACKWARD: Event.AFTER_BACKWARD,
    Event.EVAL_BEFORE_ALL: Event.EVAL_AFTER_ALL,
    Event.EVAL_BEFORE_FORWARD: Event.EVAL_AFTER_FORWARD,
    Event.PREDICT_BEFORE_FORWARD: Event.PREDICT_AFTER_FORWARD,
}
"""Each before-event and the after-event that closes it; on those after-events the passes run
the algorithms that are not pinned in the reverse of their before-event order."""

EVENTS = st.sampled_from(list(Event))
NAMES = st.sampled_from(sorted(ALGORITHMS)) | st.sampled_from(
    ["selective_backprop", "random_subset", "fused_layernorm", "gated_linear_units", "mixup", "cutmix"])
"""Any algorithm, half the time one that a pass treats specially."""
EVENT_SETS = st.frozensets(EVENTS)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spy(algorithm: Algorithm, listens: Optional[frozenset], says_yes: frozenset, log: list) -> Algorithm:
    """``algorithm``, of a subclass of its class with the same name (its ``events`` may be a
    property), listening at ``listens`` (None: every event), matching at ``says_yes`` and
    appending itself to ``log`` when applied."""
    cls = type(algorithm)
    algorithm.__class__ = type(cls.__name__, (cls,), {"events": listens})
    algorithm.match = lambda event, state: event in says_yes
    algorithm.apply = lambda event, state, logger: log.append(algorithm)
    return algorithm


@st.composite
def algorithm_lists(draw: Any, max_size: int = 8) -> tuple[list[Algorithm], list]:
    """Spied instances of any algorithm classes, possibly the same instance more than once,
    and the log they append to when applied."""
    log: list = []
    specs = draw(st.lists(st.tuples(NAMES, st.none() | EVENT_SETS, EVENT_SETS), max_size=max_size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FusedLayerNorm without Apex
        algorithms = [spy(ALGORITHMS[name](), listens, yes, log) for name, listens, yes in specs]
    if algorithms:
        repeats = draw(st.lists(st.sampled_from(algorithms), max_size=2))
        algorithms += repeats
        algorithms = draw(st.permutations(algorithms))
    return list(algorithms), log


def is_pinned(algorithm: Algorithm) -> bool:
    """Batch selectors (SelectiveBackprop, RandomSubset), FusedLayerNorm and LowPrecisionLayerNorm:
    the passes pin them."""
    return isinstance(algorithm, (BatchSelection, FusedLayerNorm, LowPrecisionLayerNorm))


def new_engine(algorithms: list, trace: str = "all") -> Engine:
    state = State(torch.nn.Linear(2, 2), "4ba", algorithms=algorithms)
    state.batch = (torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))
    return Engine(state, trace=trace)


def planned(engine: Engine, event: Event, algorithms: Optional[list] = None, assume_matched: bool = False) -> list:
    """The engine's plan, with the interpolation warning silenced (it has its own test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return engine.plan(event, algorithms, assume_matched=assume_matched)


def same_items(a: Sequence, b: Sequence) -> bool:
    """Whether ``a`` is a permutation of ``b``, by identity, counting repeats."""
    return Counter(map(id, a)) == Counter(map(id, b))


def in_order(items: Sequence, keep: set) -> list:
    """The items whose id is in ``keep``, in order."""
    return [a for a in items if id(a) in keep]


# -- the passes ---------------------------------------------------------------------------------
def test_before_after_pairs_are_every_before_and_after_event():
    assert {e for e in Event if "before_" in e.value} == set(BEFORE_AFTER)
    assert {e for e in Event if "after_" in e.value} == set(BEFORE_AFTER.values())
    assert all(a.value == b.value.replace("before_", "after_") for b, a in BEFORE_AFTER.items())


# Each property is checked at every one of the 37 events (or every pair) for each drawn list.
@SETTINGS
@given(algorithm_lists())
def test_every_pass_and_the_plan_return_a_permutation(algos_log):
    algorithms, _ = algos_log
    engine = new_engine(algorithms)
    for event in Event:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for algorithm_pass in DEFAULT_PASSES:
                assert same_items(algorithm_pass(list(algorithms), event), algorithms), algorithm_pass.__name__
        assert same_items(planned(engine, event, assume_matched=True), algorithms), event


@SETTINGS
@given(algorithm_lists())
def test_selective_backprop_first_and_fused_layernorm_last(algos_log):
    algorithms, _ = algos_log
    engine = new_engine(algorithms)
    selectors = sum(isinstance(a, BatchSelection) for a in algorithms)
    fused = sum(isinstance(a, FusedLayerNorm) for a in algorithms)
    low = sum(isinstance(a, LowPrecisionLayerNorm) for a in algorithms)
    for event in Event:
        order = planned(engine, event, assume_matched=True)
        assert all(isinstance(a, BatchSelection) for a in order[:selectors]), event
        assert all(isinstance(a, FusedLayerNorm) for a in order[len(order) - low - fused:len(order) - low]), event
        assert all(isinstance(a, LowPrecisionLayerNorm) for a in order[len(order) - low:]), event


@SETTINGS
@given(algorithm_lists())
def test_after_events_reverse_the_before_event_order_of_the_others(algos_log):
    algorithms, _ = algos_log
    engine = new_engine(algorithms)
    others = {id(a) for a in algorithms if not is_pinned(a)}
    for before, after in BEFORE_AFTER.items():
        on_before = in_order(planned(engine, before, assume_matched=True), others)
        assert in_order(planned(engine, after, assume_matched=True), others) == on_before[::-1], after
        # Among the algorithms that match both events, too.
        both = others & {id(a) for a in planned(engine, before)} & {id(a) for a in planned(engine, after)}
        assert in_order(planned(engine, after), both) == in_order(planned(engine, before), both)[::-1], after


@SETTINGS
@given(algorithm_lists())
def test_other_events_keep_the_list_order_of_the_others(algos_log):
    algorithms, _ = algos_log
    engine = new_engine(algorithms)
    others = {id(a) for a in algorithms if not is_pinned(a)}
    for event in set(Event) - set(BEFORE_AFTER.values()):
        assert in_order(planned(engine, event, assume_matched=True), others) == in_order(algorithms, others), event


@SETTINGS
@given(algorithm_lists())
def test_warns_exactly_when_two_mixing_algorithms_run(algos_log):
    algorithms, _ = algos_log
    engine = new_engine(algorithms)
    mixers = sum(isinstance(a, (MixUp, CutMix)) for a in algorithms)
    for event in Event:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.plan(event, assume_matched=True)
        assert any("mix examples" in str(w.message) for w in caught) == (mixers >= 2), event


# -- plan against run_event -----------------------------------------------------------------------
@st.composite
def event_steps(draw: Any, algorithms: list) -> list[tuple[Event, list, list]]:
    """Events to fire, each with the pass list and the algorithms list in force (a lab may
    switch either between any two events)."""
    passes = st.lists(st.sampled_from(DEFAULT_PASSES), unique=True)
    lists = st.lists(st.sampled_from(algorithms), unique_by=id) if algorithms else st.just([])
    return draw(st.lists(st.tuples(EVENTS, passes, st.one_of(st.just(algorithms), lists)), min_size=1, max_size=6))


def ran_in_order(trace: Trace) -> dict[int, list[str]]:
    """For each event's ``seq``, the names of the algorithms that ran, in the trace's ``order``."""
    calls = trace.invocations
    ran = calls[(calls["kind"] == "algorithm") & calls["matched"]].sort_values(["seq", "order"])
    return {seq: group["name"].astype(str).tolist() for seq, group in ran.groupby("seq")}


@SETTINGS
@given(st.data(), algorithm_lists(), st.sampled_from(["all", "ran"]))
def test_plan_equals_what_run_event_then_does(data, algos_log, level):
    algorithms, log = algos_log
    engine = new_engine(algorithms, level)
    plans = {}
    for event, passes, enabled in data.draw(event_steps(algorithms)):
        engine.passes = passes
        engine.state.algorithms = list(enabled)
        plan = planned(engine, event)
        log.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine.run_event(event)
        assert [id(a) for a in log] == [id(a) for a in plan]
        if plan:
            plans[engine.trace.seq] = [engine.trace.label(a) for a in plan]
    assert ran_in_order(engine.trace) == plans


# -- durations ----------------------------------------------------------------------------------
COUNTS = st.builds(Time, st.integers(0, 10**12), st.sampled_from([TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE]))
FRACTIONS = st.builds(Time, st.floats(0, 1) | st.just(-0.0), st.just(TimeUnit.DURATION))


@st.composite
def duration_strings(draw: Any) -> tuple[str, float]:
    """A string ``from_timestring`` accepts (leading zeros, trailing zeros, surrounding blanks)
    and the number it holds."""
    unit = draw(st.sampled_from(["ep", "ba", "sp", "dur"]))
    if unit == "dur":
        number = format(draw(st.decimals(0, 1, allow_nan=False, places=draw(st.integers(0, 8)))), "f")
    else:
        number = "0" * draw(st.integers(0, 2)) + str(draw(st.integers(0, 10**12)))
    pad = st.sampled_from(["", " ", "\t"])
    return f"{draw(pad)}{number}{unit}{draw(pad)}", float(number)


@SETTINGS
@given(st.one_of(COUNTS, FRACTIONS))
def test_a_time_round_trips_through_its_string(time):
    text = str(time)
    assert re.fullmatch(r"\d+(\.\d+)?(ep|ba|sp|dur)", text)  # positional notation, no exponent
    assert Time.from_timestring(text) == time
    assert ensure_time(text) == time


@SETTINGS
@given(duration_strings())
def test_a_duration_string_round_trips(text_number):
    text, number = text_number
    time = Time.from_timestring(text)
    assert time.value == number
    assert Time.from_timestring(str(time)) == time
    assert str(Time.from_timestring(str(time))) == str(time)


# -- the trace ----------------------------------------------------------------------------------
class Failing(Exception):
    """Raised by a traced call on purpose."""


class Watcher(Callback):
    """A callback that listens at drawn events."""

    def __init__(self, listens: frozenset) -> None:
        for event in listens:  # an instance attribute per event method: it listens there only
            setattr(self, event.value, functools.partial(self.record, event))

    @staticmethod
    def record(event: Event, state: State, logger: Any) -> None:
        state.outputs = event.value


def act(algorithm: Algorithm, outcome: str) -> None:
    """Make a spied ``algorithm`` return an exit code, change the loss or batch, or raise."""
    def apply(event: Event, state: State, logger: Any) -> Optional[int]:
        if outcome == "raise":
            raise Failing(f"{type(algorithm).__name__} failed at {event.value} ✗")
        if outcome == "loss":
            state.loss = torch.tensor(1.0)
        elif outcome == "batch":
            state.batch[0].add_(1)
        return 3 if outcome == "code" else None

    algorithm.apply = apply


TRACED_STEP = st.tuples(EVENTS, st.none() | st.integers(0, 3), st.integers(0, 2), st.none() | st.text(max_size=12))
"""An event, the microbatch, how many batches to advance first, and a note to leave (if any)."""


def traced_run(algorithms: list, callbacks: list, level: str, steps: list) -> Trace:
    """Fire ``steps`` with the trace at ``level``; failing calls are recorded and go on."""
    engine = new_engine(algorithms, level)
    engine.state.callbacks = callbacks
    for event, microbatch, advance, note in steps:
        for _ in range(advance):
            engine.state.timestamp = engine.state.timestamp.to_next_batch(2)
        engine.state.microbatch = microbatch
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                engine.run_event(event)
        except Failing:
            pass
        if note is not None:
            engine.trace.note("hparam", note, engine.state.timestamp if advance else None)
    return engine.trace


def saved_and_loaded(trace: Trace, folder: str) -> Trace:
    trace.save(folder)
    return Trace.load(folder)  # (it reads its chunks when asked: the folder must outlive it)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(algorithm_lists(max_size=5), st.lists(st.sampled_from(["none", "code", "loss", "batch", "raise"]), max_size=5),
       st.lists(EVENT_SETS, max_size=2), st.sampled_from(["all", "ran", "off"]), st.lists(TRACED_STEP, max_size=10),
       st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
def test_a_trace_survives_save_and_load_unchanged(algos_log, outcomes, listens, level, steps, meta):
    algorithms, _ = algos_log
    for algorithm, outcome in zip(algorithms, outcomes):
        act(algorithm, outcome)
    trace = traced_run(algorithms, [Watcher(events) for events in listens], level, steps)
    trace.meta = meta
    with tempfile.TemporaryDirectory() as folder:
        loaded = saved_and_loaded(trace, f"{folder}/once")
        assert (loaded.level, loaded.meta) == (trace.level, trace.meta)
        again = saved_and_loaded(loaded, f"{folder}/twice")
        for name in ("events", "invocations", "notes"):
            pd.testing.assert_frame_equal(getattr(loaded, name), getattr(trace, name))
            pd.testing.assert_frame_equal(getattr(again, name), getattr(trace, name))

