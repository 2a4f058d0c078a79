"""The mechanism shared by LowPrecisionLayerNorm and LowPrecisionGroupNorm: a norm layer that,
under autocast, runs in the autocast dtype instead of the float32 autocast gives norms.

Autocast runs ``layer_norm`` and ``group_norm`` in float32 (on CPU and CUDA alike). The
low-precision layers cast their input, weight and bias to the autocast dtype of the input's
device (``torch.get_autocast_dtype``: bfloat16 under CPU ``amp_bf16``) and run the norm with
autocast off, so the output is in that dtype. Without autocast they are the plain norm.
Composer checks ``torch.is_autocast_enabled()``, which is CUDA's autocast only, so its layers run
in float32 under CPU autocast; here the input's device decides.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

import torch
from torch import nn

from composer_lab.algorithms.module_surgery import replace_modules, warn_if_unchanged
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core.event import Event
from composer_lab.core.state import State

__all__ = ["cast_if_autocast_enabled", "autocast_off", "low_precision_surgery", "LowPrecisionNormSurgery",
           "LOW_PRECISIONS"]

LOW_PRECISIONS = ("amp_fp16", "amp_bf16")
"""The precisions under which the low-precision norms do anything (Composer's ``Precision`` values)."""

_APPLY_AT = (Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD)


def cast_if_autocast_enabled(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``tensor`` in the autocast dtype of its device when autocast is on there, else as it is."""
    if tensor is None or not torch.is_autocast_enabled(tensor.device.type):
        return tensor
    return tensor.to(dtype=torch.get_autocast_dtype(tensor.device.type))


def autocast_off(x: torch.Tensor) -> torch.autocast:
    """A context with autocast off on ``x``'s device."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def adopt_parameters(new: nn.Module, old: nn.Module) -> nn.Module:
    """Give ``new`` the ``weight`` and ``bias`` Parameter objects (or None) of ``old``, so
    optimizers built before the surgery keep training them; returns ``new``."""
    new.weight, new.bias = old.weight, old.bias
    return new


def _precision_name(precision: Any) -> Optional[str]:
    """A precision given as Composer's ``Precision`` enum or its value, as its value."""
    return getattr(precision, "value", precision)


def low_precision_surgery(model: nn.Module, precision: Any, kind: type[nn.Module],
                          convert: Callable[[nn.Module], nn.Module], algorithm: str) -> list[str]:
    """Replace every module of exactly the class ``kind`` in ``model`` by ``convert(module)`` when
    ``precision`` is a low precision; returns the names replaced. Warns
    :class:`~composer_lab.algorithms.warnings.NoEffectWarning` (and changes nothing) in another
    precision, or when there is no ``kind``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{algorithm} needs a torch.nn.Module, got {type(model).__name__}; pass the model itself")
    if _precision_name(precision) not in LOW_PRECISIONS:
        warnings.warn(NoEffectWarning(f"{algorithm} only applies under precision 'amp_fp16' or 'amp_bf16' "
                                      f"(autocast), got {_precision_name(precision)!r}: the model keeps "
                                      f"torch.nn.{kind.__name__}; train with Trainer(precision='amp_bf16')"),
                      stacklevel=3)
        return []
    replaced = replace_modules(model, lambda m: convert(m) if type(m) is kind else None)
    warn_if_unchanged(replaced, algorithm, model, f"it has no torch.nn.{kind.__name__}", stacklevel=3)
    return replaced


class LowPrecisionNormSurgery(StateDictSurgery):
    """A low-precision norm surgery at ``apply_at`` (INIT, BEFORE_LOAD or AFTER_LOAD), reading the
    run's precision from the State; subclasses give the ``norm`` class replaced and the function
    ``convert`` making its low-precision form."""

    norm: ClassVar[type[nn.Module]]
    convert: ClassVar[Callable[[nn.Module], nn.Module]]

    def __init__(self, apply_at: Union[Event, str] = Event.INIT) -> None:
        super().__init__()
        name = type(self).__name__
        try:
            self.apply_at = Event(apply_at)
        except ValueError:
            self.apply_at = None
        if self.apply_at not in _APPLY_AT:
            given = getattr(apply_at, "value", apply_at)
            raise ValueError(f"{name} applies at Event.INIT, Event.BEFORE_LOAD or Event.AFTER_LOAD, got "
                             f"apply_at={given!r}; pass one of those (Event.INIT is the default)")
        self.events = frozenset({self.apply_at})
        self._precision: Any = None

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return self.surgery(model, self._precision, optimizers)

    def apply(self, event: Event, state: State, logger: Any) -> Optional[int]:
        """The surgery under the run's precision (``state.precision``)."""
        self._precision = state.precision
        return super().apply(event, state, logger)

    def surgery(self, model: nn.Module, precision: Any, optimizers: Sequence) -> list[str]:
        """The functional form: replace the norms of ``model`` under ``precision``; the names replaced."""
        return low_precision_surgery(model, precision, self.norm, self.convert, type(self).__name__)
