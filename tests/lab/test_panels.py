"""The algorithm panel, pass editor and order preview, driven through their Python API."""

from __future__ import annotations

import pytest

from composer_lab.core import Event, set_filo_order, sort_selective_backprop_first
from composer_lab.lab.algorithms_panel import AlgorithmPanel
from composer_lab.lab.control import Control
from composer_lab.lab.order_preview import OrderPreview, order_changes, possible_events
from composer_lab.lab.pass_editor import PassEditor


def names(algorithms):
    return [type(a).__name__ for a in algorithms]


def test_unticking_an_algorithm_removes_it_from_the_plan_and_ticking_restores_its_place(engine):
    control = Control(engine)
    panel = AlgorithmPanel(control)
    assert names(engine.plan(Event.AFTER_DATALOADER, assume_matched=True)) == ["Pick", "Smooth", "Mix"]
    panel.checkboxes["Mix"].value = False
    assert names(engine.state.algorithms) == ["Pick", "Smooth"]
    assert "Mix" not in names(engine.plan(Event.AFTER_DATALOADER))
    panel.checkboxes["Pick"].value = False
    panel.checkboxes["Mix"].value = True
    assert names(engine.state.algorithms) == ["Mix", "Smooth"]
    notes = engine.trace.notes
    assert list(notes["text"]) == ["Mix off", "Pick off", "Mix on"]
    assert set(notes["kind"]) == {"algorithm"}


def test_moving_sb_first_above_filo_reverses_the_after_dataloader_order(engine):
    control = Control(engine)
    editor = PassEditor(control)
    engine.state.timestamp = engine.state.timestamp.to_next_batch(1)
    for _ in range(11):  # batch 12 of 20: inside Pick's [0.5, 0.9)
        engine.state.timestamp = engine.state.timestamp.to_next_batch(1)
    # FILO reverses [Pick, Mix] to [Mix, Pick]; SB-first then puts Pick back in front.
    assert names(engine.plan(Event.AFTER_DATALOADER)) == ["Pick", "Mix"]
    assert [r.name for r in editor.rows][:2] == ["set_filo_order", "sort_selective_backprop_first"]
    editor.rows[1].up.click()
    assert engine.passes[:2] == [sort_selective_backprop_first, set_filo_order]
    # Now SB-first runs first and FILO reverses its result: Pick ends up last.
    assert names(engine.plan(Event.AFTER_DATALOADER)) == ["Mix", "Pick"]
    assert [r.name for r in editor.rows][:2] == ["sort_selective_backprop_first", "set_filo_order"]
    editor.rows[0].down.click()
    assert names(engine.plan(Event.AFTER_DATALOADER)) == ["Pick", "Mix"]
    note = engine.trace.notes.iloc[0]
    assert note["kind"] == "pass" and note["batch"] == 12


def test_switching_a_pass_off_removes_it_from_the_engine(engine):
    control = Control(engine)
    editor = PassEditor(control)
    editor.rows[1].enabled.value = False
    assert sort_selective_backprop_first not in engine.passes
    assert names(engine.plan(Event.AFTER_DATALOADER, assume_matched=True)[:2]) == ["Smooth", "Mix"]
    editor.rows[1].enabled.value = True
    assert engine.passes[1] is sort_selective_backprop_first


def test_custom_pass_added_from_python_and_by_name(engine):
    control = Control(engine)
    editor = PassEditor(control)

    def smooth_first(algorithms, event):
        return sorted(algorithms, key=lambda a: type(a).__name__ != "Smooth")

    editor.add(smooth_first)
    assert engine.passes[-1] is smooth_first
    assert names(engine.plan(Event.AFTER_DATALOADER, assume_matched=True))[0] == "Smooth"
    assert editor.rows[-1].name == "smooth_first"

    def mix_last(algorithms, event):
        return sorted(algorithms, key=lambda a: type(a).__name__ == "Mix")

    editor._add_by_name("mix_last", {"mix_last": mix_last})
    assert engine.passes[-1] is mix_last and editor.status.value == ""
    editor._add_by_name("nothing_here", {})
    assert "no function 'nothing_here'" in editor.status.value
    editor._add_by_name("x", {"x": 3})
    assert "a pass is a function" in editor.status.value


def test_editing_a_hyperparameter_sets_it_and_bad_values_are_put_back(engine):
    control = Control(engine)
    panel = AlgorithmPanel(control)
    mix = control.algorithm("Mix")
    assert set(panel.fields["Mix"]) == {"alpha", "enabled_epochs"}
    panel.fields["Mix"]["alpha"].value = 0.5
    assert mix.alpha == 0.5
    assert engine.trace.notes["text"].iloc[-1] == "Mix.alpha 0.2 -> 0.5"
    panel.fields["Mix"]["alpha"].value = -1.0
    assert mix.alpha == 0.5 and panel.fields["Mix"]["alpha"].value == 0.5
    assert "alpha must be > 0" in panel.status.value


def test_control_rejects_bad_input_with_clear_errors(engine):
    control = Control(engine)
    with pytest.raises(ValueError, match="no algorithm 'Nope'.*names"):
        control.set_enabled("Nope", False)
    with pytest.raises(ValueError, match="no editable hyperparameter 'beta'"):
        control.set_hyperparameter("Mix", "beta", 1.0)
    with pytest.raises(TypeError, match="Mix.enabled_epochs is a int, got str"):
        control.set_hyperparameter("Mix", "enabled_epochs", "3")
    with pytest.raises(TypeError, match="bool"):
        control.set_hyperparameter("Mix", "enabled_epochs", True)
    with pytest.raises(ValueError, match="no single pass 'nope'"):
        control.move_pass("nope", 1)
    with pytest.raises(ValueError, match="exactly once"):
        control.set_pass_order(["set_filo_order"])
    with pytest.raises(TypeError, match="a pass is a function"):
        control.add_pass("set_filo_order")
    with pytest.raises(ValueError, match="already in the list"):
        control.add_pass(set_filo_order)
    with pytest.raises(TypeError, match="needs a Trainer or an Engine"):
        Control(object())


def test_set_pass_order_follows_the_names_given(engine):
    control = Control(engine)
    order = list(reversed(control.pass_names))
    control.set_pass_order(order)
    assert [p.__name__ for p in engine.passes] == order


def test_preview_lists_algorithms_that_match_later_in_the_run(engine):
    preview = OrderPreview(Control(engine))
    # Pick starts at half the run; at batch 0 it does not match, but the preview shows it.
    assert Event.AFTER_DATALOADER in possible_events(engine.state.algorithms[0], engine.state)
    assert preview.orders["after_dataloader"] == ["Pick", "Mix"]
    assert preview.orders["before_loss"] == ["Smooth"]
    assert "fit_start" not in preview.orders
    assert "dashed" in preview.table.value  # Pick would not run at the current batch


def test_preview_follows_checkboxes_and_pass_moves_and_marks_differences(engine):
    control = Control(engine)
    panel, editor, preview = AlgorithmPanel(control), PassEditor(control), OrderPreview(control)
    panel.checkboxes["Mix"].value = False
    assert preview.orders["after_dataloader"] == ["Pick"]
    assert preview.changes["after_dataloader"].removed == ["Mix"]
    assert "line-through" in preview.table.value
    panel.checkboxes["Mix"].value = True
    assert preview.changes["after_dataloader"].added == ["Mix"]
    editor.rows[1].up.click()
    assert preview.orders["after_dataloader"] == ["Mix", "Pick"]
    assert preview.changes["after_dataloader"].moved == ["Mix", "Pick"]
    assert not preview.changes["before_loss"]
    preview.event.value = "before_loss"
    assert "Smooth" in preview.table.value and "Pick" not in preview.table.value


def test_order_changes():
    change = order_changes(["a", "b", "c"], ["c", "b", "d"])
    assert change.moved == ["c", "b"] and change.added == ["d"] and change.removed == ["a"]
    assert not order_changes(["a"], ["a"])


def test_preview_uses_declared_events_where_match_depends_on_earlier_events():
    """LabelSmoothing matches AFTER_LOSS only after it smoothed at BEFORE_LOSS: no probe state
    shows that, but its declared ``events`` do."""
    from composer_lab.algorithms import LabelSmoothing

    from conftest import make_trainer

    smoothing = LabelSmoothing(0.1)
    trainer = make_trainer([smoothing])
    assert possible_events(smoothing, trainer.state) == [Event.BEFORE_LOSS, Event.AFTER_LOSS]
    assert OrderPreview(Control(trainer)).orders["after_loss"] == ["LabelSmoothing"]


def _chip_style(preview, name):
    """The style of ``name``'s chip in the preview's table."""
    import re
    found = re.search(r'<span class="cl-chip" style="([^"]*)">' + name + "</span>", preview.table.value)
    return found.group(1)


def test_preview_marks_an_algorithm_off_its_schedule():
    """Selective Backprop listens at every AFTER_DATALOADER (its match is True, so it logs keep
    ratio 1.0 off-schedule) but selects only inside [start, end): the preview draws it dashed
    outside, solid inside, and says so through Algorithm.active."""
    import torch

    from composer_lab.algorithms import SelectiveBackprop
    from composer_lab.core import Engine, State
    from composer_lab.core.time import Timestamp

    sb = SelectiveBackprop(start=0.5, end=0.9, interrupt=0)
    engine = Engine(State(torch.nn.Linear(4, 2), "20ba", algorithms=[sb]))
    state = engine.state
    assert sb.match(Event.AFTER_DATALOADER, state) and not sb.active(Event.AFTER_DATALOADER, state)
    preview = OrderPreview(Control(engine), event="after_dataloader")
    assert "dashed" in _chip_style(preview, "SelectiveBackprop")
    state.timestamp = Timestamp(batch=12, batch_in_epoch=12)
    preview.refresh()
    assert sb.active(Event.AFTER_DATALOADER, state) and "solid" in _chip_style(preview, "SelectiveBackprop")


def test_the_algorithm_arrows_reorder_the_list_the_preview_and_the_rows_and_note_it(engine):
    control = Control(engine)
    panel, preview = AlgorithmPanel(control), OrderPreview(control)
    engine.passes = []  # no pass decides: the list's order is the order they run in
    preview.refresh()
    assert preview.orders["after_dataloader"] == ["Pick", "Mix"]
    panel.arrows["Mix"][0].click()
    assert names(engine.state.algorithms) == ["Mix", "Pick", "Smooth"]
    assert preview.orders["after_dataloader"] == ["Mix", "Pick"]
    assert preview.changes["after_dataloader"].moved
    assert [row.children[2].description for row in panel.children[1:-1]] == ["Mix", "Pick", "Smooth"]
    assert engine.trace.notes["text"].iloc[-1] == "moved Mix to position 0: ['Mix', 'Pick', 'Smooth']"
    panel.checkboxes["Mix"].value = False
    panel.checkboxes["Mix"].value = True  # back in its new place
    assert names(engine.state.algorithms) == ["Mix", "Pick", "Smooth"]
