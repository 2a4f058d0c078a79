"""The trace's rows in memory are columns (core/trace/columns.py): no object per row stays behind
(memory per step is bytes in the columns, once the last rows recorded, kept as records until
1024 of them are, have moved there). And a read of a trace that has no new rows copies none
(a copy of the rows holds up a run writing in another thread)."""

from __future__ import annotations

import collections
import gc

from composer_lab.algorithms import LabelSmoothing

from tests.trainer.helpers import make_trainer, tiny_loader


def _objects_kept(trace: str) -> tuple[int, int]:
    """How many objects the collector tracks more after a fit of 100 batches than before it (the
    collector off meanwhile), and the trace's rows in memory."""
    trainer = make_trainer(train_dataloader=tiny_loader(n=8 * 100), max_duration="1ep", trace=trace,
                           algorithms=[LabelSmoothing(0.1)], progress_bar=False)
    gc.collect()
    gc.disable()
    try:
        before = collections.Counter(map(type, gc.get_objects()))
        trainer.fit()
        rows = len(trainer.trace.event_rows) + len(trainer.trace.invocation_rows)  # (a read moves the staged rows)
        gc.enable()
        gc.collect()  # (what is garbage goes: what stays is kept)
        kept = collections.Counter(map(type, gc.get_objects())) - before
    finally:
        gc.enable()
    return sum(kept.values()), rows


def test_a_traced_fit_keeps_no_object_per_row():
    _objects_kept("all")  # (warm up: first-time imports and caches)
    traced, rows = min(_objects_kept("all") for _ in range(2))
    untraced, _ = min(_objects_kept("off") for _ in range(2))
    assert rows > 1000
    assert traced - untraced < 0.05 * rows  # (the rows are columns: no record, no object per row)


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
