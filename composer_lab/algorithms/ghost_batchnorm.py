"""GhostBatchNorm (Hoffer et al., 2017): batch normalization over small "ghost" batches.

Each ``nn.BatchNorm1d/2d/3d`` is wrapped by a :class:`GhostBatchNorm1d/2d/3d` that splits the
batch (dimension 0) into chunks of at most ``ghost_batch_size`` samples and normalizes each with
its own statistics, as a smaller batch would. The wrapped BatchNorm keeps its Parameter objects
and running statistics (so optimizers stay valid); its momentum is divided by the number of
chunks while they update the running statistics, so one batch moves them as much as before.
In eval mode the running statistics are used, as by the plain BatchNorm.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence, Union

import torch
from torch import nn

from composer_lab.algorithms.module_surgery import replace_modules
from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm
from composer_lab.algorithms.validation import check_positive
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["GhostBatchNorm", "GhostBatchNorm1d", "GhostBatchNorm2d", "GhostBatchNorm3d", "apply_ghost_batchnorm"]


class _GhostBatchNorm(nn.Module):
    """Runs ``batchnorm`` on each chunk of at most ``ghost_batch_size`` samples of its input.

    A batch smaller than ``ghost_batch_size`` is one chunk (Composer raises instead); the first
    such training batch warns :class:`~composer_lab.algorithms.warnings.NoEffectWarning`.
    """

    def __init__(self, base_batchnorm: nn.modules.batchnorm._BatchNorm, ghost_batch_size: int = 32) -> None:
        super().__init__()
        self.ghost_batch_size = check_positive("ghost_batch_size", ghost_batch_size, integer=True)
        self.batchnorm = base_batchnorm
        self._warned = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        batch_size = input.shape[0]
        if self.training and batch_size < self.ghost_batch_size and not self._warned:
            self._warned = True
            warnings.warn(NoEffectWarning(
                f"GhostBatchNorm: a training batch of {batch_size} samples is smaller than ghost_batch_size="
                f"{self.ghost_batch_size}, so it is normalized as one batch, as plain BatchNorm would; set "
                f"ghost_batch_size below the batch size to normalize ghost batches"), stacklevel=2)
        nchunks = max(1, math.ceil(batch_size / self.ghost_batch_size))
        momentum = self.batchnorm.momentum
        scale = self.training and momentum is not None and nchunks > 1  # (None: a cumulative average, per chunk)
        if scale:
            self.batchnorm.momentum = float(momentum) / nchunks
        try:
            normalized = [self.batchnorm(chunk) for chunk in input.chunk(nchunks, 0)]
        finally:
            if scale:
                self.batchnorm.momentum = momentum
        return torch.cat(normalized, dim=0)

    @staticmethod
    def from_batchnorm(module: nn.Module, ghost_batch_size: int) -> _GhostBatchNorm:
        """The ghost wrapper of the BatchNorm ``module``'s dimension."""
        return _GHOST_TYPES[type(module)](module, ghost_batch_size=ghost_batch_size)


class GhostBatchNorm1d(_GhostBatchNorm):
    """Ghost batch normalization around an ``nn.BatchNorm1d``."""


class GhostBatchNorm2d(_GhostBatchNorm):
    """Ghost batch normalization around an ``nn.BatchNorm2d``."""


class GhostBatchNorm3d(_GhostBatchNorm):
    """Ghost batch normalization around an ``nn.BatchNorm3d``."""


_GHOST_TYPES = {nn.BatchNorm1d: GhostBatchNorm1d, nn.BatchNorm2d: GhostBatchNorm2d, nn.BatchNorm3d: GhostBatchNorm3d}


def apply_ghost_batchnorm(model: nn.Module, ghost_batch_size: int = 32,
                          optimizers: Optional[Union[torch.optim.Optimizer, Sequence[torch.optim.Optimizer]]] = None
                          ) -> list[str]:
    """Wrap every ``nn.BatchNorm1d/2d/3d`` of ``model`` (exactly those classes, each module once,
    none already wrapped) in place; returns the names of the wrapped modules. The BatchNorms keep
    their Parameter objects, so ``optimizers`` built before stay valid (the argument is Composer's
    signature). Warns :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when there is none."""
    check_positive("ghost_batch_size", ghost_batch_size, integer=True)
    wrapped = {id(m.batchnorm) for m in model.modules() if isinstance(m, _GhostBatchNorm)}

    def replacement(module: nn.Module) -> Optional[nn.Module]:
        if type(module) in _GHOST_TYPES and id(module) not in wrapped:
            return _GhostBatchNorm.from_batchnorm(module, ghost_batch_size)
        return None

    replaced = replace_modules(model, replacement)
    if not replaced:
        warnings.warn(NoEffectWarning(f"GhostBatchNorm changed nothing in {type(model).__name__}: it has no "
                                      f"torch.nn.BatchNorm1d, BatchNorm2d or BatchNorm3d"), stacklevel=2)
    return replaced


def count_ghost_batchnorms(model: nn.Module) -> int:
    """The ghost batch norm modules of ``model``, each once."""
    return sum(isinstance(m, _GhostBatchNorm) for m in model.modules())


class GhostBatchNorm(SurgeryAlgorithm):
    """Applies :func:`apply_ghost_batchnorm` at INIT; logs ``GhostBatchNorm/num_new_modules``
    with ``logger.log_hyperparameters``, as Composer.

    Args:
        ghost_batch_size: the size of the sub-batches each BatchNorm normalizes over.
    """

    def __init__(self, ghost_batch_size: int = 32) -> None:
        super().__init__()
        self.ghost_batch_size = check_positive("ghost_batch_size", ghost_batch_size, integer=True)

    @staticmethod
    def required_on_load() -> bool:
        return True

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return apply_ghost_batchnorm(model, self.ghost_batch_size, optimizers)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        super().apply(event, state, logger)
        logger.log_hyperparameters({"GhostBatchNorm/num_new_modules": count_ghost_batchnorms(state.model)})
        return None
