"""Gradient clipping by global norm, by value, or adaptively per unit (Brock et al., 2021)."""

from __future__ import annotations

from typing import Iterable, Optional, Union

import torch
from torch import nn

from composer_lab.algorithms.validation import check_choice, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["GradientClipping", "apply_gradient_clipping", "CLIPPING_TYPES"]

CLIPPING_TYPES = ("norm", "value", "adaptive")
_AGC_EPS = 1e-3


def _unitwise_norm(t: torch.Tensor) -> torch.Tensor:
    """The L2 norm of each output unit (dim 0) over all its other dimensions, broadcastable
    against ``t`` (a convolution's (out, in, kH, kW) gives (out, 1, 1, 1)); the whole tensor's
    norm for 0-D / 1-D tensors (biases, gains), as in Brock et al. (2021)."""
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True)


def _clip_adaptive(parameters: list[torch.Tensor], threshold: float) -> None:
    """Scale each unit's gradient to at most ``threshold`` times its weight norm (no host sync)."""
    for p in parameters:
        max_norm = _unitwise_norm(p.detach()).clamp_min(_AGC_EPS).mul_(threshold)
        grad_norm = _unitwise_norm(p.grad).clamp_min(1e-6)
        p.grad.mul_((max_norm / grad_norm).clamp_max(1.0))


def apply_gradient_clipping(parameters: Union[nn.Module, Iterable[torch.Tensor]], clipping_type: str = "norm",
                            clipping_threshold: float = 1.0) -> None:
    """Clip the gradients of ``parameters`` (or a module's) in place.

    'norm': scale all gradients so their global L2 norm is at most the threshold; 'value':
    clamp each element to ``[-threshold, threshold]``; 'adaptive': scale each unit's gradient to
    at most ``threshold`` times the norm of its weights.
    """
    check_choice("clipping_type", clipping_type, CLIPPING_TYPES)
    check_positive("clipping_threshold", clipping_threshold)
    params = parameters.parameters() if isinstance(parameters, nn.Module) else parameters
    params = [p for p in params if p.grad is not None]
    if not params:
        return
    if clipping_type == "norm":
        nn.utils.clip_grad_norm_(params, clipping_threshold, foreach=True)
    elif clipping_type == "value":
        nn.utils.clip_grad_value_(params, clipping_threshold, foreach=True)
    else:
        _clip_adaptive(params, clipping_threshold)


class GradientClipping(Algorithm):
    """Clips gradients at AFTER_TRAIN_BATCH, after the backward passes, before the optimizer step.

    Args:
        clipping_type: 'norm', 'value' or 'adaptive'.
        clipping_threshold: the norm, value or ratio bound.
    """

    def __init__(self, clipping_type: str = "norm", clipping_threshold: float = 1.0) -> None:
        self.clipping_type = check_choice("clipping_type", clipping_type, CLIPPING_TYPES)
        self.clipping_threshold = check_positive("clipping_threshold", clipping_threshold)

    events = frozenset({Event.AFTER_TRAIN_BATCH})
    writes = frozenset()  # it scales gradients, which the trace does not watch

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        apply_gradient_clipping(state.model, self.clipping_type, self.clipping_threshold)
        return None
