"""The trace's rows in memory cost the garbage collector nothing: a row's fields go onto a flat list
and the tuple the engine built is freed, so a traced fit sets off no more collections for its rows
(a tuple kept per row did: one collection every 30 steps of a traced fit). And a read of a trace
that has no new rows copies none (a copy of the flat lists holds up a run writing in another thread)."""

from __future__ import annotations

import gc

from composer_lab.algorithms import LabelSmoothing

from tests.trainer.helpers import make_trainer, tiny_loader


def _objects_for_the_collector(trace: str) -> tuple[int, int]:
    """What a fit of 100 batches adds to the collector's count of young objects (allocations less
    deallocations: a collection runs at 700), and the trace's rows in memory."""
    trainer = make_trainer(train_dataloader=tiny_loader(n=8 * 100), max_duration="1ep", trace=trace,
                           algorithms=[LabelSmoothing(0.1)], progress_bar=False)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        trainer.fit()
        added = gc.get_count()[0] - before
    finally:
        gc.enable()
    return added, len(trainer.trace.event_rows) + len(trainer.trace.invocation_rows)


def test_a_traced_fit_keeps_no_object_per_row():
    _objects_for_the_collector("all")  # (warm up: first-time imports and caches)
    # (the least of two fits each: another thread's objects, counted too, can only add)
    traced, rows = min(_objects_for_the_collector("all") for _ in range(2))
    untraced, _ = min(_objects_for_the_collector("off") for _ in range(2))
    assert rows > 1000
    assert traced - untraced < rows  # (about half a row's worth: the watcher's; a kept tuple per row adds one more)


def test_a_read_without_new_rows_copies_none(monkeypatch):
    trainer = make_trainer(max_duration="3ba", trace="all")
    trainer.fit()
    trace, snapshots = trainer.trace, []
    taken = trace._snapshot
    monkeypatch.setattr(trace, "_snapshot", lambda: snapshots.append(1) or taken())
    first = trace.events
    assert trace.events is first and trace.invocations is trace.invocations and len(snapshots) == 2
    trainer.fit(duration="1ba")  # new rows: read again
    assert len(trace.events) > len(first) and len(snapshots) == 3
