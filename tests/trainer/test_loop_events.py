"""The trainer fires every event where the seed's pseudocode (shared/seeds/001) places it."""

from __future__ import annotations

import copy

import pytest
import torch

from composer_lab import Event
from composer_lab.algorithms import EMA
from composer_lab.algorithms.ema import averaged_tensors

from tests.trainer.helpers import make_trainer, tiny_loader

E = Event


def _eval_events(batches: int) -> list:
    """EVAL_BEFORE_ALL, the eval loop over ``batches`` batches, EVAL_AFTER_ALL."""
    loop = [E.EVAL_BATCH_START, E.EVAL_BEFORE_FORWARD, E.EVAL_AFTER_FORWARD, E.EVAL_BATCH_END] * batches
    return [E.EVAL_BEFORE_ALL, E.EVAL_START, *loop, E.EVAL_END, E.EVAL_AFTER_ALL]


def _seed_sequence(epochs: int, batches: int, microbatches: int, eval_batches: int,
                   eval_every_batches: int = 0, eval_every_epochs: int = 1) -> list:
    """The event sequence of the seed's pseudocode, written as its loops."""
    seq = [E.INIT, E.BEFORE_LOAD, E.AFTER_LOAD, E.FIT_START]
    step = 0
    for epoch in range(1, epochs + 1):
        seq.append(E.EPOCH_START)
        for _ in range(batches):
            seq += [E.BEFORE_DATALOADER, E.AFTER_DATALOADER, E.BATCH_START, E.BEFORE_TRAIN_BATCH]
            for _ in range(microbatches):
                seq += [E.BEFORE_FORWARD, E.AFTER_FORWARD, E.BEFORE_LOSS, E.AFTER_LOSS,
                        E.BEFORE_BACKWARD, E.AFTER_BACKWARD]
            seq += [E.AFTER_TRAIN_BATCH, E.BATCH_END]
            step += 1
            if eval_every_batches and step % eval_every_batches == 0:
                seq += _eval_events(eval_batches)
            seq.append(E.BATCH_CHECKPOINT)
        seq += [E.BEFORE_DATALOADER, E.EPOCH_END]  # the dataloader runs dry: break
        if eval_every_epochs and epoch % eval_every_epochs == 0:
            seq += _eval_events(eval_batches)
        seq.append(E.EPOCH_CHECKPOINT)
    seq.append(E.FIT_END)
    return [e.value for e in seq]


def _fired(trainer) -> list:
    return trainer.trace.events["event"].astype(str).tolist()


def test_exact_sequence_two_epochs_three_batches_two_microbatches_eval_every_epoch():
    trainer = make_trainer(train_dataloader=tiny_loader(24, 8), device_train_microbatch_size=4,
                           eval_dataloader=tiny_loader(12, 6), eval_interval="1ep")
    trainer.fit()
    assert _fired(trainer) == _seed_sequence(epochs=2, batches=3, microbatches=2, eval_batches=2)


@pytest.mark.parametrize("epochs,batches,micro,eval_batches,interval", [
    (1, 4, 1, 1, "1ep"), (3, 2, 3, 2, "2ep"), (2, 3, 1, 1, "2ba"), (1, 1, 2, 3, "1ba"),
])
def test_sequence_for_other_shapes(epochs, batches, micro, eval_batches, interval):
    trainer = make_trainer(train_dataloader=tiny_loader(6 * batches, 6), max_duration=f"{epochs}ep",
                           device_train_microbatch_size=6 // micro if micro > 1 else None,
                           eval_dataloader=tiny_loader(4 * eval_batches, 4), eval_interval=interval)
    trainer.fit()
    every = int(interval[:-2])
    expected = _seed_sequence(epochs, batches, micro, eval_batches,
                              eval_every_batches=every if interval.endswith("ba") else 0,
                              eval_every_epochs=every if interval.endswith("ep") else 0)
    assert _fired(trainer) == expected


def test_event_counts_without_eval():
    trainer = make_trainer(train_dataloader=tiny_loader(40, 8), max_duration="3ep", device_train_microbatch_size=3)
    trainer.fit()
    counts = trainer.trace.events["event"].astype(str).value_counts()
    assert counts["epoch_start"] == counts["epoch_end"] == counts["epoch_checkpoint"] == 3
    assert counts["before_dataloader"] == 3 * 6 and counts["after_dataloader"] == 15
    assert counts["before_train_batch"] == counts["after_train_batch"] == counts["batch_end"] == 15
    assert counts["before_forward"] == counts["after_backward"] == 15 * 3  # 8 examples in 3+3+2
    assert "eval_start" not in counts


def test_microbatch_column_numbers_the_microbatches():
    trainer = make_trainer(train_dataloader=tiny_loader(8, 8), max_duration="1ba", device_train_microbatch_size=3)
    trainer.fit()
    events = trainer.trace.events
    forwards = events[events["event"] == "before_forward"]
    assert forwards["microbatch"].tolist() == [0, 1, 2]
    assert events[events["event"] == "batch_start"]["microbatch"].isna().all()


def test_batch_duration_stops_mid_epoch_and_fit_continues_it():
    trainer = make_trainer(train_dataloader=tiny_loader(24, 8), max_duration="2ba")
    trainer.fit()
    assert trainer.state.timestamp.batch == 2 and trainer.state.timestamp.epoch == 0
    assert _fired(trainer)[-2:] == ["batch_checkpoint", "fit_end"]
    trainer.fit("1ba")
    fired = _fired(trainer)
    second = fired[len(fired) - fired[::-1].index("fit_start") - 1:]
    # the third batch ends the epoch: no new EPOCH_START, the epoch closes, then FIT_END
    assert "epoch_start" not in second
    assert second[-5:] == ["batch_checkpoint", "before_dataloader", "epoch_end", "epoch_checkpoint", "fit_end"]
    assert trainer.state.timestamp.epoch == 1 and trainer.state.timestamp.batch == 3


def test_fit_duration_extends_max_duration():
    trainer = make_trainer(max_duration="1ep")
    trainer.fit()
    trainer.fit("2ep")
    assert trainer.state.timestamp.epoch == 3
    assert str(trainer.state.max_duration) == "3ep"
    assert _fired(trainer).count("fit_start") == 2


def test_sample_duration_counts_samples():
    trainer = make_trainer(train_dataloader=tiny_loader(24, 8), max_duration="20sp")
    trainer.fit()
    assert trainer.state.timestamp.sample == 24  # three batches of 8 reach 20


def test_standalone_eval_events():
    trainer = make_trainer(eval_dataloader=tiny_loader(8, 4))
    trainer.eval()
    fired = _fired(trainer)
    assert fired[3:] == ["eval_standalone_start", *[e.value for e in _eval_events(2)], "eval_standalone_end"]


def test_standalone_eval_uses_ema_weights_and_swaps_back():
    """Why standalone eval fires EVAL_BEFORE_ALL / EVAL_AFTER_ALL (Composer's does not): EMA
    swaps its averaged weights in and out there, so trainer.eval() measures them, as the
    evaluations during fit do, and training goes on with the trained weights."""
    ema = EMA(half_life="2ba")
    trainer = make_trainer(eval_dataloader=tiny_loader(8, 4), algorithms=[ema], max_duration="4ba")
    trainer.fit()
    trained = [t.clone() for t in averaged_tensors(trainer.state.model)]
    results = trainer.eval()
    model = copy.deepcopy(trainer.state.model).eval()
    for tensor, average in zip(averaged_tensors(model), ema.averages):
        tensor.data.copy_(average)
    x, y = tiny_loader(8, 8).dataset.tensors
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(x), y).item()
    assert results["loss/eval"] == pytest.approx(expected, rel=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(trained, averaged_tensors(trainer.state.model)))


def test_predict_events_and_outputs():
    trainer = make_trainer()
    outputs = trainer.predict(tiny_loader(10, 4))
    fired = _fired(trainer)[3:]
    per_batch = ["predict_batch_start", "predict_before_forward", "predict_after_forward", "predict_batch_end"]
    assert fired == ["predict_start", *per_batch * 3, "predict_end"]
    assert [o.shape[0] for o in outputs] == [4, 4, 2]
    assert trainer.state.model.training  # predict restores training mode


def test_batch_column_counts_finished_batches():
    """Events up to AFTER_TRAIN_BATCH carry the batch being trained; BATCH_END the count after it."""
    trainer = make_trainer(train_dataloader=tiny_loader(16, 8), max_duration="1ep")
    trainer.fit()
    events = trainer.trace.events.set_index("event")
    assert events.loc["batch_start", "batch"].tolist() == [0, 1]
    assert events.loc["batch_end", "batch"].tolist() == [1, 2]
    assert events.loc["epoch_end", "epoch"] == 1
