"""A probe forward: what the model returns for one example of the batch, read without changing it.

Algorithms that must learn something about the model before the step's own forward (MixUp's
and CutMix's number of classes, whether the model accepts the smaller inputs Selective
Backprop and ProgressiveResizing will give it) ask it here. The probe runs the model itself,
as the user built it: no parameter or buffer is moved, replaced or re-registered (aliased
modules, tied weights and parametrizations are whatever they are), gradients are off, every
module is in eval mode (BatchNorm reads its running statistics and updates none, dropout draws
nothing) and each module's own ``training`` flag is put back afterwards, also when the forward
fails. The CPU random state is restored too, for models that draw in eval mode.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch import nn

from composer_lab.algorithms.batch_selection import prune_batch
from composer_lab.core.state import State, batch_with_item

__all__ = ["eval_mode", "probe_outputs", "check_accepts"]


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Every module of ``model`` in eval mode inside; each module's own flag restored after
    (a module the user keeps in eval mode stays so)."""
    modules = list(model.modules()) if isinstance(model, nn.Module) else []
    flags = [m.training for m in modules]
    try:
        for m in modules:
            m.training = False
        yield
    finally:
        for m, flag in zip(modules, flags):
            m.training = flag


def probe_outputs(state: State, inputs: torch.Tensor) -> Any:
    """The model's outputs for the first example of ``state.batch`` with ``inputs`` (N, ...) as
    its inputs: ``model(inputs[:1])`` with a loss function, ``model(batch[:1])`` (inputs
    replaced) for a model with its own loss. Exceptions of the model's forward propagate."""
    if state.loss_fn is not None:
        argument = inputs[:1]
    else:
        first = prune_batch(state.batch, torch.zeros(1, dtype=torch.long, device=inputs.device), inputs.shape[0])
        argument = batch_with_item(first, 0, inputs[:1])
    with torch.no_grad(), eval_mode(state.model), torch.random.fork_rng(devices=[]), state.precision_context():
        return state.model(argument)


def check_accepts(state: State, inputs: torch.Tensor, refusal: str) -> None:
    """ValueError ``"<refusal> (<the model's error>)"`` when the model's forward refuses
    ``inputs`` (an algorithm's changed inputs, checked on one example before training on them)
    but takes the batch's own inputs; nothing when it takes both, or neither (then the
    algorithm is not to blame)."""
    try:
        probe_outputs(state, inputs)
    except Exception as err:  # whatever the user's forward raises
        try:
            probe_outputs(state, state.batch_get_item(0))
        except Exception:
            return
        raise ValueError(f"{refusal} (the model raised {type(err).__name__}: {err})") from err
