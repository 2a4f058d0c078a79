"""The Lab: all panels of a trainer in one widget, sharing one Control."""

from __future__ import annotations

from composer_lab.core import Event
from composer_lab.lab import Lab
from conftest import Mix, Smooth, make_trainer


def test_lab_shows_every_panel_and_they_share_one_control():
    trainer = make_trainer([Mix(), Smooth()], max_duration="8ba")
    lab = Lab(trainer)
    bundle = lab._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    lab.algorithms.checkboxes["Smooth"].value = False
    assert "before_loss" not in lab.preview.orders
    assert [type(a).__name__ for a in trainer.engine.plan(Event.AFTER_DATALOADER)] == ["Mix"]
    lab.run.start().wait(timeout=60)
    assert trainer.state.timestamp.batch == 8
    assert lab.conflicts.conflicts.empty  # refreshed when the run ended: only Mix ran


def test_lab_on_an_engine_has_no_run_panel(engine):
    lab = Lab(engine)
    assert lab.run is None and lab.preview.orders["after_dataloader"] == ["Pick", "Mix"]
