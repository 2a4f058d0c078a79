"""FusedLayerNorm: swap ``nn.LayerNorm`` for a faster fused kernel where one is installed.

The fused implementation is NVIDIA Apex's ``FusedLayerNorm`` (CUDA). Without it nothing is
replaced and a warning says so: PyTorch's own LayerNorm is already a single kernel, so there is
no faster layer norm to swap in. Runs after GatedLinearUnits (``fuses_layernorm``,
``sort_fused_layernorm_last``), so every LayerNorm present after surgery is converted.
"""

from __future__ import annotations

import importlib
import warnings
from typing import ClassVar, Optional

from torch import nn

from composer_lab.algorithms.module_surgery import replace_modules
from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm
from composer_lab.algorithms.warnings import NoEffectWarning

__all__ = ["FusedLayerNorm", "apply_fused_layernorm", "fused_layernorm_class"]


def fused_layernorm_class() -> Optional[type]:
    """Apex's ``FusedLayerNorm`` class if Apex is installed, else None."""
    try:
        return importlib.import_module("apex.normalization").FusedLayerNorm
    except ImportError:
        return None


def apply_fused_layernorm(model: nn.Module) -> list[str]:
    """Replace every ``nn.LayerNorm`` of ``model`` by the fused class, keeping its weight and bias
    Parameter objects; returns the names replaced (none, with a warning, without a fused class)."""
    fused = fused_layernorm_class()
    if fused is None:
        warnings.warn(NoEffectWarning("FusedLayerNorm: no fused layer norm is installed (NVIDIA Apex); the model "
                                      "keeps torch.nn.LayerNorm, which is already a single kernel"), stacklevel=2)
        return []

    def replacement(module: nn.Module) -> Optional[nn.Module]:
        if type(module) is not nn.LayerNorm:
            return None
        new = fused(module.normalized_shape, eps=module.eps, elementwise_affine=module.elementwise_affine)
        if module.elementwise_affine:
            new.weight, new.bias = module.weight, module.bias
        return new

    return replace_modules(model, replacement)


class FusedLayerNorm(SurgeryAlgorithm):
    """Applies :func:`apply_fused_layernorm` at INIT, after other surgery."""

    fuses_layernorm: ClassVar[bool] = True

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return apply_fused_layernorm(model)
