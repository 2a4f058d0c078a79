"""Checkpoints: what they hold, exact resumption, repeatability, and safe, clear loading."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from composer_lab import Callback, Event
from composer_lab.trainer import CheckpointError, load_checkpoint

from tests.trainer.helpers import OnEvent, counts, make_trainer, tiny_loader, tiny_model


def _noisy_trainer(**kwargs):
    """Shuffled data, dropout and an algorithm drawing from the state's generator: every
    source of randomness a resumed run must reproduce."""
    def jitter(state):
        x, y = state.batch
        state.batch = (x + 0.01 * torch.randn(x.shape, generator=state.generator()), y)

    args = dict(model=tiny_model(dropout=0.3), train_dataloader=tiny_loader(24, 8, shuffle=True),
                max_duration="3ep", eval_dataloader=tiny_loader(8, 4), seed=7,
                algorithms=[OnEvent(Event.AFTER_DATALOADER, jitter)])
    args.update(kwargs)
    return make_trainer(**args)


def _comparable_metrics(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame[frame["name"] != "throughput/samples_per_sec"]
    return frame.astype({"phase": str, "name": str}).reset_index(drop=True)


def _weights(trainer):
    return [p.detach().clone() for p in trainer.state.model.parameters()]


@pytest.mark.parametrize("interval,checkpoint", [
    ("1ba", "ep1-ba4.pt"),  # mid-epoch
    ("1ba", "ep0-ba3.pt"),  # last batch of an epoch, before the epoch closed
    ("1ba", "ep0-ba2.pt"),
    ("1ep", "ep1-ba3.pt"),  # epoch boundary, after the epoch's evaluation
])
def test_resumed_run_ends_with_the_same_weights_and_metrics(tmp_path, interval, checkpoint):
    full = _noisy_trainer(save_folder=tmp_path, save_interval=interval)
    full.fit()
    resumed = _noisy_trainer(load_path=tmp_path / checkpoint)
    resumed.fit()
    for a, b in zip(_weights(full), _weights(resumed)):
        assert torch.equal(a, b)
    pd.testing.assert_frame_equal(_comparable_metrics(full.metrics), _comparable_metrics(resumed.metrics))
    assert counts(resumed.state.timestamp) == counts(full.state.timestamp)


def test_resume_restores_optimizer_state_and_notes_it(tmp_path):
    first = _noisy_trainer(save_folder=tmp_path, save_interval="2ba", max_duration="2ba")
    first.fit()
    resumed = _noisy_trainer(load_path=first.checkpoints[-1])
    saved = first.state.optimizers[0].state_dict()["state"]
    loaded = resumed.state.optimizers[0].state_dict()["state"]
    for key in saved:
        assert torch.equal(saved[key]["momentum_buffer"], loaded[key]["momentum_buffer"])
    notes = resumed.trace.notes
    assert notes["kind"].tolist() == ["load"] and "batch 2" in notes["text"].iloc[0]
    assert resumed.resumed_from["trace"].events["event"].astype(str).tolist()[:3] == ["init", "before_load",
                                                                                          "after_load"]


class CountBatches(Callback):
    """Counts the batches it saw; the count is checkpointed."""

    def __init__(self) -> None:
        self.batches = 0

    def batch_end(self, state, logger) -> None:
        self.batches += 1

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.batches = state["batches"]


class RefusesOthersState(Callback):
    def load_state_dict(self, state: dict) -> None:
        raise AssertionError(f"given another callback's state: {state}")


def test_callback_state_is_restored_by_name_whatever_the_list(tmp_path):
    """The resumed run's callbacks need not be the saving run's, in number or order (rank 0 alone
    has a progress bar; a notebook turns it off): each gets its own state back."""
    first = make_trainer(callbacks=[CountBatches()], save_folder=tmp_path, save_interval="2ba", max_duration="2ba",
                         progress_bar=True)
    first.fit()
    counter = CountBatches()
    make_trainer(callbacks=[RefusesOthersState(), counter], load_path=first.checkpoints[-1])
    assert counter.batches == 2


def test_save_interval_decides_the_files(tmp_path):
    trainer = _noisy_trainer(save_folder=tmp_path, save_interval="1ep", max_duration="2ep")
    trainer.fit()
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["ep1-ba3.pt", "ep2-ba6.pt"]
    trainer = _noisy_trainer(save_folder=tmp_path / "b", save_interval="4ba", max_duration="3ep")
    trainer.fit()
    assert [p.name for p in trainer.checkpoints] == ["ep1-ba4.pt", "ep2-ba8.pt"]


def test_checkpoint_contents_load_with_weights_only(tmp_path):
    trainer = _noisy_trainer(save_folder=tmp_path, max_duration="1ep")
    trainer.fit()
    ckpt = load_checkpoint(trainer.checkpoints[0])
    assert ckpt["timestamp"]["batch"] == 3 and ckpt["timestamp"]["epoch"] == 1
    assert set(ckpt["model"]) == set(trainer.state.model.state_dict())
    assert ckpt["algorithms"][0]["name"] == "OnEvent"
    assert {"python", "torch", "numpy"} <= set(ckpt["rng"])
    assert {"chunks", "tail", "notes"} <= set(ckpt["trace"]) and set(ckpt["trace"]["tail"]) == {"events", "invocations"}


def test_same_seed_gives_identical_traces_and_weights():
    runs = []
    for _ in range(2):
        trainer = _noisy_trainer()
        trainer.fit()
        runs.append(trainer)
    a, b = (r.trace for r in runs)
    drop_events, drop_calls = ["t_start", "duration"], ["duration"]
    pd.testing.assert_frame_equal(a.events.drop(columns=drop_events), b.events.drop(columns=drop_events))
    pd.testing.assert_frame_equal(a.invocations.drop(columns=drop_calls), b.invocations.drop(columns=drop_calls))
    for x, y in zip(_weights(runs[0]), _weights(runs[1])):
        assert torch.equal(x, y)


def test_different_seeds_shuffle_differently():
    orders = []
    for seed in (1, 2):
        seen = []
        trainer = make_trainer(train_dataloader=tiny_loader(24, 8, shuffle=True), seed=seed, max_duration="1ba",
                               algorithms=[OnEvent(Event.AFTER_DATALOADER, lambda s: seen.append(s.batch[1]))])
        trainer.fit()
        orders.append(seen[0])
    assert not torch.equal(*orders)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint file"):
        make_trainer(load_path=tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        make_trainer(load_path=tmp_path / "nope.pt")


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or not a checkpoint"):
        make_trainer(load_path=path)


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    trainer = _noisy_trainer(save_folder=tmp_path, max_duration="1ep")
    trainer.fit()
    data = trainer.checkpoints[0].read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        make_trainer(load_path=path)


class _Boom:
    def __reduce__(self):
        return (exec, ("raise SystemExit('code ran')",))


def test_loading_never_runs_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "composer_lab.checkpoint/1", "model": _Boom()}, path)
    with pytest.raises(CheckpointError, match="cannot be read"):
        make_trainer(load_path=path)


def test_other_torch_file_is_refused(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(tiny_model().state_dict(), path)
    with pytest.raises(CheckpointError, match="not a composer_lab checkpoint"):
        make_trainer(load_path=path)


def test_checkpoint_of_another_model_is_refused(tmp_path):
    trainer = _noisy_trainer(save_folder=tmp_path, max_duration="1ep")
    trainer.fit()
    other = torch.nn.Sequential(torch.nn.Linear(6, 3))
    with pytest.raises(CheckpointError, match="does not fit this model"):
        make_trainer(model=other, load_path=trainer.checkpoints[0])


def test_checkpoint_with_other_optimizer_count_is_refused(tmp_path):
    trainer = _noisy_trainer(save_folder=tmp_path, max_duration="1ep")
    trainer.fit()
    model = tiny_model(dropout=0.3)
    two = [torch.optim.SGD(model[:1].parameters(), lr=0.1), torch.optim.SGD(model[3:].parameters(), lr=0.1)]
    with pytest.raises(CheckpointError, match="holds 1 optimizers but the trainer has 2"):
        make_trainer(model=model, optimizers=two, load_path=trainer.checkpoints[0])
