"""Squeeze-and-Excitation (Hu et al., 2019): rescale a convolution's channels by global context.

After each wide enough ``Conv2d`` a :class:`SqueezeExcite2d` block pools the feature map to one
value per channel, runs a one-hidden-layer MLP and multiplies each channel by the sigmoid of
its output. The convolution keeps its Parameter objects; the blocks' new parameters join the
optimizers' param group of the convolution they follow.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from composer_lab.algorithms.module_surgery import (check_surgery_target, count_module_instances,
                                                    replace_module_classes, replaced_names, warn_if_unchanged)
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery
from composer_lab.algorithms.validation import check_positive
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["SqueezeExcite", "SqueezeExcite2d", "SqueezeExciteConv2d", "apply_squeeze_excite"]


def _latent(latent_channels: float, num_features: int) -> int:
    """Hidden width: ``latent_channels`` if >= 1, else that fraction of ``num_features`` (at least 1)."""
    return max(1, int(latent_channels if latent_channels >= 1 else latent_channels * num_features))


class SqueezeExcite2d(nn.Module):
    """Pool (N, C, H, W) to (N, C), MLP ``C -> latent -> C`` with a sigmoid, scale each channel.

    Args:
        num_features: channels of the input.
        latent_channels: hidden width, or a fraction (< 1) of ``num_features``.
    """

    def __init__(self, num_features: int, latent_channels: float = 0.125) -> None:
        super().__init__()
        self.latent_channels = _latent(latent_channels, num_features)
        self.pool_and_mlp = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                          nn.Linear(num_features, self.latent_channels, bias=False), nn.ReLU(),
                                          nn.Linear(self.latent_channels, num_features, bias=False), nn.Sigmoid())

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        n, c = input.shape[:2]
        return input * self.pool_and_mlp(input).reshape(n, c, 1, 1)


class SqueezeExciteConv2d(nn.Module):
    """A ``Conv2d`` (``conv``, or one built from the arguments) followed by a :class:`SqueezeExcite2d`."""

    def __init__(self, *args: Any, latent_channels: float = 0.125, conv: Optional[nn.Conv2d] = None,
                 **kwargs: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(*args, **kwargs) if conv is None else conv
        self.se = SqueezeExcite2d(self.conv.out_channels, latent_channels).to(self.conv.weight.device,
                                                                              self.conv.weight.dtype)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.se(self.conv(input))

    @staticmethod
    def from_conv2d(module: nn.Conv2d, module_index: int, latent_channels: float) -> "SqueezeExciteConv2d":
        return SqueezeExciteConv2d(conv=module, latent_channels=latent_channels)


def _check(latent_channels: Any, min_channels: Any) -> None:
    check_positive("latent_channels", latent_channels)
    check_positive("min_channels", min_channels, integer=True, allow_zero=True)


def apply_squeeze_excite(model: nn.Module, latent_channels: float = 64, min_channels: int = 128,
                         optimizers: Any = None) -> dict[nn.Module, nn.Module]:
    """Follow each ``Conv2d`` of ``model`` with at least ``min_channels`` input and output channels
    by a :class:`SqueezeExcite2d` (in place; each convolution once, also one held under two names
    or already followed by one). Pass the ``optimizers`` built on ``model`` so the new parameters
    join them. Returns ``{conv: SqueezeExciteConv2d}``; :class:`NoEffectWarning` when none qualified."""
    _check(latent_channels, min_channels)
    check_surgery_target(model)
    wrapped = {id(m.conv) for m in model.modules() if isinstance(m, SqueezeExciteConv2d)}

    def policy(module: nn.Module, index: int) -> Optional[nn.Module]:
        if id(module) in wrapped or min(module.in_channels, module.out_channels) < min_channels:
            return None
        return SqueezeExciteConv2d.from_conv2d(module, index, latent_channels)

    replaced = replace_module_classes(model, {nn.Conv2d: policy}, optimizers=optimizers)
    warn_if_unchanged(replaced, "SqueezeExcite", model, f"no Conv2d with at least min_channels={min_channels} input "
                      f"and output channels; lower min_channels to add blocks")
    return replaced


class SqueezeExcite(StateDictSurgery):
    """Applies :func:`apply_squeeze_excite` at INIT, with the run's optimizers, and logs
    ``squeeze_excite/num_squeeze_excite_layers`` through ``log_hyperparameters``.

    Args:
        latent_channels: hidden width of each block's MLP, or a fraction (< 1) of the channels.
        min_channels: add a block only after convolutions with at least this many input and
            output channels (the deeper, cheaper layers of a typical CNN).
    """

    def __init__(self, latent_channels: float = 64, min_channels: int = 128) -> None:
        super().__init__()
        _check(latent_channels, min_channels)
        self.latent_channels = latent_channels
        self.min_channels = min_channels

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return replaced_names(model, lambda: apply_squeeze_excite(model, self.latent_channels, self.min_channels,
                                                                  optimizers))

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        super().apply(event, state, logger)
        count = count_module_instances(state.model, SqueezeExciteConv2d)
        logger.log_hyperparameters({"squeeze_excite/num_squeeze_excite_layers": count})
        return None
