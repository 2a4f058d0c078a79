"""Host syncs during training: none per batch with the default settings, only at the documented
flush points (every ``flush_interval`` batches, epoch ends, evaluations, checkpoints, fit's end);
and the logger's metrics built incrementally, a read converting only the rows new since the last.

A sync is counted on CPU where it would stall a GPU's launch queue: ``.item()``, ``.tolist()``,
``.cpu()``, ``.numpy()``, ``bool()`` / ``float()`` / ``int()`` / ``index()`` of a tensor and
``.nonzero()``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from composer_lab import Callback
from composer_lab.algorithms import SelectiveBackprop
from composer_lab.core import logger as logger_module
from composer_lab.core.logger import Logger
from benchmarks.syncs import SyncCounter

from tests.trainer.helpers import make_trainer, tiny_loader, tiny_model

FLUSH_INTERVAL, BATCHES = 4, 12


class SyncsPerBatch(Callback):
    """The syncs counted from each BATCH_START to the next (the last batch's: to FIT_END)."""

    def __init__(self, counter: SyncCounter) -> None:
        self.counter, self.marks = counter, []

    def batch_start(self, state, logger) -> None:
        self.marks.append(self.counter.count)

    def fit_end(self, state, logger) -> None:
        self.marks.append(self.counter.count)

    @property
    def per_batch(self) -> list[int]:
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _syncs_per_batch(**kwargs) -> list[int]:
    counter = SyncCounter()
    per_batch = SyncsPerBatch(counter)
    trainer = make_trainer(train_dataloader=tiny_loader(n=8 * BATCHES), max_duration="1ep", callbacks=[per_batch],
                           flush_interval=FLUSH_INTERVAL, **kwargs)
    with counter:
        trainer.fit()
    assert len(per_batch.per_batch) == BATCHES
    return per_batch.per_batch


@pytest.mark.parametrize("settings", [
    dict(progress_bar=True),
    dict(trace="all"),
    dict(trace="off"),
    dict(algorithms=[SelectiveBackprop(start=0, end=1, keep=0.5, scale_factor=1, interrupt=0)]),
    dict(algorithms=[SelectiveBackprop(start=0, end=1, keep=0.5, scale_factor=1, interrupt=0)], trace="off"),
], ids=["default_callbacks", "trace_all", "trace_off", "selective_backprop", "selective_backprop_trace_off"])
def test_no_sync_per_batch_only_at_the_flush_points(settings):
    per_batch = _syncs_per_batch(**settings)
    flushes = [i for i in range(BATCHES) if (i + 1) % FLUSH_INTERVAL == 0]  # after the batch: i + 1 trained
    assert [n for i, n in enumerate(per_batch) if i not in flushes] == [0] * (BATCHES - len(flushes))
    # a flush: one bulk copy of the logged values (CPU: one device), where the non-finite check reads the losses
    assert all(per_batch[i] == 1 for i in flushes)


@pytest.mark.parametrize("fused, per_step", [(True, 0), (False, 1)], ids=["fused", "not_fused"])
def test_amp_fp16_syncs_per_batch_only_through_a_non_fused_optimizer(fused, per_step):
    """GradScaler reads whether the gradients overflowed once per step, unless the optimizer takes
    the scale and that flag on the device (``fused=True``): then amp_fp16 keeps the default's zero."""
    model = tiny_model()
    per_batch = _syncs_per_batch(model=model, precision="amp_fp16",
                                 optimizers=torch.optim.SGD(model.parameters(), lr=0.1, fused=fused))
    between_flushes = [n for i, n in enumerate(per_batch) if (i + 1) % FLUSH_INTERVAL]
    assert between_flushes == [per_step] * (BATCHES - BATCHES // FLUSH_INTERVAL)


def test_before_step_reads_the_loss_once_per_batch():
    per_batch = _syncs_per_batch(stop_on_nonfinite_loss="before_step")
    assert all(n == 1 for i, n in enumerate(per_batch) if (i + 1) % FLUSH_INTERVAL)


class LatestLoss(Callback):
    """What the progress bar would show at each BATCH_END: the last loss flushed to the host."""

    def __init__(self) -> None:
        self.seen = []

    def batch_end(self, state, logger) -> None:
        self.seen.append(logger.latest.get("loss/train"))


def test_the_progress_bar_shows_the_loss_of_the_last_flush():
    latest = LatestLoss()
    trainer = make_trainer(train_dataloader=tiny_loader(n=8 * BATCHES), max_duration="1ep", callbacks=[latest],
                           flush_interval=FLUSH_INTERVAL)
    trainer.fit()
    losses = trainer.metrics.query("name == 'loss/train'")["value"].tolist()
    flushed = [(i // FLUSH_INTERVAL) * FLUSH_INTERVAL - 1 for i in range(BATCHES)]  # the batch flushed last
    assert latest.seen == [losses[b] if b >= 0 else None for b in flushed]


# -- the logger: incremental metrics -------------------------------------------------------------
def _converted_per_read(monkeypatch) -> list[int]:
    """Patches the logger's host copy to record how many values each flush converts."""
    counts: list[int] = []
    convert = logger_module._to_host_floats
    monkeypatch.setattr(logger_module, "_to_host_floats", lambda values: (counts.append(len(values)),
                                                                          convert(values))[1])
    return counts


def _log(logger: Logger, rows: int, start: int = 0) -> None:
    for i in range(start, start + rows):
        logger.state = SimpleNamespace(timestamp=SimpleNamespace(batch=i, epoch=i // 10))
        logger.log_metrics({"loss/train": torch.tensor(float(i)), "lr": 0.1}, phase="fit" if i % 7 else "eval")


def test_a_metrics_read_converts_only_the_new_rows(monkeypatch):
    counts = _converted_per_read(monkeypatch)
    logger, n, new = Logger(), 100, 10
    _log(logger, n)
    logger.metrics
    _log(logger, new, n)
    small = logger.metrics
    _log(logger, 9 * n, n + new)
    logger.metrics
    _log(logger, new, 10 * n + new)
    large = logger.metrics
    # values converted by each read's flush: the reads after N and after 10N rows convert the same
    # new rows, and a read with nothing new converts none (and makes no frame again)
    assert logger.metrics is large
    assert counts == [2 * n, 2 * new, 2 * 9 * n, 2 * new]
    assert len(small) == 2 * (n + new) and len(large) == 2 * (10 * n + 2 * new)


def test_incremental_metrics_match_a_frame_built_at_once():
    logger = Logger()
    for start in (0, 3, 50, 51):  # reads at uneven points, the columns growing past their length
        _log(logger, [3, 47, 1, 200][(0, 3, 50, 51).index(start)], start)
        logger.metrics
    logger.state = None
    logger.log_metrics({"another": 2}, phase="predict")
    rows = [(i, i // 10, "fit" if i % 7 else "eval", name, value) for i in range(251)
            for name, value in (("loss/train", float(i)), ("lr", 0.1))] + [(0, 0, "predict", "another", 2.0)]
    expected = pd.DataFrame(rows, columns=list(logger_module.METRIC_COLUMNS)).astype(
        {"phase": "category", "name": "category"})
    pd.testing.assert_frame_equal(logger.metrics, expected)


def test_changing_a_metrics_frame_leaves_the_logger_alone():
    logger = Logger()
    _log(logger, 5)
    frame = logger.metrics
    frame.loc[0, "value"] = 99.0
    frame["batch"] += 10
    _log(logger, 1, 5)
    fresh = logger.metrics
    assert fresh.loc[0, "value"] == 0.0 and fresh["batch"].iloc[0] == 0


def test_a_read_copies_the_tensors_to_the_host_once():
    logger, counter = Logger(), SyncCounter()
    _log(logger, 30)
    with counter:
        logger.metrics
    assert counter.count == 1


def test_loaders_pin_memory_with_cuda(monkeypatch):
    from composer_lab.data.loaders import make_dataloaders

    data = tiny_loader().dataset
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert all(loader.pin_memory for loader in make_dataloaders(data, data, 8))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not any(loader.pin_memory for loader in make_dataloaders(data, data, 8))
