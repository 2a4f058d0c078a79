"""Checkpoints of long runs (issue 21): they refer to the metric and trace chunks instead of
copying the rows, so their size does not grow with the batches trained, and a resume rebuilds
the metrics from exactly the chunks up to its checkpoint."""

from __future__ import annotations

import io
import shutil

import pandas as pd
import pytest
import torch

from composer_lab import Callback, Trace
from composer_lab.core.trace.storage import table_from_bytes
from composer_lab.trainer import checkpoint as checkpoint_module
from composer_lab.trainer import CheckpointError, load_checkpoint

from tests.trainer.helpers import make_trainer, tiny_loader


class LogsAtInit(Callback):
    """Logs one metric at INIT, as a callback reporting its setup would."""

    def init(self, state, logger) -> None:
        logger.log_metrics({"setup/params": sum(p.numel() for p in state.model.parameters())})


class MetricsAtCheckpoints(Callback):
    """The logger's metrics frame at each BATCH_CHECKPOINT, by batch: what a checkpoint there holds."""

    def __init__(self) -> None:
        self.frames: dict[int, pd.DataFrame] = {}

    def batch_checkpoint(self, state, logger) -> None:
        self.frames[state.timestamp.batch] = logger.metrics.copy()


def _trainer(**kwargs):
    args = dict(train_dataloader=tiny_loader(80, 2), callbacks=[LogsAtInit()], progress_bar=False)
    return make_trainer(**{**args, **kwargs})


def _plain(frame: pd.DataFrame, deterministic: bool = False) -> pd.DataFrame:
    """``frame`` comparable across runs: categories as text; with ``deterministic``, without the
    throughput rows (wall-clock)."""
    frame = frame[frame["name"] != "throughput/samples_per_sec"] if deterministic else frame
    return frame.astype({"phase": str, "name": str}).reset_index(drop=True)


def _size(value) -> int:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return len(buffer.getvalue())


def test_checkpoint_bytes_do_not_grow_with_the_batches_trained(tmp_path):
    """Besides one reference per trace chunk and the trace's rows in memory (fewer than
    chunk_rows events), a checkpoint holds as many bytes after 400 batches as after 40."""
    sizes = {}
    for batches in (40, 400):
        trainer = _trainer(trace=Trace("all", chunk_rows=64), max_duration=f"{batches}ba",
                           save_folder=tmp_path / str(batches), save_interval=f"{batches}ba")
        trainer.fit()
        saved = load_checkpoint(trainer.checkpoints[-1])
        metrics, trace = saved["metrics"], saved["trace"]
        assert len(metrics["chunks"]) == 1 and metrics["tail"] == {}  # the rows are in the chunk: one checkpoint
        assert metrics["chunks"][0]["rows"] > 2 * batches
        assert table_from_bytes(trace["tail"]["events"]).num_rows < 64 < len(trainer.trace.events)
        sizes[batches] = _size({**saved, "trace": {**trace, "chunks": [], "tail": {}}})
    assert sizes[400] <= sizes[40] + 64, sizes


def test_resume_after_several_checkpoints_has_the_metrics_of_the_uninterrupted_run(tmp_path):
    full, first, second = MetricsAtCheckpoints(), MetricsAtCheckpoints(), MetricsAtCheckpoints()
    _trainer(callbacks=[LogsAtInit(), full], max_duration="12ba").fit()
    _trainer(callbacks=[LogsAtInit(), first], max_duration="6ba", save_folder=tmp_path, save_interval="2ba").fit()
    # resumed at batch 4: the first run's rows of batches 4 and 5 belong to an abandoned continuation
    resumed = _trainer(callbacks=[LogsAtInit(), second], load_path=tmp_path / "ep0-ba4.pt", max_duration="12ba",
                       save_folder=tmp_path, save_interval="2ba")
    pd.testing.assert_frame_equal(_plain(resumed.metrics), _plain(first.frames[4]))
    resumed.fit()
    assert len(load_checkpoint(tmp_path / "ep0-ba10.pt")["metrics"]["chunks"]) == 5  # ba2, ba4, then ba6-ba10
    again = _trainer(load_path=tmp_path / "ep0-ba10.pt", max_duration="12ba")
    pd.testing.assert_frame_equal(_plain(again.metrics), _plain(second.frames[10]))
    pd.testing.assert_frame_equal(_plain(again.metrics, True), _plain(full.frames[10], True))


def test_checkpoint_without_save_folder_carries_the_rows(tmp_path):
    first = _trainer(max_duration="4ba")
    first.fit()
    checkpoint_module.save_checkpoint(first.checkpoint_payload(), tmp_path / "ckpt.pt")
    saved = load_checkpoint(tmp_path / "ckpt.pt")["metrics"]
    assert saved["chunks"] == [] and set(saved["tail"]) == {"metrics"}
    resumed = _trainer(load_path=tmp_path / "ckpt.pt", max_duration="6ba")
    pd.testing.assert_frame_equal(_plain(resumed.metrics), _plain(first.metrics))


def test_older_checkpoint_with_the_metrics_frame_loads_and_goes_on_in_chunks(tmp_path):
    first = _trainer(max_duration="4ba")
    first.fit()
    payload = {**first.checkpoint_payload(), "metrics": checkpoint_module.frame_to_bytes(first.metrics)}
    checkpoint_module.save_checkpoint(payload, tmp_path / "old.pt")
    watch = MetricsAtCheckpoints()
    resumed = _trainer(callbacks=[LogsAtInit(), watch], load_path=tmp_path / "old.pt", max_duration="6ba",
                       save_folder=tmp_path / "run", save_interval="2ba")
    pd.testing.assert_frame_equal(_plain(resumed.metrics), _plain(first.metrics))
    resumed.fit()
    again = _trainer(load_path=tmp_path / "run" / "ep0-ba6.pt", max_duration="8ba")
    pd.testing.assert_frame_equal(_plain(again.metrics), _plain(watch.frames[6]))


def test_trace_spills_into_the_save_folder_before_any_checkpoint(tmp_path):
    trainer = _trainer(trace=Trace("all", chunk_rows=64), max_duration="20ba", save_folder=tmp_path,
                       save_interval="1000ba")
    trainer.fit()
    assert not trainer.checkpoints and any((tmp_path / "trace_chunks").glob("*.parquet"))


def test_checkpoint_without_its_metric_chunks_is_a_clear_error(tmp_path):
    _trainer(max_duration="2ba", save_folder=tmp_path / "run", save_interval="2ba").fit()
    (tmp_path / "ep0-ba2.pt").write_bytes((tmp_path / "run" / "ep0-ba2.pt").read_bytes())
    shutil.rmtree(tmp_path / "run")
    with pytest.raises(CheckpointError, match="refers to metric chunks .* keep the 'metrics_chunks' folder"):
        _trainer(load_path=tmp_path / "ep0-ba2.pt")


def test_a_run_resumed_into_another_save_folder_keeps_its_metrics_there(tmp_path):
    _trainer(max_duration="4ba", save_folder=tmp_path / "a", save_interval="2ba").fit()
    watch = MetricsAtCheckpoints()
    _trainer(callbacks=[LogsAtInit(), watch], load_path=tmp_path / "a" / "ep0-ba4.pt", max_duration="6ba",
             save_folder=tmp_path / "b", save_interval="2ba").fit()
    shutil.rmtree(tmp_path / "a")  # the chunks up to batch 4 were linked into b
    resumed = _trainer(load_path=tmp_path / "b" / "ep0-ba6.pt", max_duration="8ba")
    pd.testing.assert_frame_equal(_plain(resumed.metrics), _plain(watch.frames[6]))
