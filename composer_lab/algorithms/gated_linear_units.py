"""Gated Linear Units (Shazeer, 2020) in the feed-forward blocks of transformer layers.

A feed-forward block ``linear2(act(linear1(x)))`` becomes ``linear2(act(linear1(x)) * gate(x))``.
Blocks are found by shape: modules with ``linear1`` and ``linear2`` (``nn.Linear``) and an
``activation``, as ``nn.TransformerEncoderLayer`` and ``nn.TransformerDecoderLayer`` have.
``linear1`` keeps its Parameter objects; the new gate's parameters join its optimizer param group.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from composer_lab.algorithms.module_surgery import update_params_in_optimizer, warn_if_unchanged
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery

__all__ = ["GatedLinearUnits", "GatedLinear", "apply_gated_linear_units"]


class GatedLinear(nn.Module):
    """``act(linear(x)) * gate(x)``: ``linear`` is the block's first layer, ``gate`` a new one."""

    def __init__(self, linear: nn.Linear, act_fn: Callable[[torch.Tensor], torch.Tensor],
                 gate_bias: bool = False) -> None:
        super().__init__()
        self.linear = linear
        self.act_fn = act_fn
        self.gate = nn.Linear(linear.in_features, linear.out_features, bias=gate_bias,
                              device=linear.weight.device, dtype=linear.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act_fn(self.linear(x)) * self.gate(x)


def _is_ffn_block(module: nn.Module) -> bool:
    return (isinstance(getattr(module, "linear1", None), nn.Linear)
            and isinstance(getattr(module, "linear2", None), nn.Linear) and hasattr(module, "activation"))


def apply_gated_linear_units(model: nn.Module, optimizers: Optional[list] = None,
                             act_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                             gate_bias: bool = False) -> list[str]:
    """Gate the feed-forward block of every transformer-style layer of ``model`` in place.

    ``act_fn`` defaults to each block's own activation. New gate parameters are added to
    ``optimizers``. Returns the names of the replaced ``linear1`` modules;
    :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when there was none.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_gated_linear_units needs a torch.nn.Module, got {type(model).__name__}; "
                        f"pass the model itself")
    replaced, pairs = [], []
    for name, block in list(model.named_modules()):
        if not _is_ffn_block(block) or isinstance(block.linear1, GatedLinear):
            continue
        pairs.append((block.linear1, GatedLinear(block.linear1, act_fn or block.activation, gate_bias)))
        block.linear1 = pairs[-1][1]
        block.activation = nn.Identity()
        if hasattr(block, "activation_relu_or_gelu"):
            block.activation_relu_or_gelu = 0  # the fused inference path assumes a plain FFN
        replaced.append(f"{name}.linear1" if name else "linear1")
    for old, new in pairs if optimizers else ():  # each gate joins the param group of the layer it gates
        update_params_in_optimizer(old.parameters(), new.parameters(), optimizers)
    warn_if_unchanged(replaced, "GatedLinearUnits", model, "no feed-forward block with linear1, linear2 (nn.Linear) "
                      "and activation, as nn.TransformerEncoderLayer has")
    return replaced


class GatedLinearUnits(StateDictSurgery):
    """Applies :func:`apply_gated_linear_units` at INIT.

    Args:
        act_fn: the activation of the gated branch; None keeps each block's own.
        gate_bias: give the new gate layer a bias.
    """

    def __init__(self, act_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 gate_bias: bool = False) -> None:
        super().__init__()
        if act_fn is not None and not callable(act_fn):
            raise TypeError(f"act_fn must be callable (e.g. torch.nn.functional.gelu), got {act_fn!r}")
        self.act_fn = act_fn
        self.gate_bias = gate_bias

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return apply_gated_linear_units(model, optimizers, self.act_fn, self.gate_bias)
