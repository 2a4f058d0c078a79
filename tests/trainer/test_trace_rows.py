"""The trace's rows in memory cost the garbage collector nothing: a row's fields go onto a flat list
and the tuple the engine built is freed, so a traced fit sets off no more collections for its rows
(a tuple kept per row did: one collection every 30 steps of a traced fit)."""

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
