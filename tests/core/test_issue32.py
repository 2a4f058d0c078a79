"""Issue 32: one ordering for plan and run, the exception path, check_writes, the trace schema."""

import gc
import warnings
import weakref

import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings, strategies as st

from composer_lab.core import Algorithm, Callback, Engine, Event, Logger, State
from composer_lab.core.callback import INTERNAL_PREFIX
from composer_lab.core.changes import UndeclaredWrite
from composer_lab.core.trace import (EVENT_COLUMNS, EVENT_SCHEMA, INVOCATION_COLUMNS, INVOCATION_SCHEMA,
                                     EventRecord, InvocationRecord)

from .helpers import Recorder

ALL = list(Event)


def inserting(algorithm):
    """A pass that adds ``algorithm`` at the front when it is not there."""
    def insert(algorithms, event):
        return [algorithm, *algorithms] if algorithm not in algorithms else algorithms
    return insert


def removing_all(algorithms, event):
    return []


def reversing(algorithms, event):
    return list(algorithms)[::-1]


def test_a_pass_inserting_into_an_empty_list_runs_as_planned(state):
    """Issue 28's leftover: the plan showed the inserted algorithm while run_event returned {}."""
    log = []
    added = Recorder("added", ALL, log)
    engine = Engine(state, Logger(state))
    engine.register_pass(inserting(added))
    assert engine.plan(Event.INIT) == [added]
    assert list(engine.run_event(Event.INIT)) == ["Recorder/init"] and log == ["added"]


@settings(max_examples=60, deadline=None)
@given(passes=st.lists(st.sampled_from(["insert", "remove", "reverse", "default"]), max_size=4),
       listens=st.lists(st.sampled_from([None, frozenset({Event.AFTER_LOSS}), frozenset({Event.BATCH_END})]),
                        max_size=4),
       says_yes=st.lists(st.booleans(), min_size=4, max_size=4),
       event=st.sampled_from([Event.AFTER_LOSS, Event.BATCH_END, Event.INIT]))
def test_plan_is_what_run_event_runs_for_any_passes(passes, listens, says_yes, event):
    log = []
    state = State(torch.nn.Linear(2, 2), "1ep")
    algorithms = []
    for i, events in enumerate(listens):
        algorithm = Recorder(f"a{i}", ALL, log)
        algorithm.events, algorithm.match = events, (lambda e, s, yes=says_yes[i]: yes)
        algorithms.append(algorithm)
    state.algorithms = algorithms
    extra = Recorder("extra", ALL, log)
    engine = Engine(state)
    named = {"insert": inserting(extra), "remove": removing_all, "reverse": reversing}
    for name in passes:
        if name != "default":
            engine.register_pass(named[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = engine.plan(event)
        engine.run_event(event)
    assert [a.name for a in planned] == log


class Raises(Algorithm):
    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        raise RuntimeError("boom")


def test_a_raising_apply_leaves_no_reference_to_the_loss_and_its_graph(state):
    state.algorithms = [Raises()]
    weight = torch.ones(3, requires_grad=True)
    state.loss = (weight * 2).sum()  # (with an autograd graph)
    loss = weakref.ref(state.loss)
    engine = Engine(state)
    with pytest.raises(RuntimeError, match="boom") as raised:
        engine.run_event(Event.AFTER_LOSS)
    state.loss = None  # (the trainer replaces it at the next step)
    gc.collect()
    assert loss() is None, "the engine (or the traceback it left) still holds the loss"
    assert raised.value is not None and engine.observer._calls == []  # the observer holds no call


class ReadsTheStep(Algorithm):
    """Undeclared, runs torch functions on the step's tensors (inside watching(), its call is watched)."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        return float(state.loss.detach() + state.outputs.detach().sum())


@pytest.mark.parametrize("algorithm", [Raises, ReadsTheStep])
def test_inside_watching_no_tensor_of_the_step_is_held_after_the_event(state, algorithm):
    """The watcher lets go of the outputs and the loss with the event (a model's logits can be
    the biggest tensor of a step: held on, they would raise the next step's peak memory)."""
    state.algorithms = [algorithm()]
    weight = torch.ones(3, requires_grad=True)
    state.outputs = weight * 2
    state.loss = state.outputs.sum()
    held = weakref.ref(state.outputs), weakref.ref(state.loss)
    engine = Engine(state)
    with engine.watching():
        try:
            engine.run_event(Event.AFTER_LOSS)
        except RuntimeError:
            pass
        state.outputs = state.loss = None  # (the trainer replaces them at the next step)
        gc.collect()
        assert [ref() for ref in held] == [None, None], "the engine still holds last step's outputs or loss"


class Liar(Algorithm):
    """Says it writes only the batch, yet writes a weight in place."""

    events = frozenset({Event.AFTER_LOSS})
    writes = frozenset({"batch"})

    def apply(self, event, state, logger):
        with torch.no_grad():
            state.model.weight.mul_(2)


class Honest(Algorithm):
    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        return None


def test_check_writes_raises_at_the_call_that_lied(state):
    state.algorithms = [Liar(), Honest()]
    with pytest.raises(UndeclaredWrite, match=r"Liar changed \['model'\] at after_loss.*Liar.writes"):
        Engine(state, check_writes=True).run_event(Event.AFTER_LOSS)


def test_check_writes_comes_from_the_environment(state, monkeypatch):
    monkeypatch.setenv("COMPOSER_LAB_CHECK_WRITES", "1")
    state.algorithms = [Liar()]
    with pytest.raises(UndeclaredWrite):
        Engine(state).run_event(Event.AFTER_LOSS)


def test_without_the_check_a_false_declaration_is_not_blamed_on_the_next_call(state):
    state.algorithms = [Liar(), Honest()]
    engine = Engine(state)
    with engine.watching():
        engine.run_event(Event.AFTER_LOSS)
    calls = engine.trace.invocations
    assert calls.set_index("name").changed.to_dict() == {"Liar": (), "Honest": ()}


# -- the schema drives the record, the frames and the chunks --------------------------------------
def test_the_schema_names_the_records_the_frames_and_the_chunks(state, tmp_path):
    state.algorithms = [Honest()]
    engine = Engine(state)
    engine.run_event(Event.AFTER_LOSS)
    assert EventRecord._fields == tuple(c.name for c in EVENT_SCHEMA if c.recorded)
    assert InvocationRecord._fields == tuple(c.name for c in INVOCATION_SCHEMA if c.recorded)
    event = EventRecord._make(engine.trace.event_rows[0])  # the engine's row, read by the schema's names
    call = InvocationRecord._make(engine.trace.invocation_rows[0])
    assert (event.seq, event.event, call.name, call.kind, call.order) == (0, "after_loss", "Honest", "algorithm", 0)
    assert tuple(engine.trace.events.columns) == EVENT_COLUMNS == tuple(c.name for c in EVENT_SCHEMA if c.dtype)
    assert tuple(engine.trace.invocations.columns) == INVOCATION_COLUMNS == tuple(
        c.name for c in INVOCATION_SCHEMA if c.dtype)
    engine.trace.save(tmp_path)
    for table, schema in (("events", EVENT_SCHEMA), ("invocations", INVOCATION_SCHEMA)):
        (chunk,) = tmp_path.glob(f"{table}-*.parquet")
        assert pq.read_schema(chunk).names == [c.name for c in schema if c.stored]


class Monitor(Callback):
    _internal = True

    def batch_end(self, state, logger):
        return None


def test_an_internal_callback_is_labelled_by_its_attribute_not_its_name(state):
    state.callbacks = [Monitor()]
    engine = Engine(state)
    engine.run_event(Event.BATCH_END)
    assert list(engine.trace.invocations.name) == [INTERNAL_PREFIX + "Monitor"]
    assert Monitor.__name__ == "Monitor"


def test_event_opening_pairs_each_after_event_with_its_before_event():
    assert Event.AFTER_LOSS.opening is Event.BEFORE_LOSS
    assert Event.EVAL_AFTER_FORWARD.opening is Event.EVAL_BEFORE_FORWARD
    assert Event.BATCH_END.opening is None and Event.BEFORE_LOSS.opening is None
