"""The trace's cost per step does not grow with the model (issue 21), counted rather than timed:
the Python bytecodes executed in composer_lab/core during a step are the same for a model of 4
parameter tensors and one of 322 when the algorithms declare ``writes`` without 'model'."""

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import composer_lab.core
from composer_lab import Algorithm, Event, Trainer

CORE = str(Path(composer_lab.core.__file__).parent)
STEP_EVENTS = (Event.BATCH_START, Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD, Event.AFTER_FORWARD,
               Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD,
               Event.AFTER_TRAIN_BATCH, Event.BATCH_END)


class Declared(Algorithm):
    """Runs at one event, changes nothing and says so."""

    writes = frozenset()

    def __init__(self, event: Event) -> None:
        self.events = frozenset({event})

    def apply(self, event, state, logger) -> None:
        return None


class Undeclared(Declared):
    writes = None


def mlp(tensors: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4), *[nn.Linear(4, 4) for _ in range(tensors // 2 - 2)], nn.Linear(4, 2))


def core_bytecodes_per_step(algorithm: type, tensors: int, steps: int = 4) -> float:
    """Bytecodes executed in core modules per training step, trace 'all', progress bar on."""
    model = mlp(tensors)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(2 * steps)]
    trainer = Trainer(model, data, "2ba", loss_fn=nn.functional.cross_entropy, algorithms=[
        algorithm(event) for event in STEP_EVENTS], device="cpu", trace="all", seed=0, flush_interval=1000)
    trainer.fit()  # (the first steps set up what the later ones reuse)
    count = 0

    def in_core(frame, event, arg):
        if not frame.f_code.co_filename.startswith(CORE):
            return None
        frame.f_trace_opcodes = True
        return each_opcode

    def each_opcode(frame, event, arg):
        nonlocal count
        count += event == "opcode"
        return each_opcode

    sys.settrace(in_core)
    try:
        trainer.fit(f"{steps}ba")
    finally:
        sys.settrace(None)
    return count / steps


def test_declared_calls_cost_the_core_the_same_bytecodes_at_any_model_size():
    assert core_bytecodes_per_step(Declared, 4) == core_bytecodes_per_step(Declared, 322) > 0


@pytest.mark.parametrize("tensors", [4, 322])
def test_undeclared_calls_cost_more_than_declared_ones(tensors):
    """The check has teeth: undeclared calls walk the parameters, and the count says so."""
    assert core_bytecodes_per_step(Undeclared, tensors) > core_bytecodes_per_step(Declared, tensors)


def test_an_undeclared_call_costs_more_on_a_bigger_model():
    assert core_bytecodes_per_step(Undeclared, 322) > core_bytecodes_per_step(Undeclared, 4)
