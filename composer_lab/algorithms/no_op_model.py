"""NoOpModel: replace the model with one that computes nothing, to time the data pipeline alone.

:class:`NoOpModelClass` has one parameter, ``weights`` (1.5), which the optimizers then hold
instead of the model's (so an optimizer step still runs). Given the whole batch (a model with
its own ``loss``, as Composer's models are) it returns ``targets * weights`` and its ``loss`` is
their mean squared error to the targets, as in Composer. Given only the inputs (a run with a
``loss_fn``) it returns ``weights`` broadcast to the shape the original model's outputs have,
learnt from one forward of the original model on the first inputs (without gradients and
without drawing from the random generators), so the run's ``loss_fn`` still applies.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms.module_surgery import update_params_in_optimizer
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State, batch_item

__all__ = ["NoOpModel", "NoOpModelClass", "apply_no_op_model"]


class NoOpModelClass(nn.Module):
    """A stand-in for ``original_model`` (see the module's docstring); keeps its ``num_classes``."""

    def __init__(self, original_model: nn.Module) -> None:
        super().__init__()
        if not isinstance(original_model, nn.Module):
            raise TypeError(f"NoOpModel needs a torch.nn.Module, got {type(original_model).__name__}; pass the "
                            f"model itself")
        anchor = next(original_model.parameters(), None)
        self.weights = nn.Parameter(torch.tensor([1.5], device=anchor.device if anchor is not None else None))
        if hasattr(original_model, "num_classes"):
            self.num_classes = original_model.num_classes
        self._original = [original_model]  # (a list: not a submodule) until the output shape is known
        self._output_shape: Optional[tuple[int, ...]] = None

    def forward(self, batch: Any) -> torch.Tensor:
        if not isinstance(batch, torch.Tensor):  # the whole batch
            return batch_item(batch, 1) * self.weights
        if self._output_shape is None:
            self._output_shape = _output_shape(self._original.pop(), batch)
        return self.weights.expand(batch.shape[0], *self._output_shape)

    def loss(self, outputs: torch.Tensor, batch: Any) -> torch.Tensor:
        return F.mse_loss(outputs, batch_item(batch, 1).to(outputs.dtype))


def _output_shape(model: nn.Module, inputs: torch.Tensor) -> tuple[int, ...]:
    """The per-example shape of ``model``'s outputs on ``inputs``: one forward, without gradients,
    that leaves torch's global random state as it was."""
    anchor = next(model.parameters(), None)
    inputs = inputs.to(anchor.device) if anchor is not None else inputs
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        outputs = model(inputs)
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"NoOpModel stands in for models whose outputs are tensors, and {type(model).__name__} "
                        f"gave {type(outputs).__name__}; give the model its own loss(outputs, batch) and no loss_fn")
    return tuple(outputs.shape[1:])


def apply_no_op_model(model: nn.Module, optimizers: Any = None) -> NoOpModelClass:
    """A :class:`NoOpModelClass` for ``model``; the ``optimizers`` drop ``model``'s parameters and
    hold its ``weights`` instead. The caller trains the returned model."""
    new = NoOpModelClass(model)
    if optimizers:
        update_params_in_optimizer(model.parameters(), new.parameters(), optimizers)
    return new


class NoOpModel(Algorithm):
    """Replaces ``state.model`` by :func:`apply_no_op_model` at INIT, the optimizers following."""

    events = frozenset({Event.INIT})
    writes = frozenset({"model", "optimizers"})

    @staticmethod
    def required_on_load() -> bool:
        return True

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        state.model = apply_no_op_model(state.model, state.optimizers)
        return None
