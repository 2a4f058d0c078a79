"""RankTraces in one process: the frames and bounded queries across ranks, what rank 0 keeps of
the chunks it receives (as distributed.gather_traces drives it), and run folders. The 2-rank
gathers themselves run in test_distributed.py."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import pytest

from composer_lab.core.trace import Trace
from composer_lab.trainer import Run
from composer_lab.trainer.rank_traces import TRACE_FRAMES, RankTraces

from tests.trainer.helpers import make_trainer


def _chunked(chunk_rows: int = 16, **kwargs):
    """A trainer whose trace spills every ``chunk_rows`` events (2 epochs: several chunks)."""
    trainer = make_trainer(trace=Trace("all", chunk_rows=chunk_rows), **kwargs)
    trainer.fit()
    return trainer


def _rank_rows(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    return frame[frame["rank"] == rank].drop(columns="rank").reset_index(drop=True)


def _assert_holds(traces: RankTraces, own: dict) -> None:
    """``traces`` holds, for each rank of ``own``, that trace's frames."""
    for name in TRACE_FRAMES:
        assert traces[name].columns[0] == "rank"
        for rank, trace in own.items():
            pd.testing.assert_frame_equal(_rank_rows(traces[name], rank), getattr(trace, name),
                                          check_categorical=False)


def _gather(trace: Trace, rank: int, into: RankTraces, received: Optional[int] = None) -> list:
    """What distributed.gather_traces does on rank 0 for ``rank``: receive the chunk files ``into``
    lacks (only the first ``received`` of them: a gather that fails there), then the snapshot."""
    snapshot = trace.checkpoint()
    lacking = into.lacks(rank, [chunk["file"] for chunk in snapshot["chunks"]])
    for name in lacking[:received]:
        into.receive(rank, name, (Path(snapshot["folder"]) / name).read_bytes())
    if received is None:
        into.update(rank, {**snapshot, "folder": None})
    return lacking


def test_frames_and_queries_across_ranks():
    trainers = [_chunked(), _chunked(progress_bar=True)]
    traces = RankTraces({r: t.trace for r, t in enumerate(trainers)})
    _assert_holds(traces, {r: t.trace for r, t in enumerate(trainers)})
    assert traces["events"] is traces["events"]  # built once
    calls = traces["invocations"]
    asked = traces.query("invocations", rank=1, batches=(2, 4), matched=True)
    expected = calls[(calls["rank"] == 1) & calls["batch"].between(2, 3) & calls["matched"]]
    pd.testing.assert_frame_equal(asked, expected.reset_index(drop=True), check_categorical=False)
    assert set(asked["name"]) == {"ProgressBar"}
    assert set(traces.query("events", event="fit_end")["rank"]) == {0, 1}


@pytest.mark.parametrize("call,error,message", [
    (lambda t: t["metrics"], KeyError, "hold the frames"),
    (lambda t: t.query("notes"), ValueError, "filter rank_traces\\['notes'\\] in pandas"),
    (lambda t: t.query("events", rank=[0, 3]), ValueError, r"no trace of rank \[3\].*ranks \[0\]"),
])
def test_rank_traces_name_what_they_cannot_answer(call, error, message):
    with pytest.raises(error, match=message):
        call(RankTraces.of(Trace(), 0))


def test_rank_0_receives_only_new_chunks_and_keeps_them_in_its_folder(tmp_path):
    trainer = _chunked()
    gathered = RankTraces(folder=tmp_path)
    first = _gather(trainer.trace, 1, gathered)
    _assert_holds(gathered, {1: trainer.trace})
    kept = gathered["events"]
    trainer.fit("1ep")
    second = _gather(trainer.trace, 1, gathered)
    assert second and not set(first) & set(second)  # only the chunks spilled since
    assert gathered["events"] is not kept and len(gathered["events"]) > len(kept)
    _assert_holds(gathered, {1: trainer.trace})
    chunks = len(trainer.trace.checkpoint()["chunks"])
    assert len(list((tmp_path / "rank1").glob("*-*.parquet"))) <= chunks + 2  # the last rows in memory, once

    before = {name: gathered[name] for name in TRACE_FRAMES}
    trainer.fit("1ep")
    assert _gather(trainer.trace, 1, gathered, received=1)  # fails after one chunk: nothing replaced
    for traces in (gathered, RankTraces.load(tmp_path)):  # in memory, and what a crash leaves on disk
        for name in TRACE_FRAMES:
            pd.testing.assert_frame_equal(traces[name], before[name])
    _gather(trainer.trace, 1, gathered)  # the next gather completes it
    _assert_holds(gathered, {1: trainer.trace})


def test_run_folders_keep_rank_traces_as_chunks(tmp_path):
    trainers = [_chunked(), _chunked(seed=1)]
    run = trainers[0].to_run()
    run.rank_traces = RankTraces({r: t.trace for r, t in enumerate(trainers)})
    run.save(tmp_path / "run")
    assert len(list((tmp_path / "run" / "ranks" / "rank1").glob("*.parquet"))) > 4
    loaded = Run.load(tmp_path / "run")
    _assert_holds(loaded.rank_traces, {r: t.trace for r, t in enumerate(trainers)})
    loaded.save(tmp_path / "run")  # over the folder it reads from
    _assert_holds(Run.load(tmp_path / "run").rank_traces, {r: t.trace for r, t in enumerate(trainers)})
    pd.testing.assert_frame_equal(loaded.rank_traces.query("events", rank=1, batches=(1, 3)),
                                  run.rank_traces.query("events", rank=1, batches=(1, 3)))


def test_run_folders_of_rank_frames_still_load(tmp_path):
    trainer = _chunked(progress_bar=True)
    run = trainer.to_run()
    run.rank_traces = dict(RankTraces.of(trainer.trace, 0))  # as Run.save wrote them before
    run.save(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run" / "ranks").iterdir()) == [
        "events.parquet", "invocations.parquet", "notes.parquet"]
    loaded = Run.load(tmp_path / "run").rank_traces
    for name in TRACE_FRAMES:
        pd.testing.assert_frame_equal(loaded[name], run.rank_traces[name], check_categorical=False)
