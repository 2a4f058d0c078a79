"""Reading a trainer's trace and metrics from another thread while it trains (the lab's run panel
trains in a thread while a notebook cell reads): every read succeeds and is a consistent snapshot,
whole rows up to some event, while the trace spills chunks and the logger flushes."""

from __future__ import annotations

import sys
import threading

import pandas as pd
import torch
from torch import nn

from composer_lab import Algorithm, Event, Trainer
from composer_lab.core import Trace

STEPS = 100
HALF = STEPS // 2


class Every(Algorithm):
    """Matches ``event`` every ``period`` batches (at level 'all' the other batches are non-matches)
    and logs the batch it ran at."""

    def __init__(self, event: Event, period: int) -> None:
        self.event, self.period = event, period

    def match(self, event, state) -> bool:
        return event is self.event and state.timestamp.batch % self.period == 0

    def apply(self, event, state, logger) -> int:
        logger.log_metrics({f"test/{type(self).__name__}/{event.value}": float(state.timestamp.batch)})
        return state.timestamp.batch


class Paced(Algorithm):
    """At every ``period``-th BATCH_END, waits (a minute at most) for the reader's next read to
    begin, so that reads overlap the whole fit however fast it runs."""

    def __init__(self, period: int) -> None:
        self.period, self.reads = period, threading.Semaphore(0)

    def match(self, event, state) -> bool:
        return event is Event.BATCH_END and state.timestamp.batch % self.period == 0

    def apply(self, event, state, logger) -> None:
        self.reads.acquire(timeout=60)


def trainer(pace: Paced) -> Trainer:
    torch.manual_seed(0)
    data = [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(10)]
    algorithms = [Every(Event.AFTER_DATALOADER, 2), Every(Event.AFTER_LOSS, 3), Every(Event.BATCH_END, 1),
                  Every(Event.BATCH_END, 5), pace]
    return Trainer(nn.Linear(6, 3), data, f"{STEPS}ba", loss_fn=nn.functional.cross_entropy, device="cpu",
                   algorithms=algorithms, trace=Trace("all", chunk_rows=37), progress_bar=False, flush_interval=3)


FRAMES = ("invocations", "ran", "events", "second half", "metrics")


def read(trainer: Trainer) -> dict:
    """Everything a notebook cell may read while the fit runs, the calls before the events."""
    trace = trainer.trace
    return {"invocations": trace.invocations, "ran": trace.query("invocations", matched=True),
            "events": trace.events, "second half": trace.query("events", batches=(HALF, None)),
            "metrics": trainer.metrics, "repr": repr(trace)}


def check_whole(snapshot: dict) -> None:
    """Every call read belongs to an event read after it or to the one event in flight then."""
    events, calls = snapshot["events"], snapshot["invocations"]
    assert list(events["seq"]) == list(range(len(events))), "events are seq 0, 1, ... without a gap or a repeat"
    in_flight = set(calls["seq"]) - set(events["seq"])
    assert in_flight <= {len(events)}, f"calls of events neither read nor in flight: {in_flight}"
    assert snapshot["second half"]["batch"].ge(HALF).all()


def test_reads_from_another_thread_during_a_fit_are_whole_snapshots_that_only_grow():
    pace = Paced(10)
    trained, failures, snapshots = trainer(pace), [], []
    worker = threading.Thread(target=lambda: _catching(trained.fit, failures), name="fit")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often: a read meets the writes mid-row and mid-spill
    try:
        worker.start()
        while worker.is_alive():
            pace.reads.release()
            snapshot = _catching(lambda: read(trained), failures)
            if snapshot is not None:
                check_whole(snapshot)
                snapshots.append(snapshot)
    finally:
        sys.setswitchinterval(interval)
        worker.join()
    assert not failures, f"{len(failures)} reads (or the fit) raised, the first: {failures[0]!r}"
    final = read(trained)
    assert len(final["events"]) == trained.trace.seq + 1 and "chunks=0" not in final["repr"]  # (it spilled)
    assert len(snapshots) >= STEPS // pace.period, "fewer reads than the fit waited for"
    for before, after in zip(snapshots, snapshots[1:] + [final]):
        for name in FRAMES:
            assert len(after[name]) >= len(before[name]), f"{name}: {len(before[name])} rows, then {len(after[name])}"
    for snapshot in snapshots:
        for name in FRAMES:
            start_of_final(snapshot[name], final[name])


def start_of_final(frame: pd.DataFrame, final: pd.DataFrame) -> None:
    """A frame read during the fit is the first rows of the one read after it: the events up to
    some event, each with all its calls (ran, then not matched) but the last one, which may be in
    flight: the calls it made so far, in order; the metric rows flushed by then."""
    pd.testing.assert_frame_equal(frame, final.iloc[:len(frame)], check_categorical=False)


def _catching(fn, failures: list):
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 (every failure is reported by the test)
        failures.append(err)
        return None
