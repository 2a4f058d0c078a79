"""The trace holds its rows in memory as columns (core/trace/columns.py): every column reads back as
the engine recorded it, from memory and from a chunk alike; a row a column cannot hold is refused
whole; a frame read during a run is not held past the next event."""

import contextlib
import gc
import weakref

import pandas as pd
import pyarrow.parquet as pq
import pytest

from composer_lab.core import Algorithm, Engine, Event, Trace
from composer_lab.core.trace import EventRecord, InvocationRecord
from composer_lab.core.trace.queries import to_tables

EVENTS = [Event.AFTER_DATALOADER, Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BATCH_END]


class Returns(Algorithm):
    """Runs at ``events``, returning ``code``; at BEFORE_LOSS it changes the batch."""

    def __init__(self, events, code) -> None:
        self.events, self.code = frozenset(events), code

    def apply(self, event, state, logger):
        if event is Event.BEFORE_LOSS:
            state.batch_set_item(1, state.targets + 1)
        return self.code


class Fails(Returns):
    """As :class:`Returns`, raising at BATCH_END."""

    def apply(self, event, state, logger):
        if event is Event.BATCH_END:
            raise ValueError("no")
        return super().apply(event, state, logger)


class Never(Algorithm):
    """Asked at every event, runs at none: at level 'all', rows with matched False and their nulls."""

    events = frozenset(EVENTS)

    def match(self, event, state):
        return False

    def apply(self, event, state, logger):
        raise AssertionError("never runs")


def recorded_run(state) -> tuple[Trace, list, list]:
    """Two steps of varied rows (exit codes of several types, an error, changed fields, calls that
    did not run, microbatch and closure_call set), and the records the engine gave the trace."""
    state.algorithms = [Returns(EVENTS[:2], {"kept": 0.25}), Never(), Fails(EVENTS, 3),
                        Returns(EVENTS[1:], "text"), Returns(EVENTS[2:], [1, 2])]
    engine = Engine(state, trace="all")
    calls, events = [], []
    trace, add_call, add_event = engine.trace, engine.trace.add_call, engine.trace.add_event
    trace.add_call = lambda **fields: calls.append(InvocationRecord(**fields)) or add_call(**fields)
    trace.add_event = lambda **fields: events.append(EventRecord(**fields)) or add_event(**fields)
    for step in range(2):
        state.microbatch, state.closure_call = (None, 0) if step == 0 else (3, 1)
        for event in EVENTS:
            with pytest.raises(ValueError) if event is Event.BATCH_END else contextlib.nullcontext():
                engine.run_event(event)
        state.timestamp = state.timestamp.to_next_batch(samples=3)
    return trace, calls, events


def _kinds(records: list) -> list:
    return [tuple(map(type, record)) for record in records]


def test_every_column_reads_back_as_recorded_from_memory_and_from_a_chunk(state, tmp_path):
    trace, calls, events = recorded_run(state)
    assert {call.matched for call in calls} == {True, False} and any(call.error for call in calls)
    assert trace.invocation_rows == calls and _kinds(trace.invocation_rows) == _kinds(calls)
    assert trace.event_rows == events and _kinds(trace.event_rows) == _kinds(events)
    assert all(isinstance(row, InvocationRecord) for row in trace.invocation_rows)
    assert all(isinstance(row, EventRecord) for row in trace.event_rows)

    held = to_tables(trace._events.rows(), trace._calls.rows(), trace._t0)
    from_memory = trace.events, trace.invocations
    trace.spill_to(tmp_path)
    trace.spill()
    assert trace.event_rows == [] and trace.invocation_rows == []
    for table, rows in held.items():
        (chunk,) = tmp_path.glob(f"{table}-*.parquet")
        assert pq.read_table(chunk).equals(rows)  # the chunk holds the table built from the columns
    assert held["invocations"].column("epoch").to_pylist() == [call.epoch for call in calls]  # (not in the frame)
    pd.testing.assert_frame_equal(trace.events, from_memory[0])
    pd.testing.assert_frame_equal(trace.invocations, from_memory[1])

    frame = trace.invocations
    for column in ("seq", "event", "batch", "name", "kind", "matched", "closure_call"):
        assert list(frame[column].astype(object)) == [getattr(call, column) for call in calls], column
    assert list(frame.order.astype(object).where(frame.order.notna(), None)) == [call.order for call in calls]
    assert [None if pd.isna(d) else d for d in frame.duration] == [call.duration for call in calls]
    assert list(frame.exit_code) == [call.exit_code for call in calls]
    assert list(frame.changed) == [call.changed or () for call in calls]
    assert list(frame.error.astype(object).where(frame.error.notna(), None)) == [call.error for call in calls]
    ev = trace.events
    for column in ("seq", "event", "epoch", "batch", "batch_in_epoch", "closure_call"):
        assert list(ev[column].astype(object)) == [getattr(event, column) for event in events], column
    assert list(ev.microbatch.astype(object).where(ev.microbatch.notna(), None)) == [e.microbatch for e in events]
    assert list(ev.duration) == [e.t_end - e.t_start for e in events]
    assert list(ev.t_start) == [e.t_start - trace._t0 for e in events]


def _call(**fields) -> InvocationRecord:
    row = dict(seq=0, event="batch_end", batch=0, name="Never", kind="algorithm", matched=True, order=0, exit_code=None,
               duration=0.5, changed=(), error=None, closure_call=0, epoch=0)
    return InvocationRecord(**{**row, **fields})


@pytest.mark.parametrize("field, value, held", [("batch", None, "an int"), ("epoch", 2 ** 31, "an int below 2"),
                                                 ("matched", "yes", "a bool"), ("seq", 1.5, "an int")])
def test_a_row_a_column_cannot_hold_is_refused_whole(field, value, held):
    trace = Trace("all")
    assert trace.label(Never()) == "Never"
    trace.add_call(**_call()._asdict())
    trace.add_call(**_call(**{field: value})._asdict())
    trace.add_call(**_call(seq=1, order=None, matched=False, duration=None)._asdict())
    with pytest.raises(TypeError, match=f"column '{field}' holds {held}"):  # (told when the rows move into columns)
        trace.invocation_rows
    assert trace.invocation_rows == [_call(), _call(seq=1, order=None, matched=False, duration=None)]  # (only it lost)
    trace.add_event(seq=1, event="batch_end", epoch=0, batch=0, batch_in_epoch=0, microbatch=None, t_start=1.0,
                    t_end=2.0, closure_call=0)
    assert list(trace.invocations.seq) == [0, 1] and list(trace.invocations.matched) == [True, False]


def test_a_frame_read_during_a_run_is_let_go_at_the_next_event(state):
    state.algorithms = [Returns(EVENTS, None)]
    engine = Engine(state, trace="all")
    engine.run_event(Event.AFTER_DATALOADER)
    assert engine.trace.invocations is engine.trace.invocations  # (read again without new rows: the same frame)
    read = weakref.ref(engine.trace.invocations)
    engine.run_event(Event.BEFORE_LOSS)
    gc.collect()
    assert read() is None  # (an outdated frame of a whole trace is not held by it)
    assert len(engine.trace.invocations) == 2
