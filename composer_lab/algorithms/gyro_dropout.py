"""GyroDropout (Park et al., 2022): dropout that trains a fixed set of ``sigma`` subnetworks.

Every ``nn.Dropout`` becomes a :class:`GyroDropoutLayer`. At its first training forward the
layer draws ``sigma`` masks over the input's features (last dimension); every ``iter_num``
training steps it picks ``tau`` of them, and each ``1 / tau`` of the batch (consecutive rows) is
dropped with one of them, scaled by ``1 / (1 - p)``. ``iter_num = int(total_steps / sigma) * tau``
(at least 1), so each preselected mask is used about once over the run. In eval mode the layer
is the identity. The masks are drawn from the run's generator and saved with the algorithm, so
a resumed run drops what the uninterrupted run dropped.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import torch
from torch import nn

from composer_lab.algorithms.module_surgery import replace_modules
from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm
from composer_lab.algorithms.validation import check_fraction, check_positive
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core.algorithm import describe
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.time import TimeUnit

__all__ = ["GyroDropout", "GyroDropoutLayer", "apply_gyro_dropout"]


def _check_hparams(p: Any, sigma: Any, tau: Any) -> tuple[float, int, int]:
    return (check_fraction("p", p, high_open=True), check_positive("sigma", sigma, integer=True),
            check_positive("tau", tau, integer=True))


class GyroDropoutLayer(nn.Module):
    """Gyro dropout of one layer (see the module's docstring); ``generator`` (CPU) draws the
    masks, torch's global generator when None."""

    def __init__(self, iters_per_epoch: int, max_epoch: int, p: float, sigma: int, tau: int,
                 generator: Optional[torch.Generator] = None) -> None:
        super().__init__()
        self.p, self.sigma, self.tau = _check_hparams(p, sigma, tau)
        self.iters_per_epoch = iters_per_epoch
        self.max_epoch = max_epoch
        self.generator = generator
        self.preselect_masks = torch.empty(0, 0)
        self.selected_masks = torch.empty(0, 0)
        self.dropout_mask = torch.empty(0, 0)
        self.training_step = 0
        self.iter_num = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        if self.training_step == 0:
            self._preselect(x.shape[-1])
        elif x.shape[-1] != self.preselect_masks.shape[1]:
            raise ValueError(f"GyroDropout: a dropout layer met inputs of {x.shape[-1]} features after drawing its "
                             f"masks for {self.preselect_masks.shape[1]}; one nn.Dropout module is used at layers of "
                             f"different widths: give each its own nn.Dropout, or leave GyroDropout out")
        if self.training_step % self.iter_num == 0:
            pick = torch.randint(self.sigma, (self.tau,), generator=self.generator)
            self.selected_masks = self.preselect_masks[pick]
        rows = math.ceil(x.shape[0] / self.tau)
        mask = torch.repeat_interleave(self.selected_masks, rows, dim=0)[:x.shape[0]]
        mask = mask.to(device=x.device, dtype=x.dtype).reshape(x.shape[0], *[1] * (x.dim() - 2), x.shape[-1])
        self.dropout_mask = mask
        self.training_step += 1
        return x * mask * (1 / (1 - self.p))

    def _preselect(self, features: int) -> None:
        self.preselect_masks = (torch.rand(self.sigma, features, generator=self.generator) > self.p).float()
        self.iter_num = max(1, int(self.iters_per_epoch * self.max_epoch / self.sigma) * self.tau)

    def gyro_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the layer: its masks and where it is in its schedule."""
        return {"preselect_masks": self.preselect_masks, "selected_masks": self.selected_masks,
                "training_step": self.training_step, "iter_num": self.iter_num}

    def load_gyro_state(self, state: dict[str, Any]) -> None:
        self.preselect_masks, self.selected_masks = state["preselect_masks"].cpu(), state["selected_masks"].cpu()
        self.training_step, self.iter_num = state["training_step"], state["iter_num"]


def apply_gyro_dropout(model: nn.Module, iters_per_epoch: int, max_epoch: int, p: float, sigma: int, tau: int,
                       generator: Optional[torch.Generator] = None) -> list[str]:
    """Replace every ``nn.Dropout`` of ``model`` (exactly that class, each module once) by a
    :class:`GyroDropoutLayer` with these settings, in place (the layers' own ``p`` gives way to
    ``p``, as in Composer); returns the names replaced. Warns
    :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when there is none."""
    _check_hparams(p, sigma, tau)
    check_positive("iters_per_epoch", iters_per_epoch, integer=True)
    check_positive("max_epoch", max_epoch, integer=True)
    replaced = replace_modules(model, lambda m: GyroDropoutLayer(iters_per_epoch, max_epoch, p, sigma, tau, generator)
                               if type(m) is nn.Dropout else None)
    if not replaced:
        warnings.warn(NoEffectWarning(f"GyroDropout changed nothing in {type(model).__name__}: it has no "
                                      f"torch.nn.Dropout"), stacklevel=2)
    return replaced


def _schedule(state: State) -> tuple[int, int]:
    """``(iters_per_epoch, max_epoch)`` whose product is the run's length in batches."""
    duration, per_epoch = state.max_duration, state.dataloader_len
    if duration.unit is TimeUnit.EPOCH and per_epoch:
        return per_epoch, duration.value
    if duration.unit is TimeUnit.BATCH:
        return duration.value, 1
    raise ValueError(f"GyroDropout schedules its masks over the run's batches, but max_duration={duration} cannot be "
                     f"turned into batches; give it in batches ('1000ba') or in epochs ('2ep') with a dataloader "
                     f"that has a length")


class GyroDropout(SurgeryAlgorithm):
    """Replaces every ``nn.Dropout`` by a :class:`GyroDropoutLayer` at FIT_START (it needs the
    run's length), drawing the masks from the run's generator.

    Args:
        p: the fraction of features each mask drops, in [0, 1).
        sigma: the number of masks (subnetworks) drawn.
        tau: the number of masks used at once, each on ``1 / tau`` of the batch.
    """

    events = frozenset({Event.FIT_START})
    writes = frozenset({"model"})

    def __init__(self, p: float = 0.5, sigma: int = 256, tau: int = 16) -> None:
        super().__init__()
        self.p, self.sigma, self.tau = _check_hparams(p, sigma, tau)
        self._layers: list[GyroDropoutLayer] = []
        self._loaded: Optional[list[dict[str, Any]]] = None
        self._schedule: tuple[int, int] = (1, 1)
        self._generator: Optional[torch.Generator] = None

    @staticmethod
    def required_on_load() -> bool:
        return True

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        """The surgery at the first FIT_START on a model (a later ``fit`` keeps the layers and their schedule)."""
        if self._layers and any(m is self._layers[0] for m in state.model.modules()):
            return None
        self._schedule, self._generator = _schedule(state), state.generator("cpu")
        super().apply(event, state, logger)
        self._layers = [m for m in state.model.modules() if isinstance(m, GyroDropoutLayer)]
        if self._loaded is not None:
            self.load_state_dict({"layers": self._loaded})
        return None

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return apply_gyro_dropout(model, *self._schedule, self.p, self.sigma, self.tau, self._generator)

    def state_dict(self) -> dict[str, Any]:
        return {**describe(self), "layers": [layer.gyro_state() for layer in self._layers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The layers' masks and steps; kept until FIT_START's surgery when loaded before it."""
        if not self._layers:
            self._loaded = state["layers"]
            return
        if len(state["layers"]) != len(self._layers):
            raise ValueError(f"GyroDropout: the checkpoint holds {len(state['layers'])} gyro dropout layers, this "
                             f"model {len(self._layers)}; resume with the model the run trained")
        for layer, saved in zip(self._layers, state["layers"]):
            layer.load_gyro_state(saved)
        self._loaded = None
