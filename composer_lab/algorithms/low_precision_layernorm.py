"""LowPrecisionLayerNorm: LayerNorms run in the autocast dtype (bfloat16 on CPU) instead of float32.

Every ``nn.LayerNorm`` (exactly that class: subclasses such as timm's channels-first norms
keep their own forward) becomes an :class:`LPLayerNorm` holding the same weight and bias
Parameter objects. Applies only under ``amp_fp16`` / ``amp_bf16``; in float32 it warns
``NoEffectWarning`` and changes nothing. Runs after algorithms that add LayerNorms
(GatedLinearUnits), by the pass ``sort_low_precision_layernorm_last``. See
:mod:`composer_lab.algorithms.low_precision` for how the dtype is chosen.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms.low_precision import (LowPrecisionNormSurgery, adopt_parameters, autocast_off,
                                                   cast_if_autocast_enabled, low_precision_surgery)

__all__ = ["LowPrecisionLayerNorm", "LPLayerNorm", "apply_low_precision_layernorm"]


class LPLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` computed in the autocast dtype of its input's device when autocast is on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = cast_if_autocast_enabled(self.weight), cast_if_autocast_enabled(self.bias)
        x = cast_if_autocast_enabled(x)
        with autocast_off(x):
            return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


def _to_lp_layernorm(layer: nn.LayerNorm) -> LPLayerNorm:
    new = LPLayerNorm(layer.normalized_shape, layer.eps, elementwise_affine=False)
    new.elementwise_affine = layer.elementwise_affine
    return adopt_parameters(new, layer)


def apply_low_precision_layernorm(model: nn.Module, precision: Optional[Any] = None,
                                  optimizers: Optional[Union[torch.optim.Optimizer,
                                                             Sequence[torch.optim.Optimizer]]] = None) -> nn.Module:
    """Replace the ``nn.LayerNorm`` modules of ``model`` by :class:`LPLayerNorm` in place when
    ``precision`` is ``'amp_fp16'`` or ``'amp_bf16'`` (or Composer's ``Precision``); returns the
    model. Parameters are kept, so ``optimizers`` stay valid (Composer's signature)."""
    low_precision_surgery(model, precision, nn.LayerNorm, _to_lp_layernorm, "LowPrecisionLayerNorm")
    return model


class LowPrecisionLayerNorm(LowPrecisionNormSurgery):
    """Applies :func:`apply_low_precision_layernorm` at ``apply_at`` under the run's precision.

    Args:
        apply_at: ``Event.INIT`` (default), ``Event.BEFORE_LOAD`` or ``Event.AFTER_LOAD``.
    """

    lowers_layernorm_precision: ClassVar[bool] = True
    """Read by the pass ``sort_low_precision_layernorm_last``."""

    norm = nn.LayerNorm
    convert = staticmethod(_to_lp_layernorm)
