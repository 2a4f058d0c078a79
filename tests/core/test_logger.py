"""The metric logger with many rows at once (a resumed checkpoint's): its flush allocates no object per row."""

import gc

from composer_lab.core import Logger


def test_a_flush_of_many_rows_sets_off_no_garbage_collection():
    """Rows become columns without an object per row: an iterator per row (``zip(*rows)``) set off
    the garbage collector hundreds of times, 1.2 s of the first read after resuming 400,000 rows."""
    logger, collections = Logger(), []
    logger.load_metrics([(batch, 0, "fit", "loss", 0.5) for batch in range(100_000)])

    def count(phase, info):
        collections.extend([info["generation"]] if phase == "start" else [])

    gc.callbacks.append(count)
    try:
        frame = logger.metrics
    finally:
        gc.callbacks.remove(count)
    assert len(frame) == 100_000 and len(collections) < 5, collections


def test_tensor_values_of_mixed_shapes_and_dtypes_read_as_each_alone():
    """The flush stacks each device's tensors in one op when they agree in dtype and shape; mixed ones
    read as each would alone (not promoted together: 70000 with a float16 stays 70000, not inf)."""
    import torch

    from composer_lab.core.logger import stack_scalars

    mixed = [torch.tensor(70000), torch.tensor(0.5, dtype=torch.float16), torch.tensor([1.5]), torch.tensor(2.5)]
    alike = [torch.tensor([[0.25]]), torch.tensor([[float("nan")]])]
    for tensors in (mixed, alike, mixed[:1]):
        expected = [t.reshape(()).float().item() for t in tensors]
        got = stack_scalars(tensors)
        assert got.dtype == torch.float32 and got.shape == (len(tensors),)
        torch.testing.assert_close(got, torch.tensor(expected), equal_nan=True)
    logger = Logger()
    for i, value in enumerate([*mixed, *alike]):
        logger.log_metrics({f"m{i}": value})
    assert logger.metrics["value"].tolist()[:4] == [70000.0, 0.5, 1.5, 2.5]


def test_the_trainers_step_rows_are_those_of_log_metrics():
    """log_train_step (the trainer's loss and learning rate, every batch) records what log_metrics would."""
    import torch

    from composer_lab.core import State, Timestamp

    state = State(torch.nn.Linear(1, 1), "4ba")
    state.timestamp = Timestamp(epoch=1, batch=3)
    loggers = Logger(state), Logger(state)
    for loss, lr in [(torch.tensor(0.5), 0.1), (torch.tensor([float("nan")]), torch.tensor(0.2)), (2.5, 3)]:
        loggers[0].log_train_step(loss, lr)
        loggers[1].log_metrics({"loss/train": loss, "lr": lr}, phase="fit")
    loggers[0].phase = loggers[1].phase = "eval"  # (the trainer's rows are 'fit' whatever the engine's phase)
    loggers[0].log_train_step(torch.tensor(1.5), 0.25)
    loggers[1].log_metrics({"loss/train": torch.tensor(1.5), "lr": 0.25}, phase="fit")
    left, right = loggers[0].metrics, loggers[1].metrics
    assert left.equals(right) and len(left) == 8 and loggers[0].latest == loggers[1].latest


def test_reads_between_flushes_see_every_row_as_the_columns_grow():
    """The columns double as rows come, the frame viewing them made at a read (a flush of the
    training loop builds no DataFrame): every read sees every row, and a frame read earlier keeps its rows."""
    import pandas as pd

    logger, frames = Logger(), []
    for batch in range(40):
        logger.log_metrics({"loss": float(batch), "lr": 0.1})
        logger.flush()
        if batch % 7 == 0:
            frames.append(logger.metrics)
    final = logger.metrics
    assert final["value"].tolist() == [v for batch in range(40) for v in (float(batch), 0.1)]
    assert final["name"].tolist() == ["loss", "lr"] * 40 and (final["phase"] == "fit").all()
    for frame in frames:
        pd.testing.assert_frame_equal(frame, final.iloc[:len(frame)])


def test_flushed_rows_wait_for_a_read_and_at_most_write_rows_of_them(monkeypatch):
    """A flush copies the values to the host; the rows join the columns at a read, or once
    WRITE_ROWS of them wait (a long run that nobody reads holds no more rows than that as objects)."""
    import torch

    from composer_lab.core import logger as logger_module

    monkeypatch.setattr(logger_module, "WRITE_ROWS", 30)
    logger, waiting = Logger(), []
    for batch in range(100):
        logger.log_metrics({"loss": torch.tensor(float(batch)), "lr": 0.1})
        if batch % 5 == 4:
            logger.flush()
            waiting.append(logger._flushed_rows)
    assert max(waiting) < 30 and waiting[:3] == [10, 20, 0]  # (written at the 30th row)
    assert logger.latest == {"loss": 99.0, "lr": 0.1}
    frame = logger.metrics
    assert frame["value"].tolist()[::2] == [float(b) for b in range(100)] and logger._flushed_rows == 0
