"""Trackers are callbacks the trainer does not import: every callback is told its trainer
(``Callback.attach``) and hears of a failed fit (``Callback.fit_failed``); exporters are functions
over a Run, and the trainer layer's modules import nothing of composer_lab.tracking."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import composer_lab
from composer_lab.core.callback import Callback
from tests.tracking.helpers import FailAt, tiny_trainer


class Listener(Callback):
    def __init__(self) -> None:
        self.trainer, self.failures = None, []

    def attach(self, trainer) -> None:
        self.trainer = trainer

    def fit_failed(self, error) -> None:
        self.failures.append(error)


def test_every_callback_is_told_its_trainer_and_a_failed_fit():
    listener, error = Listener(), RuntimeError("the disk is full")
    trainer = tiny_trainer([listener, FailAt(2, error)])
    assert listener.trainer is trainer
    with pytest.raises(RuntimeError, match="the disk is full"):
        trainer.fit()
    assert listener.failures == [error]


def test_the_trainer_layer_imports_nothing_of_tracking():
    folder = Path(composer_lab.__file__).parent / "trainer"
    imported = {node.module for path in folder.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.startswith("composer_lab.tracking")}
