"""Training from the run panel in a background thread, with changes made while it runs."""

from __future__ import annotations

import asyncio

import pytest

from composer_lab.lab.algorithms_panel import AlgorithmPanel
from composer_lab.lab.control import Control
from composer_lab.lab.pass_editor import PassEditor
from composer_lab.lab.run_panel import RunPanel
from conftest import Fail, Mix, Smooth, make_trainer


def ran_at(trainer, name, event):
    inv = trainer.trace.invocations
    rows = inv[(inv["name"] == name) & (inv["event"] == event) & inv["matched"]]
    return sorted(set(rows["batch"]))


def test_a_change_during_a_run_holds_from_the_next_step_and_is_noted_at_its_batch():
    trainer = make_trainer([Mix(), Smooth()], max_duration="12ba")
    control = Control(trainer)
    panel, algorithms = RunPanel(trainer, redraw_every=4), AlgorithmPanel(control)
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
    assert panel.start_button.description == "Continue"


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
    assert f"batch {trainer.state.timestamp.batch - 1} was the last one applied" in stopped["text"]


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
    assert panel.start_button.description == "Continue"


def test_run_panel_rejects_what_is_not_a_trainer():
    with pytest.raises(TypeError, match="needs a Trainer"):
        RunPanel(object())
    with pytest.raises(ValueError, match="redraw_every"):
        RunPanel(make_trainer([]), redraw_every=0)
