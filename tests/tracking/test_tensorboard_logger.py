"""TensorBoardLogger and to_tensorboard(run), read back with tensorboard's EventAccumulator:
every metric row as a scalar at its batch, across fits and failures; a log_dir that cannot be
written is refused before training."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'composer_lab[tensorboard]'")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from composer_lab.tracking import TensorBoardLogger, to_tensorboard  # noqa: E402
from composer_lab.trainer.run import Run  # noqa: E402
from tests.tracking.helpers import FailAt, histories, tiny_trainer  # noqa: E402


def scalars(log_dir) -> dict:
    """Every scalar tag's ``(step, value)`` pairs, by step, from the event files in ``log_dir``."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: sorted((e.step, e.value) for e in events.Scalars(tag)) for tag in events.Tags()["scalars"]}


def texts(log_dir, tag: str) -> list[str]:
    """The text summaries written under ``tag``, in order."""
    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return [e.tensor_proto.string_val[0].decode() for e in events.Tensors(f"{tag}/text_summary")]


def approx(history: dict) -> dict:
    """TensorBoard keeps float32: the same pairs, to float32's precision."""
    return {name: [(step, pytest.approx(value, rel=1e-6)) for step, value in pairs] for name, pairs in history.items()}


def test_the_metrics_are_written_as_scalars_at_their_steps(tmp_path):
    trainer = tiny_trainer([TensorBoardLogger(tmp_path / "tb", flush_interval=2)])
    trainer.fit()
    expected = histories(trainer.metrics)
    assert set(expected) >= {"loss/train", "lr", "loss/eval", "metrics/eval/Accuracy"}
    assert scalars(tmp_path / "tb") == approx(expected)
    setup, status = texts(tmp_path / "tb", "setup"), texts(tmp_path / "tb", "status")
    assert "| order/after_dataloader | MixUp > CutOut |" in setup[0] and "| MixUp.alpha | 0.2 |" in setup[0]
    assert status == ["FINISHED"]


def test_fits_and_a_failure_leave_one_readable_run(tmp_path):
    trainer = tiny_trainer([TensorBoardLogger(tmp_path / "tb"), FailAt(4, RuntimeError("boom"))])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit()
    trainer.state.callbacks.pop()  # (the failing callback goes; the next fit continues)
    trainer.fit()
    assert [step for step, _ in scalars(tmp_path / "tb")["loss/train"]] == list(range(6))
    assert texts(tmp_path / "tb", "status") == ["FAILED", "FINISHED"]
    assert scalars(tmp_path / "tb") == approx(histories(trainer.metrics))


def test_an_evaluation_after_fit_is_written_at_once(tmp_path):
    trainer = tiny_trainer([TensorBoardLogger(tmp_path / "tb")], batches="3ba")
    trainer.fit()
    trainer.eval()
    assert [step for step, _ in scalars(tmp_path / "tb")["loss/eval"]] == [3, 3]  # (the fit's, then this one)
    assert scalars(tmp_path / "tb") == approx(histories(trainer.metrics))


def test_a_saved_run_exports_as_the_live_logger_wrote_it(tmp_path):
    trainer = tiny_trainer([TensorBoardLogger(tmp_path / "live")])
    trainer.fit()
    folder = trainer.to_run().save(tmp_path / "run")
    assert to_tensorboard(Run.load(folder), tmp_path / "after") == str(tmp_path / "after")
    assert scalars(tmp_path / "after") == scalars(tmp_path / "live")


def test_a_log_dir_that_cannot_be_written_is_refused_naming_it(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"TensorBoardLogger log_dir '.*a_file/tb' cannot be written"):
        TensorBoardLogger(tmp_path / "a_file" / "tb")


def test_a_trainer_resumed_from_a_checkpoint_continues_its_log_dir_each_step_once(tmp_path):
    """A resumed trainer writing where its run wrote before writes only what it logs from the
    checkpoint on (the checkpoint's rows are there already); into a new log_dir it writes them all."""
    folder = tmp_path / "checkpoints"
    tiny_trainer([TensorBoardLogger(tmp_path / "tb", flush_interval=1)], batches="3ba", save_folder=folder,
                 save_interval="3ba").fit()
    resumed = tiny_trainer([TensorBoardLogger(tmp_path / "tb", flush_interval=1),
                            TensorBoardLogger(tmp_path / "new", flush_interval=1)],
                           batches="5ba", load_path=folder / "ep0-ba3.pt")
    resumed.fit()
    assert [step for step, _ in scalars(tmp_path / "tb")["loss/train"]] == [0, 1, 2, 3, 4]
    assert scalars(tmp_path / "tb") == scalars(tmp_path / "new") == approx(histories(resumed.metrics))
    another = tiny_trainer([TensorBoardLogger(tmp_path / "tb")], batches="2ba")  # (another run: all of it written)
    another.fit()
    assert [step for step, _ in scalars(tmp_path / "tb")["loss/train"]] == [0, 0, 1, 1, 2, 3, 4]
