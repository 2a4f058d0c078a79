"""The trace's cost per step does not grow with the model (issues 21 and 31), counted rather
than timed: the Python bytecodes executed in composer_lab/core during a step are the same for a
model of 4 parameter tensors and one of 322, whether the algorithms declare ``writes`` without
'model' (nothing of the model is read) or declare nothing (what each call does is watched, not
what the model is)."""

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import composer_lab.core
from composer_lab import Algorithm, Event, Trainer

from .test_changes import Counted, counted_mlp

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


def core_bytecodes_per_step(algorithm: type, tensors: int) -> float:
    """Bytecodes executed in core modules per training step, trace 'all', progress bar on: a fit
    of 8 steps less one of 4, so that what a fit does once (FIT_START walks the model) drops out."""
    model = mlp(tensors)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(4)]
    trainer = Trainer(model, data, "2ba", loss_fn=nn.functional.cross_entropy, algorithms=[
        algorithm(event) for event in STEP_EVENTS], device="cpu", trace="all", seed=0, flush_interval=1000)
    trainer.fit()  # (the first steps set up what the later ones reuse)
    return (core_bytecodes(trainer, 8) - core_bytecodes(trainer, 4)) / 4


def core_bytecodes(trainer: Trainer, steps: int) -> int:
    """Bytecodes executed in core modules while ``trainer`` fits ``steps`` more steps."""
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
    return count


@pytest.mark.parametrize("algorithm", [Declared, Undeclared])
def test_calls_cost_the_core_the_same_bytecodes_at_any_model_size(algorithm):
    assert core_bytecodes_per_step(algorithm, 4) == core_bytecodes_per_step(algorithm, 322) > 0


@pytest.mark.parametrize("tensors", [4, 322])
def test_undeclared_calls_cost_more_than_declared_ones(tensors):
    """The check has teeth: undeclared calls are watched for writes to the model, and the count says so."""
    assert core_bytecodes_per_step(Undeclared, tensors) > core_bytecodes_per_step(Declared, tensors)


@pytest.mark.parametrize("tensors", [4, 322])
def test_an_undeclared_call_reads_no_parameter_during_a_fit(tensors):
    """What the bytecodes cannot see (the parameters' versions read in C, by ``map``), a
    parameter that counts its reads does: inside a fit, undeclared calls read none, whatever the
    model's size (before issue 31, each call read every parameter's version)."""
    data = [(torch.randn(4, 4), torch.randint(0, 4, (4,))) for _ in range(4)]
    trainer = Trainer(counted_mlp(tensors), data, "2ba", loss_fn=nn.functional.cross_entropy, algorithms=[
        Undeclared(event) for event in STEP_EVENTS], device="cpu", trace="all", seed=0, progress_bar=False)
    trainer.fit()  # (the first fit walks the model)
    calls_before, Counted.reads = trainer.trace.invocations.matched.sum(), 0
    trainer.fit("4ba")
    assert Counted.reads == 0 and trainer.trace.invocations.matched.sum() - calls_before == 4 * len(STEP_EVENTS)
