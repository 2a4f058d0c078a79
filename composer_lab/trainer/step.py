"""A training batch applied: the optimizers step over the batch's closure, then the schedulers,
the step's metrics and the timestamp's advance (by the batch's wall-clock duration).

A batch is *applied* once all of that happened; a stop pressed meanwhile (SIGINT) waits until
then (:class:`~composer_lab.trainer.failures.InterruptGuard`), so the weights, the optimizer and
the timestamp always agree.
"""

from __future__ import annotations

from typing import Any

import torch

from composer_lab.trainer import distributed
from composer_lab.trainer.closure import step_optimizers

__all__ = ["THROUGHPUT_EVERY", "train_batch", "watch_loss"]

THROUGHPUT_EVERY = 50
"""'throughput/samples_per_sec' is logged every this many batches (host timings) and at epoch ends."""


def train_batch(trainer: Any, samples: int) -> None:
    """Apply the batch in ``trainer.state.batch``, of ``samples`` examples on this rank: its
    forward, loss and backward run in the closure the optimizers' steps call."""
    state, guard, scaler = trainer.state, trainer._guard, trainer.scaler
    trainer.closure.scaler = scaler  # (a failed batch replaces the trainer's)
    closure = trainer.closure.prepare(samples)
    guard.held = True
    try:
        step_optimizers(state.optimizers, closure, scaler)
        state.closure_call = 0
        if scaler is not None:
            scaler.update()
        for scheduler in state.schedulers:  # (read at every step: an algorithm may replace them)
            scheduler.step()
        if trainer.ddp.enabled:
            samples = distributed.sum_over_ranks(samples)
        trainer.logger.log_train_step(closure.logged, state.optimizers[0].param_groups[0]["lr"])
        if (state.timestamp.batch + 1) % THROUGHPUT_EVERY == 0:
            trainer.throughput.log(trainer.logger, state.timestamp.sample + samples)
        state.timestamp = state.timestamp.to_next_batch(samples, trainer.clock.lap())
        trainer.feed.applied()
    finally:
        state.closure_call = 0
        guard.release()


def watch_loss(trainer: Any, loss: torch.Tensor) -> Any:
    """What a batch logs of its ``loss``: the mean over the ranks under DDP, kept for the non-finite check."""
    if trainer.ddp.enabled:
        loss = distributed.mean_over_ranks(loss, trainer.closure.samples)  # every rank agrees
    return trainer.nonfinite.watch(loss, trainer.engine.trace, trainer.state.timestamp, trainer._batch_seq)
