"""A training batch as an optimizer closure, Composer's contract: ``optimizer.step(closure=...)``.

The closure runs the whole batch: BEFORE_TRAIN_BATCH, the gradients zeroed, forward, loss and
backward of each microbatch, AFTER_TRAIN_BATCH; it returns the batch's loss (a tensor: no host
read). An optimizer may call it more than once in a step (SAM computes the gradient at a second
point): each call trains the batch again from the batch as the dataloader gave it, and
``state.closure_call`` says which call is running (0, 1, ...; 0 again after the step). It
accepts Composer's keyword arguments: ``ddp_sync=False`` keeps the gradients local (no all-reduce
under DDP), ``loss_dict`` (a dict) receives the loss instead of the batch's logged loss (SAM's
second call is not logged).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.amp.grad_scaler import OptState

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.state import EditCountingList, State
from composer_lab.trainer.adapter import ModelAdapter
from composer_lab.trainer.batching import batch_size, split_batch

__all__ = ["BatchClosure", "uses_closures", "step_optimizers", "LOSS_KEY"]

LOSS_KEY = "loss/train/total"
"""The key under which the closure puts the batch's loss in a ``loss_dict`` (Composer's)."""

_NO_GRAPH = Algorithm.backwards_create_graph  # (the base class's property: False)


def uses_closures(optimizers: Any, scaler: Any) -> bool:
    """Whether the step goes through the closure, as in Composer: always, except with a fp16
    GradScaler, where only when every optimizer says it can (``_step_supports_amp_closure``)."""
    return scaler is None or all(getattr(opt, "_step_supports_amp_closure", False) for opt in optimizers)


class BatchClosure:
    """The closure of the batch in ``state.batch`` (:meth:`prepare` it each batch), run through
    ``run_event``; ``watch`` receives the loss of each call that is logged (the DDP mean and the
    non-finite check live there) and returns what the batch logs."""

    def __init__(self, state: State, run_event: Callable[[Event], Any], adapter: ModelAdapter, ddp: Any,
                 microbatch_size: Optional[int], watch: Callable[[torch.Tensor], Any]) -> None:
        self.state, self.run_event, self.adapter, self.ddp = state, run_event, adapter, ddp
        self.microbatch_size, self.watch = microbatch_size, watch
        self.scaler: Any = None
        """The fp16 GradScaler (the trainer's), or None."""
        self.logged: Any = None
        """What the batch logs as its loss, from its last logged call."""
        self.loss: Any = None
        """The loss of the last call."""
        self.samples = 0
        self._batch: Any = None
        self._calls = 0
        self._graph_askers: list[Algorithm] = []  # the algorithms that may ask for a backward graph
        self._askers_generation = -1  # EditCountingList.generation when they were worked out

    def prepare(self, samples: int) -> "BatchClosure":
        """Make the closure of the batch now in ``state.batch``, of ``samples`` examples."""
        self._batch, self.samples, self._calls, self.logged, self.loss = self.state.batch, samples, 0, None, None
        return self

    def __call__(self, ddp_sync: bool = True, loss_dict: Optional[dict] = None, **kwargs: Any) -> torch.Tensor:
        """Train the batch once more; returns its loss."""
        state, run = self.state, self.run_event
        state.closure_call, self._calls = self._calls, self._calls + 1
        state.batch = self._batch
        run(Event.BEFORE_TRAIN_BATCH)
        for optimizer in state.optimizers:
            optimizer.zero_grad(set_to_none=True)
        self.loss = loss = self._microbatches(ddp_sync)
        state.batch, state.microbatch = self._batch, None
        if loss_dict is not None:
            loss_dict[LOSS_KEY] = loss
        else:
            self.logged = self.watch(loss)
        if self.scaler is not None:
            for optimizer in state.optimizers:
                self.scaler.unscale_(optimizer)
        run(Event.AFTER_TRAIN_BATCH)
        return loss

    def _microbatches(self, ddp_sync: bool) -> torch.Tensor:
        """Forward, loss and backward of each microbatch; the batch's loss (detached), the sum of
        the microbatches' weighted by their share."""
        size, samples, create_graph = self.microbatch_size, self.samples, self._create_graph()
        if size is None or size >= samples:
            return self._microbatch(0, self._batch, 1.0, ddp_sync, create_graph).detach()
        microbatches = split_batch(self._batch, size)
        total: Any = 0.0
        for index, microbatch in enumerate(microbatches):
            last = index == len(microbatches) - 1
            share = batch_size(microbatch) / samples
            total = total + self._microbatch(index, microbatch, share, last and ddp_sync, create_graph).detach()
        return total

    def _create_graph(self) -> bool:
        """Whether this batch's backward builds a graph (an algorithm's ``backwards_create_graph``).
        Only an algorithm whose class overrides :attr:`Algorithm.backwards_create_graph` can say so:
        those are worked out again when :attr:`EditCountingList.generation` moved (the list assigned
        or edited), and asked every batch (a property may change its answer)."""
        if self._askers_generation != EditCountingList.generation:
            generation = EditCountingList.generation  # (read first: an edit meanwhile moves it again)
            self._graph_askers = [a for a in self.state.algorithms
                                  if getattr(type(a), "backwards_create_graph", None) is not _NO_GRAPH]
            self._askers_generation = generation
        return any([a.backwards_create_graph for a in self._graph_askers]) if self._graph_askers else False

    def _microbatch(self, index: int, microbatch: Any, share: float, sync: bool, create_graph: bool) -> torch.Tensor:
        """Forward, loss and backward of one microbatch, its loss weighted by its ``share`` of
        the batch (gradients add up to the whole batch's); returns that loss. ``sync``: under
        DDP, all-reduce the gradients in this backward."""
        state, run, adapter = self.state, self.run_event, self.adapter
        precision = state.precision_context()
        state.microbatch, state.batch = index, microbatch
        run(Event.BEFORE_FORWARD)
        with precision, self.ddp.training_forward(state, sync) as model:  # (under torchrun: DDP's wrapper)
            state.outputs = adapter.forward(model, state.batch)
        run(Event.AFTER_FORWARD)
        run(Event.BEFORE_LOSS)
        with precision:
            state.loss = adapter.loss(state.model, state.outputs, state.batch)
        run(Event.AFTER_LOSS)
        run(Event.BEFORE_BACKWARD)
        loss = state.loss if share == 1.0 else state.loss * share
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward(create_graph=create_graph)
        run(Event.AFTER_BACKWARD)
        return loss



def step_optimizers(optimizers: list, closure: BatchClosure, scaler: Any) -> None:
    """Step each optimizer over the batch of ``closure``: through ``optimizer.step(closure=...)``
    where :func:`uses_closures` says so (a fp16 GradScaler's step is then wrapped as Composer's
    ``ClosureGradScaler`` does), else the closure runs once and each optimizer steps after it.
    The batch is trained once for all optimizers: a later optimizer's first call of the closure
    gets the batch's loss, the gradients being there already (Composer trains it again for each
    optimizer); a further call trains it again."""
    if not uses_closures(optimizers, scaler):
        closure()
        for optimizer in optimizers:
            scaler.step(optimizer)
        return
    for index, optimizer in enumerate(optimizers):
        call = closure if index == 0 else _reusing(closure)
        optimizer.step(closure=call if scaler is None else _amp_closure(scaler, optimizers, call))


def _reusing(closure: BatchClosure) -> Callable[..., Any]:
    """``closure``, except that its first call returns the loss its last call computed."""
    first = [True]

    def call(**kwargs: Any) -> Any:
        if first:
            first.clear()
            return closure.loss
        return closure(**kwargs)
    return call


def _amp_closure(scaler: torch.amp.GradScaler, optimizers: list, closure: Callable[..., Any]) -> Callable[..., Any]:
    """``closure`` under a fp16 GradScaler, as Composer's ``ClosureGradScaler`` runs it: each call may unscale the
    gradients again, and returns None (the optimizer skips its update) when they hold infinities or NaNs (one host
    read a call, as in Composer)."""
    def call(**kwargs: Any) -> Any:
        states = [scaler._per_optimizer_states[id(optimizer)] for optimizer in optimizers]
        for state in states:
            state["stage"] = OptState.READY
        loss = closure(**kwargs)
        found = sum(float(v) for state in states for v in state["found_inf_per_device"].values())
        return None if found else loss
    return call
