"""The one calling convention the loop uses: ``forward(model, batch)`` and ``loss(model, outputs, batch)``.

A model is either a plain ``nn.Module`` plus a ``loss_fn(outputs, targets)``, or a module with
its own ``forward(batch)`` and ``loss(outputs, batch)``. The adapter looks the model up at call
time (``state.model``), so model surgery that replaces it is seen at the next step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

import torch

from composer_lab.trainer.batching import batch_inputs, batch_targets
from composer_lab.trainer.checks import check_model

__all__ = ["ModelAdapter", "dict_outputs_message"]


class ModelAdapter:
    """Calls ``model`` the way its form needs; ``loss_fn`` None means the model has ``loss``."""

    def __init__(self, model: Any, loss_fn: Optional[Callable[..., torch.Tensor]]) -> None:
        check_model(model, loss_fn)
        self.loss_fn = loss_fn

    def forward(self, model: torch.nn.Module, batch: Any) -> Any:
        """The model's outputs for ``batch``."""
        if self.loss_fn is None:
            return model(batch)
        return model(batch_inputs(batch))

    def loss(self, model: torch.nn.Module, outputs: Any, batch: Any) -> torch.Tensor:
        """The (mean-reduced) training loss of ``outputs`` on ``batch``."""
        if self.loss_fn is None:
            return model.loss(outputs, batch)
        try:
            return self.loss_fn(outputs, batch_targets(batch))
        except TypeError:
            if isinstance(outputs, Mapping):
                raise TypeError(dict_outputs_message(model, outputs)) from None
            raise


def dict_outputs_message(model: Any, outputs: Mapping) -> str:
    """Why ``loss_fn`` failed on the dict ``outputs`` of ``model``, and the fixes."""
    name, keys = type(model).__name__, list(outputs)
    return (f"the model {name} returned a dict (keys {keys[:6]}) and loss_fn takes a tensor; give {name} a method "
            f"loss(outputs, batch) and pass loss_fn=None, wrap a Hugging Face model in "
            f"composer_lab.models.HuggingFaceModel, or return the tensor from forward (e.g. outputs[{keys[0]!r}])"
            if keys else f"the model {name} returned an empty dict; return the outputs loss_fn takes")
