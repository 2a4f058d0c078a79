"""Failures during fit: interrupts, non-finite losses and failed saves leave a trainer, its
trace and its checkpoints consistent, and a following fit() continues from there."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from composer_lab import Callback, Event
from composer_lab.trainer import NonFiniteLossError, load_checkpoint
from composer_lab.trainer import checkpoint as checkpoint_module
from composer_lab.trainer.failures import FitInterrupted, NonFiniteWatch
from benchmarks.syncs import SyncCounter

from tests.trainer.helpers import OnEvent, make_trainer, tiny_data, tiny_loader

BATCHES_PER_EPOCH, EPOCHS = 3, 2
TOTAL = BATCHES_PER_EPOCH * EPOCHS


class InterruptOnce(Callback):
    """Raises ``error`` the first time ``event`` fires at global batch ``batch`` or later."""

    def __init__(self, event: Event, batch: int, error: BaseException = KeyboardInterrupt()) -> None:
        self.event, self.batch, self.error = event, batch, error
        self.fired = False

    def run_event(self, event, state, logger) -> None:
        if event is self.event and not self.fired and state.timestamp.batch >= self.batch:
            self.fired = True
            raise self.error


def _weights(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.state.model.parameters()]


def _trained_for(batches: int) -> list[torch.Tensor]:
    """The weights after exactly ``batches`` uninterrupted optimizer steps."""
    trainer = make_trainer(max_duration=f"{batches}ba")
    trainer.fit()
    return _weights(trainer)


def _assert_weights(trainer, expected) -> None:
    for got, want in zip(_weights(trainer), expected):
        assert torch.equal(got, want)


# event, the global batch from which the interrupt comes, whether the batch in flight is
# applied by then (mid-epoch for the batch events, the first epoch's end, the second's start)
INTERRUPT_POINTS = [
    (Event.AFTER_DATALOADER, 4, False),
    (Event.BEFORE_FORWARD, 4, False),
    (Event.AFTER_LOSS, 4, False),
    (Event.AFTER_BACKWARD, 4, False),
    (Event.AFTER_TRAIN_BATCH, 4, False),
    (Event.BATCH_END, 4, True),
    (Event.BATCH_CHECKPOINT, 4, True),
    (Event.EPOCH_END, 3, True),
    (Event.EPOCH_START, 3, True),
]


@pytest.mark.parametrize("event,batch,applied", INTERRUPT_POINTS, ids=[e.value for e, _, _ in INTERRUPT_POINTS])
def test_interrupt_leaves_a_consistent_trainer_and_fit_continues(event, batch, applied):
    stop = InterruptOnce(event, batch)
    trainer = make_trainer(callbacks=[stop])
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()

    ts = trainer.state.timestamp
    # Weights, optimizer and timestamp agree: exactly ts.batch steps were taken.
    _assert_weights(trainer, _trained_for(ts.batch))
    assert trainer.state.optimizers[0].state_dict()["state"][0]["momentum_buffer"] is not None
    if not applied:
        assert ts.batch == 4 and all(p.grad is None for p in trainer.state.model.parameters())
    note = trainer.trace.notes.iloc[-1]
    assert note["kind"] == "interrupt" and event.value in note["text"]
    assert ("was not applied" in note["text"]) is (not applied)
    interrupted = trainer.trace.invocations.query("error.notna()")
    assert list(interrupted["event"]) == [event.value]

    trainer.fit()  # continues where it stopped
    _assert_weights(trainer, _trained_for(TOTAL))
    assert trainer.state.timestamp.batch == TOTAL and trainer.state.timestamp.epoch == EPOCHS
    losses = trainer.metrics.query("name == 'loss/train'")
    assert list(losses["batch"]) == list(range(TOTAL)), "each batch is logged once"
    steps = trainer.trace.events.query("event == 'batch_end'")
    assert list(steps["batch"]) == list(range(1, TOTAL + 1)), "each batch ends once"


def test_a_stop_pressed_during_the_optimizer_step_waits_until_the_batch_is_applied():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a script, whatever ran before
    try:
        trainer = make_trainer()
        optimizer = trainer.state.optimizers[0]
        calls = []

        def press_stop(opt, args, kwargs):
            calls.append(trainer.state.timestamp.batch)
            if trainer.state.timestamp.batch == 2:
                os.kill(os.getpid(), signal.SIGINT)  # as Jupyter's stop button does

        optimizer.register_step_pre_hook(press_stop)
        with pytest.raises(KeyboardInterrupt):
            trainer.fit()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "fit restores the handler"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert trainer.state.timestamp.batch == 3, "batch 2 was fully applied before the interrupt"
    _assert_weights(trainer, _trained_for(3))
    assert "3 batches trained, the last one completely" in trainer.trace.notes["text"].iloc[-1]


def test_a_failing_algorithm_is_noted_and_the_next_fit_trains_the_batch_again():
    def fail(state):
        raise RuntimeError("broken augmentation")

    flaky = OnEvent(Event.AFTER_DATALOADER, fail)
    trainer = make_trainer(algorithms=[flaky])
    with pytest.raises(RuntimeError, match="broken augmentation"):
        trainer.fit()
    note = trainer.trace.notes.iloc[-1]
    assert note["kind"] == "error" and "RuntimeError: broken augmentation" in note["text"]
    assert "batch 0 was not applied" in note["text"]
    flaky.fn = None
    trainer.fit()
    _assert_weights(trainer, _trained_for(TOTAL))


class FlakyData(torch.utils.data.Dataset):
    """``tiny_data``, except that the ``nth`` read of item ``bad`` fails (a file that could not
    be read once)."""

    def __init__(self, bad: int, nth: int) -> None:
        self.data, self.bad, self.nth, self.reads = tiny_data(), bad, nth, 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        if index == self.bad:
            self.reads += 1
            if self.reads == self.nth:
                raise OSError("unreadable file")
        return self.data[index]


class FlakyBatches:
    """``tiny_loader``'s batches from a generator that raises instead of yielding batch ``bad``
    of epoch ``epoch``, once; a generator that raised is finished."""

    def __init__(self, bad: int, epoch: int) -> None:
        self.bad, self.epoch, self.opened, self.failed = bad, epoch, 0, False

    def __len__(self) -> int:
        return BATCHES_PER_EPOCH

    def __iter__(self):
        self.opened += 1
        for index, batch in enumerate(torch.utils.data.DataLoader(tiny_data(), batch_size=8)):
            if index == self.bad and self.opened == self.epoch + 1 and not self.failed:
                self.failed = True
                raise OSError("unreadable file")
            yield batch


@pytest.mark.parametrize("bad_batch", [0, 1, 3], ids=["first batch", "mid-epoch", "second epoch"])
@pytest.mark.parametrize("loader", ["DataLoader", "generator"])
def test_a_failing_dataloader_is_noted_and_the_next_fit_reads_the_batch_again(loader, bad_batch):
    """A batch that failed to load is not skipped: the next fit opens the epoch again past the
    batches already trained and reads it (a DataLoader's iterator would go on to the next
    batch, a generator would end the epoch), and the epoch does not start twice."""
    epoch, index = divmod(bad_batch, BATCHES_PER_EPOCH)
    data = (torch.utils.data.DataLoader(FlakyData(bad=index * 8 + 4, nth=epoch + 1), batch_size=8)
            if loader == "DataLoader" else FlakyBatches(bad=index, epoch=epoch))
    trainer = make_trainer(train_dataloader=data)
    with pytest.raises(OSError, match="unreadable file"):
        trainer.fit()
    assert trainer.state.timestamp.batch == bad_batch
    note = trainer.trace.notes.iloc[-1]
    assert note["kind"] == "error" and "OSError: unreadable file" in note["text"]
    trainer.fit()
    _assert_weights(trainer, _trained_for(TOTAL))
    assert list(trainer.metrics.query("name == 'loss/train'")["batch"]) == list(range(TOTAL))
    assert trainer.state.timestamp.epoch == EPOCHS
    assert list(trainer.trace.events.query("event == 'epoch_start'")["epoch"]) == list(range(EPOCHS))


class NaNAt(OnEvent):
    """Makes the loss NaN at AFTER_LOSS of global batch ``batch``."""

    def __init__(self, batch: int) -> None:
        def poison(state):
            if state.timestamp.batch == batch:
                state.loss = state.loss * float("nan")
        super().__init__(Event.AFTER_LOSS, poison)


def test_nonfinite_loss_before_step_stops_before_the_step_and_names_the_culprit():
    trainer = make_trainer(algorithms=[NaNAt(batch=2)], stop_on_nonfinite_loss="before_step")
    with pytest.raises(NonFiniteLossError) as info:
        trainer.fit()
    message = str(info.value)
    assert "loss is nan at batch 2 (epoch 0, batch 2 of the epoch); the batch was not applied" in message
    assert "NaNAt at after_loss (changed loss)" in message
    assert "stop_on_nonfinite_loss=False" in message
    _assert_weights(trainer, _trained_for(2))
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())
    assert trainer.trace.notes["kind"].tolist() == ["nonfinite", "error"]


@pytest.mark.parametrize("flush_interval, found_after", [(1, 1), (2, 1), (50, 2)])
def test_nonfinite_loss_is_found_at_the_next_flush_and_names_its_batch(flush_interval, found_after):
    """By default the check reads the device every flush_interval batches and at the epoch's end
    (batch 2 here): the bad batch 1 and those up to the check were applied, and the error says so."""
    nan_at = 1
    trainer = make_trainer(algorithms=[NaNAt(batch=nan_at)], flush_interval=flush_interval)
    with pytest.raises(NonFiniteLossError) as info:
        trainer.fit()
    message = str(info.value)
    applied = found_after - nan_at + 1
    found = "it was" if applied == 1 else f"it and the {applied - 1} batches after it were"
    assert (f"loss is nan at batch 1 (epoch 0, batch 1 of the epoch); the check after batch {found_after} found it: "
            f"{found} applied, so the weights may hold non-finite values") in message
    assert "NaNAt at after_loss (changed loss)" in message  # that batch's calls, not the later ones'
    assert "stop_on_nonfinite_loss='before_step'" in message
    assert trainer.state.timestamp.batch == found_after + 1
    assert trainer.trace.notes["kind"].tolist() == ["nonfinite", "error"]
    assert f"{applied} batches applied from it on" in trainer.trace.notes["text"].iloc[0]


def test_nonfinite_loss_is_found_before_a_checkpoint(tmp_path):
    trainer = make_trainer(algorithms=[NaNAt(batch=0)], save_folder=tmp_path, save_interval="2ba")
    with pytest.raises(NonFiniteLossError, match="the check after batch 1 found it"):
        trainer.fit()
    assert trainer.checkpoints == []


def test_the_nonfinite_watch_reports_a_batch_once_and_reads_the_host_only_when_watching():
    trainer = make_trainer(max_duration="1ba")
    watch, trace, time = NonFiniteWatch(True), trainer.trace, trainer.state.timestamp
    watch.check(trace, time)  # nothing watched: no host read, nothing to raise
    watch.watch(torch.tensor(float("inf")), trace, time, 0)
    watch.watch(torch.tensor(1.0), trace, time.to_next_batch(8), 0)
    with pytest.raises(NonFiniteLossError, match="loss is inf at batch 0"):
        watch.check(trace, time.to_next_batch(8).to_next_batch(8))
    watch.check(trace, time)  # reported once
    watch.watch(torch.tensor(2.0), trace, time, 0)
    watch.check(trace, time)


def test_the_nonfinite_watch_reads_only_the_losses_not_read_before():
    """The trainer hands the check what its logger's flush copied out: those losses are not read
    again; the others (not logged, or flushed meanwhile from another thread) are read together."""
    trainer = make_trainer(max_duration="1ba")
    watch, trace, time = NonFiniteWatch(True), trainer.trace, trainer.state.timestamp
    logged, unlogged = torch.tensor(1.0), torch.tensor(float("nan"))
    watch.watch(logged, trace, time, 0)
    watch.watch(unlogged, trace, time.to_next_batch(8), 0)
    counter = SyncCounter()
    with counter, pytest.raises(NonFiniteLossError, match="loss is nan at batch 1"):
        watch.check(trace, time.to_next_batch(8).to_next_batch(8), {id(logged): 1.0})
    assert counter.count == 1  # the unlogged one, read by itself
    watch.watch(unlogged, trace, time, 0)
    with counter, pytest.raises(NonFiniteLossError, match="loss is inf at batch 0"):
        watch.check(trace, time, {id(unlogged): float("inf")})  # what the flush read is what is checked
    assert counter.count == 1


def test_stop_on_nonfinite_loss_rejects_other_values():
    with pytest.raises(ValueError, match="'before_step'"):
        make_trainer(stop_on_nonfinite_loss="always")


def test_nonfinite_input_names_the_algorithm_that_changed_the_batch():
    def poison(state):
        x, y = state.batch
        state.batch = (x * float("inf"), y)

    trainer = make_trainer(algorithms=[OnEvent(Event.AFTER_DATALOADER, poison)])
    with pytest.raises(NonFiniteLossError, match=r"OnEvent at after_dataloader \(changed batch\)"):
        trainer.fit()


def test_nonfinite_loss_with_the_trace_off_says_so():
    trainer = make_trainer(algorithms=[NaNAt(batch=0)], trace="off")
    with pytest.raises(NonFiniteLossError, match="the trace is off"):
        trainer.fit()


def test_nonfinite_loss_check_can_be_switched_off():
    trainer = make_trainer(algorithms=[NaNAt(batch=1)], stop_on_nonfinite_loss=False)
    trainer.fit()
    assert trainer.state.timestamp.batch == TOTAL
    assert not all(torch.isfinite(p).all() for p in trainer.state.model.parameters())


def test_a_save_that_fails_midway_leaves_the_last_good_checkpoint(tmp_path, monkeypatch):
    trainer = make_trainer(save_folder=tmp_path, save_interval="1ba")
    trainer.fit("2ba")
    good = tmp_path / "ep0-ba2.pt"
    before = good.read_bytes()
    real_save = torch.save

    def save_half(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.truncate(f.tell() // 2)  # the disk filled up halfway through
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", save_half)
    with pytest.raises(OSError, match="No space left"):
        checkpoint_module.save_checkpoint(trainer.checkpoint_payload(), good)
    assert good.read_bytes() == before
    assert load_checkpoint(good)["timestamp"]["batch"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0-ba1.pt", "ep0-ba2.pt", "metrics_chunks",
                                                          "run.json"], "no temporary file"

    with pytest.raises(OSError, match="No space left"):
        trainer.fit("1ba")  # the trainer's own save of the next checkpoint fails the same way
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0-ba1.pt", "ep0-ba2.pt", "metrics_chunks", "run.json"]
    failed = trainer.trace.invocations.query("error.notna()")
    assert list(failed["name"]) == ["CheckpointSaver"] and "No space left" in failed["error"].iloc[0]


def test_a_new_run_never_overwrites_another_run_checkpoints(tmp_path):
    first = make_trainer(save_folder=tmp_path, save_interval="1ba")
    first.fit("2ba")
    make_trainer(save_folder=tmp_path / "other")  # constructing a trainer claims nothing yet
    with pytest.raises(ValueError, match="holds the checkpoints of another run.*Choose another save_folder"):
        make_trainer(save_folder=tmp_path, save_interval="1ba")

    resumed = make_trainer(save_folder=tmp_path, save_interval="1ba", load_path=tmp_path / "ep0-ba2.pt")
    resumed.fit()  # the same run, continued: it may write on
    assert resumed.run_id == first.run_id and len(resumed.checkpoints) == TOTAL - 2


def test_checkpoints_of_unknown_origin_are_not_overwritten(tmp_path):
    (tmp_path / "ep0-ba1.pt").write_bytes(b"someone else's")
    with pytest.raises(ValueError, match="another run \\('of unknown origin'\\)"):
        make_trainer(save_folder=tmp_path)


def test_an_interrupt_stops_with_one_line_naming_the_batch_and_how_to_resume():
    trainer = make_trainer(callbacks=[InterruptOnce(Event.AFTER_LOSS, 4)])
    with pytest.raises(FitInterrupted) as caught:
        trainer.fit()
    text = str(caught.value)
    assert text == ("fit interrupted at after_loss of batch 4: batch 4 was not applied (the next fit trains it "
                    "again). trainer.fit() resumes from here (details: trainer.trace.notes)")
    assert caught.value._render_traceback_() == [f"FitInterrupted: {text}"], "one line in a notebook"
    assert caught.value.__suppress_context__, "not chained to the traceback through torch"
    assert list(trainer.trace.events["event"])[-1] == "after_loss", "the trace up to the interrupt reads"


@pytest.mark.parametrize("event,skipped", [(Event.BATCH_END, True), (Event.BATCH_CHECKPOINT, False)])
def test_an_interrupt_says_whether_the_evaluation_due_was_skipped(event, skipped):
    trainer = make_trainer(callbacks=[InterruptOnce(event, 2)], eval_dataloader=tiny_loader(8, 8),
                           eval_interval="2ba")
    with pytest.raises(FitInterrupted) as caught:
        trainer.fit()
    assert "2 batches trained, the last one completely" in str(caught.value)
    said = "the evaluation due after batch 2 was skipped (trainer.eval() runs it)" in str(caught.value)
    assert said is skipped
