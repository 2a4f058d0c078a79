"""Training from the run panel in a background thread, with changes made while it runs."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from composer_lab.lab.algorithms_panel import AlgorithmPanel
from composer_lab.lab.control import Control
from composer_lab.lab.pass_editor import PassEditor
from composer_lab.lab import Lab
from composer_lab.lab.live_plot import RedrawBudget
from composer_lab.lab.run_panel import RunMonitor, RunPanel
from composer_lab.core import Callback
from composer_lab.trainer import TrainerBusy
from conftest import Fail, Mix, Pick, Smooth, make_trainer


def ran_at(trainer, name, event):
    inv = trainer.trace.invocations
    rows = inv[(inv["name"] == name) & (inv["event"] == event) & inv["matched"]]
    return sorted(set(rows["batch"]))


def test_a_change_during_a_run_holds_from_the_next_step_and_is_noted_at_its_batch():
    trainer = make_trainer([Mix(), Smooth()], max_duration="12ba")
    control = Control(trainer)
    panel, algorithms = RunPanel(trainer), AlgorithmPanel(control)
    handle = panel.start(pause_at=5)
    assert handle.wait_paused(timeout=30)
    algorithms.checkboxes["Mix"].value = False  # while the thread waits at batch 5's boundary
    handle.resume()
    handle.wait(timeout=60)
    assert ran_at(trainer, "Mix", "after_dataloader") == [0, 1, 2, 3, 4]
    assert ran_at(trainer, "Smooth", "before_loss") == list(range(12))
    notes = trainer.trace.notes
    change = notes[notes["kind"] == "algorithm"].iloc[0]
    assert change["text"] == "Mix off" and change["batch"] == 5
    assert list(notes.loc[notes["kind"] == "run", "text"]) == ["paused", "resumed"]
    assert panel.progress.value == 12 and bytes(panel.plot.value).startswith(b"\x89PNG")
    assert panel.start_button.description == "Start" and panel.pause_button.description == "Pause"
    assert panel.status.value.startswith("done: 12 batches trained")


def test_pause_button_pauses_and_continues_and_stop_ends_the_run():
    trainer = make_trainer([Mix()], max_duration="40ba")
    panel = RunPanel(trainer)
    editor = PassEditor(Control(trainer))
    handle = panel.start(pause_at=3)
    assert handle.wait_paused(timeout=30)
    panel.pause_button.description = "Continue"  # as after a click on Pause
    editor.rows[0].down.click()
    panel.pause_button.click()
    assert panel.pause_button.description == "Pause"
    panel.pause_button.click()
    assert handle.wait_paused(timeout=30)
    panel.stop_button.click()
    handle.wait(timeout=30)
    assert handle.stopped and handle.error is None
    assert trainer.state.timestamp.batch < 40
    assert trainer.trace.notes["kind"].tolist()[:2] == ["run", "pass"]
    stopped = trainer.trace.notes.iloc[-1]  # the trainer records the stop as an interrupt at a step boundary
    assert stopped["kind"] == "interrupt" and "batch_end" in stopped["text"]
    batch = trainer.state.timestamp.batch
    assert f"{batch} batches trained, the last one completely" in stopped["text"], "one convention: a count"
    assert panel.status.value.startswith(f"stopped: {batch} batches trained")


def test_the_handle_is_awaitable_and_continues_for_a_given_duration():
    trainer = make_trainer([], max_duration="12ba")
    panel = RunPanel(trainer)
    asyncio.run(_await(panel.start("4ba")))
    assert trainer.state.timestamp.batch == 4
    panel.duration.value = "3ba"
    panel.start_button.click()
    panel.handle.wait(timeout=30)
    assert trainer.state.timestamp.batch == 7


async def _await(handle):
    await handle


def test_an_error_in_the_run_is_raised_by_wait():
    trainer = make_trainer([Fail(at=2)], max_duration="6ba")
    panel = RunPanel(trainer)
    handle = panel.start()
    with pytest.raises(RuntimeError, match="failed on purpose at batch 2"):
        handle.wait(timeout=30)
    assert "failed after 2 batches trained: RuntimeError" in panel.status.value and not panel.start_button.disabled


def test_run_panel_rejects_what_is_not_a_trainer():
    with pytest.raises(TypeError, match="needs a Trainer"):
        RunPanel(object())
    with pytest.raises(ValueError, match="redraw_share"):
        RunPanel(make_trainer([]), redraw_share=0)


def test_one_continue_button_when_paused_and_a_status_line_after_stop():
    trainer = make_trainer([], max_duration="40ba")
    panel = RunPanel(trainer)
    handle = panel.start()
    panel.pause_button.click()
    assert handle.wait_paused(timeout=30)
    buttons = [b.description for b in (panel.start_button, panel.pause_button, panel.stop_button)]
    assert buttons.count("Continue") == 1 and panel.start_button.disabled
    assert panel.status.value.startswith("paused: ") and panel.status.value.endswith("batches trained; press Continue")
    panel.stop_button.click()
    handle.wait(timeout=30)
    batch = trainer.state.timestamp.batch
    assert panel.status.value == (f"stopped: {batch} batches trained (max_duration 40ba); press Start to go on to "
                                  f"max_duration")
    assert panel.label.value == f"{batch} / 40 batches"


def test_start_on_a_finished_trainer_says_what_to_do():
    trainer = make_trainer([], max_duration="3ba")
    panel = RunPanel(trainer)
    panel.start().wait(timeout=30)
    panel.start_button.click()
    assert panel.handle.done and trainer.state.timestamp.batch == 3, "no run started"
    assert "the run is at its end (batch 3, max_duration 3ba); say how much more to train" in panel.notice.value
    panel.duration.value = "2ba"
    panel.start_button.click()
    panel.handle.wait(timeout=30)
    assert trainer.state.timestamp.batch == 5
    assert panel.progress.max == 5 and panel.label.value == "5 / 5 batches", "the total is the run's current length"


def test_the_lab_follows_a_fit_from_a_cell_and_refuses_a_second_fit_during_a_panel_run():
    trainer = make_trainer([Mix(), Pick(0, 1)], max_duration="6ba")
    lab = Lab(trainer)
    handle = lab.run.start(pause_at=2)
    assert handle.wait_paused(timeout=30)
    with pytest.raises(RuntimeError, match="already training .*thread 'composer_lab-run'"):
        trainer.fit("5ba")
    handle.resume()
    handle.wait(timeout=30)
    assert str(trainer.state.max_duration) == "6ba" and trainer.state.timestamp.batch == 6
    trainer.fit("4ba")  # from a cell
    assert lab.run.label.value == "10 / 10 batches" and lab.run.progress.value == 10
    assert lab.run.status.value == "done: 10 batches trained (a fit() outside the panel, in thread 'MainThread')"
    assert len(lab.conflicts.conflicts) > 0 and bytes(lab.run.plot.value).startswith(b"\x89PNG")


def test_the_conflict_table_follows_pass_toggles():
    trainer = make_trainer([Mix(), Pick(0, 1)], max_duration="2ba")
    lab = Lab(trainer)
    trainer.fit()
    assert list(lab.conflicts.conflicts["pass"]) == ["set_filo_order"]
    lab.control.set_pass_enabled("set_filo_order", False)
    assert list(lab.conflicts.conflicts["pass"]) == ["sort_selective_backprop_first"]
    assert "sort_selective_backprop_first" in lab.conflicts.table.value
    assert "padding:2px 10px" in lab.conflicts.table.value, "the table's cells are padded"


def test_interrupting_the_kernel_stops_a_panel_run_at_the_next_batch():
    """As an idle kernel: SIGINT ignored, until the panel's run relays it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        trainer = make_trainer([], max_duration="400ba")
        panel = RunPanel(trainer)
        handle = panel.start(pause_at=3)
        assert handle.wait_paused(timeout=30)
        os.kill(os.getpid(), signal.SIGINT)
        handle.wait(timeout=30)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "the relay is gone after the run"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert handle.interrupted and trainer.state.timestamp.batch == 3
    notes = trainer.trace.notes
    assert list(notes["text"])[-2] == "interrupted (kernel interrupt)" and notes["kind"].iloc[-1] == "interrupt"
    assert panel.status.value.startswith("interrupted by the kernel: 3 batches trained")


def test_redraws_keep_within_their_share_of_the_time():
    budget = RedrawBudget(0.1, first_after=0.0)
    assert budget.due()
    started = budget.next_at - 1.0  # a drawing that took a second (at least)
    budget.spent(started)
    assert not budget.due() and budget.next_at - started >= 11.0  # it waits ten times as long
    assert not RedrawBudget(0.1, first_after=60.0).due(), "the first drawing waits"


def test_interrupting_a_cell_that_awaits_the_run_stops_the_run():
    trainer = make_trainer([], max_duration="400ba")
    panel = RunPanel(trainer)
    handle = panel.start(pause_at=2)
    assert handle.wait_paused(timeout=30)

    async def cell():
        waiting = asyncio.ensure_future(_await(handle))
        await asyncio.sleep(0.1)
        waiting.cancel()  # what ipykernel does to an awaiting cell on the kernel's interrupt
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(cell())
    handle.wait(timeout=30)
    assert handle.interrupted and trainer.state.timestamp.batch == 2


class Gate(Callback):
    """Holds a fit at the BATCH_END of batch ``at`` (0-based) until ``release`` is set."""

    def __init__(self, at: int = 0) -> None:
        self.at, self.reached, self.release = at, threading.Event(), threading.Event()

    def batch_end(self, state, logger) -> None:
        if state.timestamp.batch == self.at + 1:
            self.reached.set()
            self.release.wait(30)


def test_a_start_refused_while_a_thread_trains_is_a_notice_and_the_panel_ends_on_the_true_state():
    """The issue's race: the refused run's end and the real fit's end, in either order."""
    for refused_first in (True, False):
        gate = Gate(at=2)
        trainer = make_trainer([], max_duration="6ba", callbacks=[gate])
        panel = RunPanel(trainer)
        worker = threading.Thread(target=trainer.fit, name="worker")
        worker.start()
        assert gate.reached.wait(30)
        assert panel.status.value == "training in thread 'worker' (a fit() outside the panel)"
        slow_end = threading.Event()
        if not refused_first:  # the refused run's report waits until the real fit has ended
            panel._finished = _after(slow_end, panel._finished)
        handle = panel.start()
        if refused_first:
            assert handle._done.wait(30)
        gate.release.set()
        worker.join(30)
        slow_end.set()
        with pytest.raises(TrainerBusy):
            handle.wait(timeout=30)
        assert handle.refused is not None and handle.error is None
        assert "Start refused at" in panel.notice.value and "is already training (fit started in thread 'worker'" \
            in panel.notice.value and "#b00" not in panel.notice.value, "a notice, not a failure"
        assert panel.status.value == "done: 6 batches trained (a fit() outside the panel, in thread 'worker')"
        assert panel.label.value == "6 / 6 batches" and panel.progress.value == 6
        assert not panel.start_button.disabled and panel.stop_button.disabled


def _after(event, report):
    def slow():
        event.wait(30)
        report()
    return slow


def test_a_panel_made_while_a_thread_trains_says_so_at_the_next_batch():
    gate = Gate(at=1)
    trainer = make_trainer([], max_duration="4ba", callbacks=[gate])
    worker = threading.Thread(target=trainer.fit, name="worker")
    worker.start()
    assert gate.reached.wait(30)
    panel = RunPanel(trainer)
    gate.at = 2
    gate.reached.clear()
    gate.release.set()
    assert gate.reached.wait(30)
    assert panel.status.value == "training in thread 'worker' (a fit() outside the panel)"
    gate.release.set()
    worker.join(30)
    assert panel.status.value.startswith("done: 4 batches trained")


def test_a_new_panel_on_a_trainer_replaces_the_monitor_and_takes_over_a_run_going():
    trainer = make_trainer([], max_duration="20ba")
    first = RunPanel(trainer)
    handle = first.start(pause_at=2)
    assert handle.wait_paused(timeout=30)
    second = Lab(trainer).run  # the cell run again
    monitors = [cb for cb in trainer.state.callbacks if isinstance(cb, RunMonitor)]
    assert len(monitors) == 1 and monitors[0].panel is second
    assert second.handle is handle and second.start_button.disabled and not second.stop_button.disabled
    second.stop_button.click()
    handle.wait(timeout=30)
    assert second.status.value.startswith("stopped: 2 batches trained")
    trainer.fit("2ba")
    calls = trainer.trace.invocations
    assert (calls.loc[calls["event"] == "batch_end", "batch"].value_counts() == 1).all(), "one monitor call a batch"


def test_a_change_while_paused_holds_at_once_and_the_conflicts_wait_for_the_end_of_the_fit():
    trainer = make_trainer([Mix(), Pick(0, 1)], max_duration="8ba")
    lab = Lab(trainer)
    handle = lab.run.start(pause_at=3)
    assert handle.wait_paused(timeout=30)
    reads = []
    lab.conflicts.trainer = _Counting(trainer, reads)
    lab.algorithms.checkboxes["Mix"].value = False
    for _ in range(200):  # the paused run applies it within 0.05 s
        if [a.__class__.__name__ for a in trainer.state.algorithms] == ["Pick"]:
            break
        threading.Event().wait(0.01)
    assert [a.__class__.__name__ for a in trainer.state.algorithms] == ["Pick"]
    lab.conflicts.refresh_button.click()
    assert "a fit is training: the table is refreshed when it ends" in lab.conflicts.table.value
    assert set(reads) <= {"composer_lab-run"}, "the trace is read only in the thread that writes it"
    handle.resume()
    handle.wait(timeout=30)
    assert reads and "a fit is training" not in lab.conflicts.table.value, "refreshed at the end of the fit"
    assert ran_at(trainer, "Mix", "after_dataloader") == [0, 1, 2]


class _Counting:
    """A trainer seen through a proxy that counts reads of its trace from other threads than the fit's."""

    def __init__(self, trainer, reads):
        self._trainer, self._reads = trainer, reads

    def __getattr__(self, name):
        if name == "trace":
            self._reads.append(threading.current_thread().name)
        return getattr(self._trainer, name)


def test_a_fit_outside_the_panel_that_fails_is_said_to_have_ended_early():
    trainer = make_trainer([Fail(at=2)], max_duration="6ba")
    panel = RunPanel(trainer)
    failures = []
    worker = threading.Thread(target=lambda: _record(trainer.fit, failures), name="worker")
    worker.start()
    worker.join(30)
    assert failures and "failed on purpose" in str(failures[0])
    for _ in range(100):  # the panel's watcher looks five times a second
        if "ended early" in panel.status.value:
            break
        threading.Event().wait(0.05)
    assert panel.status.value == ("the fit in thread 'worker' ended early: 2 batches trained (an error or an "
                                  "interrupt; trainer.trace.notes says which)")


def _record(fn, failures):
    try:
        fn()
    except RuntimeError as err:
        failures.append(err)
