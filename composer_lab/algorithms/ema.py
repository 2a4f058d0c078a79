"""Exponential moving average of the weights (Polyak averaging): evaluate with the average.

The average is updated after optimizer steps; each evaluation swaps it into the model and
swaps the training weights back afterwards (by exchanging tensor storage, no copy), so the
Parameter objects and the optimizer are untouched.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeUnit, ensure_time

__all__ = ["EMA", "compute_ema", "averaged_tensors"]


def averaged_tensors(model: nn.Module) -> list[torch.Tensor]:
    """What EMA averages: every parameter and every floating-point buffer, in a fixed order."""
    return list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]


@torch.no_grad()
def _lerp_towards(averages: list[torch.Tensor], current: list[torch.Tensor], weight: float) -> None:
    torch._foreach_lerp_(averages, current, weight)


def compute_ema(model: nn.Module, ema_model: Union[nn.Module, list[torch.Tensor]], smoothing: float = 0.99) -> None:
    """``ema = smoothing * ema + (1 - smoothing) * weights``, in place, for every averaged tensor
    of ``model`` (``ema_model`` is a module of the same architecture or a list of tensors)."""
    check_fraction("smoothing", smoothing)
    averages = averaged_tensors(ema_model) if isinstance(ema_model, nn.Module) else ema_model
    current = averaged_tensors(model)
    if len(averages) != len(current):
        raise ValueError(f"the EMA holds {len(averages)} tensors but the model has {len(current)}; the EMA "
                         f"model must have the model's architecture")
    _lerp_towards(averages, current, 1.0 - smoothing)


def _in_batches(time: Time, state: State, name: str) -> int:
    if time.unit is TimeUnit.BATCH:
        return time.value
    if time.unit is TimeUnit.EPOCH and state.dataloader_len:
        return time.value * state.dataloader_len
    raise ValueError(f"{name}={time} cannot be turned into batches; give it in batches ('1000ba') or in "
                     f"epochs ('2ep') with a dataloader that has a length")


class EMA(Algorithm):
    """Keeps an exponential moving average of the weights and evaluates with it.

    Args:
        half_life: the time after which a weight's contribution halves ('1000ba', '1ep');
            or None when ``smoothing`` is given.
        smoothing: the per-update decay, in [0, 1]; only without ``half_life``.
        update_interval: how often to update the average ('1ba').
    """

    def __init__(self, half_life: Optional[str] = "1000ba", smoothing: Optional[float] = None,
                 update_interval: str = "1ba") -> None:
        if (half_life is None) == (smoothing is None):
            raise ValueError("EMA needs exactly one of half_life (e.g. '1000ba') and smoothing (e.g. 0.999); "
                             "pass half_life=None with smoothing")
        self.half_life = None if half_life is None else ensure_time(half_life, "half_life")
        self.smoothing = None if smoothing is None else check_fraction("smoothing", smoothing)
        self.update_interval = ensure_time(update_interval, "update_interval")
        if not self.update_interval.is_period():
            raise ValueError(f"update_interval must be at least one batch or epoch, e.g. '1ba', got {update_interval}")
        self._averages: Optional[list[torch.Tensor]] = None
        self._interval = 1
        self._decay = 1.0
        self._steps = 0
        self._swapped = False

    events = frozenset({Event.FIT_START, Event.BATCH_END, Event.EVAL_BEFORE_ALL, Event.EVAL_AFTER_ALL})
    writes = {Event.FIT_START: frozenset(), Event.BATCH_END: frozenset(),  # (reads the model, writes its own averages)
              Event.EVAL_BEFORE_ALL: frozenset({"model"}), Event.EVAL_AFTER_ALL: frozenset({"model"})}  # (swaps)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.FIT_START:
            self._start(state)
        elif event is Event.BATCH_END:
            self._steps += 1
            if self._steps % self._interval == 0:
                _lerp_towards(self._averages, averaged_tensors(state.model), 1.0 - self._decay)
        elif self._averages is not None and (event is Event.EVAL_BEFORE_ALL) != self._swapped:
            self.swap(state.model)
        return None

    def _start(self, state: State) -> None:
        self._interval = _in_batches(self.update_interval, state, "update_interval")
        if self.half_life is not None:
            self._decay = 0.5 ** (self._interval / _in_batches(self.half_life, state, "half_life"))
        else:
            self._decay = self.smoothing
        if self._averages is None:
            self._averages = [t.detach().clone() for t in averaged_tensors(state.model)]

    @torch.no_grad()
    def swap(self, model: nn.Module) -> None:
        """Exchange the model's weights and the averages (call twice to undo).

        Storages are exchanged with ``set_`` under ``no_grad`` (no copy): an in-place write, so
        the tensors' version counters move and the trace sees the model change, which a write
        through ``.data`` hides."""
        for tensor, average in zip(averaged_tensors(model), self._averages):
            held = tensor.detach()  # the model's storage, kept while the tensor takes the average's
            tensor.set_(average)
            average.set_(held)
        self._swapped = not self._swapped

    @property
    def averages(self) -> Optional[list[torch.Tensor]]:
        """The averaged tensors (parameters, then float buffers), None before FIT_START."""
        return self._averages

    def state_dict(self) -> dict[str, Any]:
        return {"averages": self._averages, "steps": self._steps, "swapped": self._swapped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._averages, self._steps, self._swapped = state["averages"], state["steps"], state["swapped"]

    @staticmethod
    def required_on_load() -> bool:
        return True
