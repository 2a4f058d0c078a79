"""What a run records (metrics, config), its run folder, and the progress bar."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from composer_lab import Run
from composer_lab.trainer.progress import ProgressBar

from tests.trainer.helpers import make_trainer, tiny_loader


def test_metrics_are_a_tidy_frame_with_loss_lr_and_eval():
    trainer = make_trainer(train_dataloader=tiny_loader(24, 8), eval_dataloader=tiny_loader(12, 4), max_duration="2ep")
    trainer.fit()
    metrics = trainer.metrics
    assert list(metrics.columns) == ["batch", "epoch", "phase", "name", "value"]
    assert metrics is trainer.logger.metrics
    train = metrics[metrics["name"] == "loss/train"]
    assert train["batch"].tolist() == list(range(6)) and (train["phase"] == "fit").all()
    assert len(metrics[metrics["name"] == "lr"]) == 6
    evals = metrics[metrics["phase"] == "eval"]
    assert evals["name"].astype(str).tolist() == ["loss/eval", "metrics/eval/Accuracy"] * 2
    assert (metrics[metrics["name"] == "throughput/samples_per_sec"]["value"] > 0).all()


def test_eval_metrics_match_a_direct_computation():
    trainer = make_trainer(eval_dataloader=tiny_loader(12, 5))
    trainer.fit()
    results = trainer.eval()
    x, y = tiny_loader(12, 12).dataset.tensors
    model = trainer.state.model.eval()
    with torch.no_grad():
        logits = model(x)
    assert results["metrics/eval/Accuracy"] == pytest.approx((logits.argmax(1) == y).float().mean().item())
    assert results["loss/eval"] == pytest.approx(torch.nn.functional.cross_entropy(logits, y).item(), rel=1e-5)


def test_trainer_exposes_state_engine_trace_logger():
    trainer = make_trainer()
    assert trainer.trace is trainer.engine.trace
    assert trainer.engine.state is trainer.state
    assert trainer.engine.logger is trainer.logger


def test_run_round_trip(tmp_path):
    trainer = make_trainer(eval_dataloader=tiny_loader(8, 4), run_name="roundtrip")
    trainer.fit()
    run = trainer.to_run()
    assert run.name == "roundtrip" and run.config["max_duration"] == "2ep"
    folder = run.save(tmp_path / "r")
    assert {p.name for p in folder.iterdir()} == {"config.json", "metrics.parquet", "trace"}
    assert json.loads((folder / "config.json").read_text())["config"]["seed"] == 0
    loaded = Run.load(folder)
    assert loaded.name == "roundtrip" and loaded.config == json.loads(json.dumps(run.config))
    pd.testing.assert_frame_equal(loaded.metrics, run.metrics)
    pd.testing.assert_frame_equal(loaded.trace.events, run.trace.events)


def test_saving_over_another_run_needs_overwrite(tmp_path):
    first = make_trainer(run_name="first", max_duration="1ba")
    first.fit()
    first.to_run().save(tmp_path)
    first.to_run().save(tmp_path)  # the same run may be saved again
    second = make_trainer(run_name="second", max_duration="1ba")
    second.fit()
    with pytest.raises(ValueError, match="holds the run 'first'.*overwrite=True"):
        second.to_run().save(tmp_path)
    second.to_run().save(tmp_path, overwrite=True)
    assert Run.load(tmp_path).name == "second"


def test_another_run_of_the_same_name_is_not_saved_over(tmp_path):
    first = make_trainer(run_name="same", max_duration="1ba")
    first.to_run().save(tmp_path)
    again = make_trainer(run_name="same", max_duration="1ba")
    with pytest.raises(ValueError, match="another run of the same name.*run_name=.*overwrite=True"):
        again.to_run().save(tmp_path)
    assert Run.load(tmp_path).config["run_id"] == first.run_id


def test_a_resumed_run_is_the_same_run(tmp_path):
    first = make_trainer(run_name="r", max_duration="2ba", save_folder=tmp_path / "ckpt", save_interval="1ba")
    first.fit("1ba")
    first.to_run().save(tmp_path / "run")
    resumed = make_trainer(run_name="r", max_duration="2ba", load_path=first.checkpoints[-1])
    resumed.fit()
    assert resumed.run_id == first.run_id
    resumed.to_run().save(tmp_path / "run")  # its own folder: updated, not refused
    assert Run.load(tmp_path / "run").trace.events["batch"].max() == 2


def test_saving_into_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    trainer = make_trainer(max_duration="1ba")
    with pytest.raises(ValueError, match="holds other files"):
        trainer.to_run().save(tmp_path)


def test_loading_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        Run.load(tmp_path)


def test_progress_bar_counts_batches_and_can_be_turned_off(capsys):
    trainer = make_trainer(progress_bar=True, max_duration="2ep")
    bars = [cb for cb in trainer.state.callbacks if isinstance(cb, ProgressBar)]
    assert len(bars) == 1
    seen = []
    original = bars[0].fit_end
    bars[0].fit_end = lambda state, logger: (seen.append(bars[0].bar.n), original(state, logger))
    trainer.fit()
    assert seen == [6] and bars[0].bar is None
    assert "6/6" in capsys.readouterr().err
    off = make_trainer(progress_bar=False)
    assert not any(isinstance(cb, ProgressBar) for cb in off.state.callbacks)


@pytest.mark.parametrize("duration,first,more", [("40sp", "5/5", "3/3"), ("5ba", "5/5", "3/3"), ("2ep", "6/6", "3/3")])
def test_progress_bar_total_is_the_run_length_in_batches_whatever_the_unit(capsys, duration, first, more):
    """The bar's total is the batches left, read by the one rule for a run's length in batches
    (composer_lab.trainer.duration.total_batches), for samples too; a fit that trains more counts
    only what it adds."""
    trainer = make_trainer(progress_bar=True, max_duration=duration)
    trainer.fit()
    assert first in capsys.readouterr().err
    trainer.fit({"40sp": "24sp", "5ba": "3ba", "2ep": "1ep"}[duration])
    assert more in capsys.readouterr().err
