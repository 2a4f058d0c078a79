"""The trace's cost per step does not grow with the model (issues 21 and 31), pinned by what a
step reads rather than by time or bytecodes: inside a fit, calls that declare ``writes`` without
'model' and calls that declare nothing (what each call does is watched, not what the model is)
read no parameter's version, whatever the model's size."""

import pytest
import torch
from torch import nn

from composer_lab import Algorithm, Event, Trainer

from .test_changes import Counted, counted_mlp

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


@pytest.mark.parametrize("algorithm", [Declared, Undeclared])
@pytest.mark.parametrize("tensors", [4, 322])
def test_a_call_reads_no_parameter_during_a_fit(tensors, algorithm):
    """A parameter that counts its reads: inside a fit, neither declared nor undeclared calls read
    one, whatever the model's size (each call does not compare the model, it watches the call)."""
    data = [(torch.randn(4, 4), torch.randint(0, 4, (4,))) for _ in range(4)]
    trainer = Trainer(counted_mlp(tensors), data, "2ba", loss_fn=nn.functional.cross_entropy, algorithms=[
        algorithm(event) for event in STEP_EVENTS], device="cpu", trace="all", seed=0, progress_bar=False)
    trainer.fit()  # (the first fit walks the model)
    calls_before, Counted.reads = trainer.trace.invocations.matched.sum(), 0
    trainer.fit("4ba")
    assert Counted.reads == 0 and trainer.trace.invocations.matched.sum() - calls_before == 4 * len(STEP_EVENTS)


def test_outside_a_fit_an_undeclared_call_reads_every_parameter():
    """The count has teeth: an engine driven by hand signs the model around an undeclared call."""
    trainer = Trainer(counted_mlp(4), [(torch.randn(4, 4), torch.randint(0, 4, (4,)))], "1ba",
                      loss_fn=nn.functional.cross_entropy, algorithms=[Undeclared(Event.AFTER_LOSS)], device="cpu",
                      progress_bar=False)
    Counted.reads = 0
    trainer.engine.run_event(Event.AFTER_LOSS)
    assert Counted.reads == 2 * 4  # (four parameters, before and after the call)
