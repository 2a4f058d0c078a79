"""The trace of a long run (issue 21): bounded memory, spilled chunks, queries, masks of non-matches,
nested events."""

import shutil
import tracemalloc

import pandas as pd
import pytest
import torch

from composer_lab.core import Algorithm, Engine, Event, State, Trace
from composer_lab.trainer.checkpoint import load_checkpoint

STEP = [Event.BATCH_START, Event.AFTER_DATALOADER, Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS,
        Event.AFTER_LOSS, Event.BATCH_END]


class Every(Algorithm):
    """Matches ``event`` every ``period`` batches; returns the batch, or raises at ``fail_at``."""

    def __init__(self, event: Event, period: int, fail_at: int = -1) -> None:
        self.event, self.period, self.fail_at = event, period, fail_at

    def match(self, event, state):
        return event is self.event and state.timestamp.batch % self.period == 0

    def apply(self, event, state, logger):
        if state.timestamp.batch == self.fail_at:
            raise RuntimeError("boom")
        return state.timestamp.batch


def algorithms(fail_at: int = -1) -> list:
    return [Every(Event.AFTER_DATALOADER, 2), Every(Event.AFTER_LOSS, 3, fail_at), Every(Event.BATCH_END, 1),
            Every(Event.BATCH_END, 5)]


class Nest(Every):
    """At AFTER_LOSS every other batch, fires BEFORE_BACKWARD and AFTER_BACKWARD from its ``apply``
    (nested events, as Composer's engine allows), then returns the batch or raises at ``fail_at``."""

    def __init__(self, engine: Engine, fail_at: int = -1) -> None:
        super().__init__(Event.AFTER_LOSS, 2, fail_at)
        self.engine = engine

    def apply(self, event, state, logger):
        self.engine.run_event(Event.BEFORE_BACKWARD)
        self.engine.run_event(Event.AFTER_BACKWARD)
        return super().apply(event, state, logger)


def run(steps: int, chunk_rows: int, level: str = "all", fail_at: int = -1, watch=None, nest: bool = False,
        **trace_args) -> Trace:
    """``steps`` training steps of events through an Engine, 4 steps an epoch; ``watch(trace)`` after each
    event; with ``nest``, a :class:`Nest` (failing at ``fail_at``), one more AFTER_LOSS algorithm and one
    at BEFORE_BACKWARD, every 4 batches: a nested event where some algorithms run and the others say no."""
    state = State(torch.nn.Linear(2, 2), "1000ep")
    engine = Engine(state, trace=Trace(level, chunk_rows=chunk_rows, **trace_args))
    state.algorithms = [*algorithms(), Nest(engine, fail_at), Every(Event.AFTER_LOSS, 2),
                        Every(Event.BEFORE_BACKWARD, 4)] if nest else algorithms(fail_at)
    for step in range(steps):
        if step and step % 4 == 0:
            engine.run_event(Event.EPOCH_END)
            state.timestamp = state.timestamp.to_next_epoch()
            engine.run_event(Event.EPOCH_START)
        for event in STEP:
            engine.run_event(event)
            if watch is not None:
                watch(engine.trace)
        state.timestamp = state.timestamp.to_next_batch(samples=1)
    return engine.trace


def test_rows_in_memory_never_exceed_a_chunk():
    biggest = []
    trace = run(300, chunk_rows=100, watch=lambda t: biggest.append((len(t.event_rows), len(t.invocation_rows))))
    assert max(events for events, _ in biggest) < 100
    assert max(calls for _, calls in biggest) <= 100 * len(algorithms())
    assert len(trace.events) == trace.seq + 1 and len(trace._store.chunks) >= 2 * 20


def _peak(steps: int) -> int:
    tracemalloc.start()
    run(steps, chunk_rows=500)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_of_a_run_four_times_longer_is_not_four_times_more():
    _peak(50)  # (first-use allocations out of the way)
    short, long = _peak(400), _peak(1600)
    assert long < 1.5 * short, (short, long)


@pytest.fixture(scope="module")
def spilled():
    """A trace of several chunks and a tail, and the same run held whole in memory."""
    return run(90, chunk_rows=128), run(90, chunk_rows=1 << 20)


def test_spilled_and_unspilled_traces_read_the_same(spilled):
    chunked, whole = spilled
    assert len(chunked._store.chunks) >= 8 and not whole._store.chunks
    for name in ("events", "invocations"):
        timings = ["t_start", "duration"] if name == "events" else ["duration"]
        pd.testing.assert_frame_equal(getattr(chunked, name).drop(columns=timings),
                                      getattr(whole, name).drop(columns=timings))


def test_non_matches_come_back_as_rows_in_list_order(spilled):
    chunked, _ = spilled
    inv, names = chunked.invocations, ["Every", "Every#2", "Every#3", "Every#4"]
    for seq, rows in inv.groupby("seq"):
        ran, missed = rows[rows.matched], rows[~rows.matched]
        assert list(missed.name) == [n for n in names if n not in set(ran.name)]  # every one not run, in list order
        assert missed.order.isna().all() and (missed.kind == "algorithm").all()
        assert list(rows.matched) == sorted(rows.matched, reverse=True)  # ran first
    assert len(inv) == len(chunked.events) * len(names)


QUESTIONS = [
    dict(name="Every#2", batches=(20, 50)),
    dict(batches=(30, 31)),
    dict(epoch=3),
    dict(event="batch_end", matched=True),
    dict(event=["after_loss", "after_dataloader"], matched=False, seqs=(100, 400)),
    dict(name=["Every", "Every#4"], epoch=10, matched=False),
    dict(name="Nobody"),
]


def _filtered(frame: pd.DataFrame, events: pd.DataFrame, batches=None, seqs=None, epoch=None, event=None,
              name=None, matched=None) -> pd.DataFrame:
    """What a query should give: the whole frame, filtered in pandas."""
    keep = pd.Series(True, index=frame.index)
    if batches is not None:
        keep &= frame.batch.between(batches[0], batches[1] - 1)
    if seqs is not None:
        keep &= frame.seq.between(seqs[0], seqs[1] - 1)
    if epoch is not None:
        keep &= frame.seq.isin(events.seq[events.epoch == epoch])
    if event is not None:
        keep &= frame.event.isin([event] if isinstance(event, str) else event)
    if name is not None:
        keep &= frame.name.isin([name] if isinstance(name, str) else name)
    if matched is not None:
        keep &= frame.matched == matched
    return frame[keep].reset_index(drop=True)


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_query_gives_the_rows_of_the_filtered_frame(spilled, question):
    trace, events = spilled[0], spilled[0].events
    pd.testing.assert_frame_equal(trace.query("invocations", **question), _filtered(trace.invocations, events,
                                                                                   **question))
    if "name" not in question and "matched" not in question:
        pd.testing.assert_frame_equal(trace.query("events", **question), _filtered(events, events, **question))


def test_a_query_reads_only_the_chunks_that_can_hold_its_rows(spilled, monkeypatch):
    import pyarrow.parquet as pq

    trace, opened = spilled[0], []
    read_table = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda path, **kw: opened.append(path) or read_table(path, **kw))
    trace.query("invocations", batches=(40, 42))
    assert 0 < len(opened) <= 4 < len(trace._store.chunks)


def test_a_failure_mid_run_leaves_spilled_rows_and_tail_readable():
    with pytest.raises(RuntimeError, match="boom"):
        run(60, chunk_rows=64, fail_at=57)
    state = State(torch.nn.Linear(2, 2), "1ep")
    state.algorithms = [Every(Event.AFTER_LOSS, 1, fail_at=0)]
    engine = Engine(state, trace=Trace(chunk_rows=64))
    for _ in range(100):
        engine.run_event(Event.BATCH_START)
    with pytest.raises(RuntimeError, match="boom"):
        engine.run_event(Event.AFTER_LOSS)
    trace = engine.trace
    assert trace._store.chunks and len(trace.events) == 101
    assert trace.query("invocations", matched=True).error.tolist() == ["RuntimeError: boom"]


def test_save_and_load_with_spilled_chunks(spilled, tmp_path):
    trace = spilled[0]
    trace.meta = {"note": "x"}
    loaded = Trace.load(trace.save(tmp_path / "t"))
    again = Trace.load(loaded.save(tmp_path / "again"))
    for name in ("events", "invocations", "notes"):
        pd.testing.assert_frame_equal(getattr(loaded, name), getattr(trace, name))
        pd.testing.assert_frame_equal(getattr(again, name), getattr(trace, name))
    pd.testing.assert_frame_equal(loaded.query("invocations", epoch=5), trace.query("invocations", epoch=5))
    assert loaded.meta == {"note": "x"}


def test_a_short_loaded_trace_is_read_into_memory_and_outlives_its_folder(tmp_path):
    trace = run(20, chunk_rows=100)  # 140 events, spilled into a chunk; a run holds 100 in memory
    saved = trace.save(tmp_path / "t")
    long = Trace.load(saved)
    trace.chunk_rows = 1000  # the same rows, saved by a trace that holds 1,000 events in memory
    short = Trace.load(trace.save(tmp_path / "short"))
    shutil.rmtree(tmp_path / "short")
    for name in ("events", "invocations", "notes"):
        pd.testing.assert_frame_equal(getattr(short, name), getattr(trace, name))
    shutil.rmtree(saved)
    with pytest.raises(FileNotFoundError, match="keep that folder while you use it"):
        long.events


def test_a_checkpoint_round_trip_reads_the_same(spilled):
    trace = spilled[0]
    restored = Trace.from_checkpoint(trace.checkpoint())
    for name in ("events", "invocations", "notes"):
        pd.testing.assert_frame_equal(getattr(restored, name), getattr(trace, name))


def test_checkpoints_refer_to_chunks_and_their_trace_bytes_do_not_grow(tmp_path):
    from tests.trainer.helpers import make_trainer, tiny_loader

    trainer = make_trainer(train_dataloader=tiny_loader(64, 1), max_duration="3ep", save_folder=tmp_path,
                           save_interval="8ba", algorithms=algorithms(), trace=Trace(chunk_rows=100))
    trainer.fit()
    payloads = [load_checkpoint(path)["trace"] for path in trainer.checkpoints]
    chunks = [len(p["chunks"]) for p in payloads]
    tails = [sum(map(len, p["tail"].values())) for p in payloads]
    assert chunks[-1] >= 10 * max(chunks[0], 1) and chunks == sorted(chunks)
    assert max(tails) < 3 * min(tails) + 20_000  # the rows in memory only: bounded, whatever the run's length
    assert all((tmp_path / "trace_chunks" / c["file"]).is_file() for p in payloads for c in p["chunks"])
    resumed = make_trainer(train_dataloader=tiny_loader(64, 1), max_duration="3ep", algorithms=algorithms(),
                           load_path=trainer.checkpoints[-1])
    saved = resumed.resumed_from["trace"]
    full = trainer.trace.events
    pd.testing.assert_frame_equal(saved.events, full[full.seq <= saved.events.seq.max()])


def test_a_trace_of_given_frames_refuses_a_query_rather_than_answer_nothing(spilled):
    given = Trace.from_frames(events=spilled[0].events)
    with pytest.raises(ValueError, match="filter them in pandas"):
        given.query("events", epoch=1)


def test_a_moved_save_folder_keeps_its_checkpoints_traces(tmp_path):
    import shutil

    from tests.trainer.helpers import make_trainer, tiny_loader

    trainer = make_trainer(train_dataloader=tiny_loader(64, 1), max_duration="1ep", save_folder=tmp_path / "a",
                           save_interval="32ba", algorithms=algorithms(), trace=Trace(chunk_rows=100))
    trainer.fit()
    expected = trainer.trace.events
    shutil.move(tmp_path / "a", tmp_path / "b")
    resumed = make_trainer(train_dataloader=tiny_loader(64, 1), max_duration="1ep", algorithms=algorithms(),
                           load_path=tmp_path / "b" / trainer.checkpoints[-1].name)
    saved = resumed.resumed_from["trace"].events
    assert len(saved) > 100
    pd.testing.assert_frame_equal(saved, expected[expected.seq <= saved.seq.max()])


def test_repr_counts_the_rows_on_disk_and_in_memory(tmp_path):
    trace = run(20, chunk_rows=100)
    text = f"events={trace.seq + 1}, calls={len(trace.query('invocations', matched=True))}, notes=0"
    assert text in repr(trace) and "chunks=0" not in repr(trace)
    assert text in repr(Trace.load(trace.save(tmp_path / "t")))


NESTED_STEPS = 8
"""Steps of the nested runs: 7 events each, 9 every other one (the nested two), and the epochs' two: 66 events."""


def _same_rows(chunked: Trace, whole: Trace, **question) -> None:
    """The two traces give the same rows for ``question`` (both tables), timings aside."""
    for table, timings in (("events", ["t_start", "duration"]), ("invocations", ["duration"])):
        asked = question if table == "invocations" else {k: v for k, v in question.items() if k != "matched"}
        pd.testing.assert_frame_equal(chunked.query(table, **asked).drop(columns=timings),
                                      whole.query(table, **asked).drop(columns=timings))


@pytest.fixture(scope="module")
def nested_whole():
    return run(NESTED_STEPS, chunk_rows=1 << 20, nest=True)


@pytest.mark.parametrize("chunk_rows", range(1, 12))  # the spill lands on every event of a step, nested ones too
def test_a_spill_inside_a_nested_event_reads_as_the_run_held_in_memory(nested_whole, chunk_rows):
    chunked = run(NESTED_STEPS, chunk_rows=chunk_rows, nest=True)
    assert chunked._store.chunks and (nested_whole.events.event == "before_backward").sum() == NESTED_STEPS // 2
    for question in ({}, dict(epoch=1, matched=True), dict(seqs=(20, 35), matched=False),
                     dict(batches=(2, 5), name="Nest")):
        _same_rows(chunked, nested_whole, **question)


def _failed_run(chunk_rows: int) -> Trace:
    """The trace of a nested run whose Nest raises at batch 6, after its nested events."""
    seen = []
    with pytest.raises(RuntimeError, match="boom"):
        run(NESTED_STEPS, chunk_rows=chunk_rows, nest=True, fail_at=6, watch=seen.append)
    return seen[0]


@pytest.mark.parametrize("chunk_rows", [4, 7])
def test_a_failure_after_a_spill_in_a_nested_event_leaves_the_trace_readable(chunk_rows):
    chunked, whole = _failed_run(chunk_rows), _failed_run(1 << 20)
    assert chunked._store.chunks and not whole._store.chunks
    _same_rows(chunked, whole)
    _same_rows(chunked, whole, matched=False)
    failed = chunked.query("invocations", name="Nest", event="after_loss", batches=(6, 7))
    assert failed.error.tolist() == ["RuntimeError: boom"] and failed.matched.all()


@pytest.mark.parametrize("chunk_rows", [4, 7])
def test_a_nested_run_saved_and_loaded_reads_the_same(nested_whole, chunk_rows, tmp_path):
    chunked = run(NESTED_STEPS, chunk_rows=chunk_rows, nest=True)
    loaded = Trace.load(chunked.save(tmp_path / "t"))
    assert loaded._store.chunks  # (longer than a chunk: read from its chunk files)
    _same_rows(loaded, nested_whole)
    _same_rows(loaded, nested_whole, matched=False, epoch=1)
