"""LowPrecisionGroupNorm: GroupNorms run in the autocast dtype (bfloat16 on CPU) instead of float32.

Every ``nn.GroupNorm`` (exactly that class) becomes an :class:`LPGroupNorm` holding the same
weight and bias Parameter objects. Applies only under ``amp_fp16`` / ``amp_bf16``; in float32
it warns ``NoEffectWarning`` and changes nothing. See :mod:`composer_lab.algorithms.low_precision`.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms.low_precision import (LowPrecisionNormSurgery, adopt_parameters, autocast_off,
                                                   cast_if_autocast_enabled, low_precision_surgery)

__all__ = ["LowPrecisionGroupNorm", "LPGroupNorm", "apply_low_precision_groupnorm"]


class LPGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` computed in the autocast dtype of its input's device when autocast is on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = cast_if_autocast_enabled(self.weight), cast_if_autocast_enabled(self.bias)
        x = cast_if_autocast_enabled(x)
        with autocast_off(x):
            return F.group_norm(x, self.num_groups, weight, bias, self.eps)


def _to_lp_groupnorm(layer: nn.GroupNorm) -> LPGroupNorm:
    new = LPGroupNorm(layer.num_groups, layer.num_channels, layer.eps, affine=False)
    new.affine = layer.affine
    return adopt_parameters(new, layer)


def apply_low_precision_groupnorm(model: nn.Module, precision: Optional[Any] = None,
                                  optimizers: Optional[Union[torch.optim.Optimizer,
                                                             Sequence[torch.optim.Optimizer]]] = None) -> nn.Module:
    """Replace the ``nn.GroupNorm`` modules of ``model`` by :class:`LPGroupNorm` in place when
    ``precision`` is ``'amp_fp16'`` or ``'amp_bf16'`` (or Composer's ``Precision``); returns the
    model. Parameters are kept, so ``optimizers`` stay valid (Composer's signature)."""
    low_precision_surgery(model, precision, nn.GroupNorm, _to_lp_groupnorm, "LowPrecisionGroupNorm")
    return model


class LowPrecisionGroupNorm(LowPrecisionNormSurgery):
    """Applies :func:`apply_low_precision_groupnorm` at ``apply_at`` under the run's precision.

    Args:
        apply_at: ``Event.INIT`` (default), ``Event.BEFORE_LOAD`` or ``Event.AFTER_LOAD``.
    """

    norm = nn.GroupNorm
    convert = staticmethod(_to_lp_groupnorm)
