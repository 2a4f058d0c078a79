"""The loop evaluation and prediction share: batches through the model in eval mode, without
gradients, each between its phase's events."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch

from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.state import State
from composer_lab.trainer.adapter import ModelAdapter
from composer_lab.trainer.batching import batch_size, batch_targets
from composer_lab.trainer.devices import move_to_device
from composer_lab.trainer.metrics import EvalMetrics
from composer_lab.trainer.rng import preserved_rng

__all__ = ["InferenceEvents", "EVAL_EVENTS", "PREDICT_EVENTS", "run_inference", "evaluate"]


class InferenceEvents(NamedTuple):
    """The events of one inference phase, and whether it computes the loss."""

    start: Event
    batch_start: Event
    before_forward: Event
    after_forward: Event
    batch_end: Event
    loss: bool


EVAL_EVENTS = InferenceEvents(Event.EVAL_START, Event.EVAL_BATCH_START, Event.EVAL_BEFORE_FORWARD,
                              Event.EVAL_AFTER_FORWARD, Event.EVAL_BATCH_END, loss=True)
PREDICT_EVENTS = InferenceEvents(Event.PREDICT_START, Event.PREDICT_BATCH_START, Event.PREDICT_BEFORE_FORWARD,
                                 Event.PREDICT_AFTER_FORWARD, Event.PREDICT_BATCH_END, loss=False)


def run_inference(engine: Engine, adapter: ModelAdapter, dataloader: Any, events: InferenceEvents,
                  take: Callable[[State], Any]) -> int:
    """``events.start``, then for each batch of ``dataloader`` its events around the forward
    (and loss), calling ``take(state)`` after it. The model is in eval mode (as at the start
    event) and restored after; no gradients; the global generators are left as they were, so
    an evaluation does not change the training that follows. Returns the number of batches;
    the caller fires the phase's end event once it has used what was taken."""
    state, run = engine.state, engine.run_event
    model, seen = state.model, 0
    was_training = model.training
    model.eval()
    try:
        run(events.start)
        with preserved_rng(), torch.no_grad(), engine.watching():
            for batch in dataloader:
                state.batch = move_to_device(batch, state.device)
                run(events.batch_start)
                run(events.before_forward)
                with state.precision_context():
                    state.outputs = adapter.forward(state.model, state.batch)
                    if events.loss:
                        state.loss = adapter.loss(state.model, state.outputs, state.batch)
                run(events.after_forward)
                take(state)
                run(events.batch_end)
                seen += 1
    finally:
        model.train(was_training)
    return seen


def evaluate(engine: Engine, adapter: ModelAdapter, dataloader: Any, metrics: EvalMetrics) -> dict[str, torch.Tensor]:
    """One evaluation: EVAL_BEFORE_ALL, the eval loop over ``dataloader`` accumulating
    ``metrics``, the results logged (phase 'eval'), EVAL_END, EVAL_AFTER_ALL; returns them."""
    run = engine.run_event
    run(Event.EVAL_BEFORE_ALL)
    metrics.reset()
    seen = run_inference(engine, adapter, dataloader, EVAL_EVENTS, lambda state: metrics.update(
        state.outputs, batch_targets(state.batch), state.loss, batch_size(state.batch)))
    if not seen:
        raise ValueError("eval_dataloader yielded no batches; give it at least one batch (check the dataset's "
                         "length, batch_size and drop_last)")
    results = metrics.compute()
    engine.logger.log_metrics(results, phase="eval")
    run(Event.EVAL_END)
    run(Event.EVAL_AFTER_ALL)
    return results
