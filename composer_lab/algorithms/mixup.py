"""MixUp (Zhang et al., 2018): train on convex combinations of pairs of examples."""

from __future__ import annotations

from typing import Optional

import torch

from composer_lab.algorithms.mixing import MixingAlgorithm, check_alpha, random_permutation, sample_beta
from composer_lab.algorithms.validation import check_fraction

__all__ = ["MixUp", "mixup_batch"]


def mixup_batch(input: torch.Tensor, target: torch.Tensor, mixing: Optional[float] = None, alpha: float = 0.2,
                indices: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``mixing * input + (1 - mixing) * input[indices]``.

    ``mixing`` defaults to a draw from Beta(alpha, alpha), ``indices`` to a random permutation
    (both from the CPU ``generator``). Returns the mixed inputs, ``target[indices]`` and ``mixing``;
    train towards ``mixing * y + (1 - mixing) * y[indices]``.
    """
    alpha = check_alpha(alpha)
    if not input.is_floating_point():
        raise TypeError(f"MixUp mixes floating-point inputs, got {input.dtype}; convert images to float first")
    mixing = sample_beta(alpha, generator) if mixing is None else check_fraction("mixing", mixing)
    if indices is None:
        indices = random_permutation(input.shape[0], input.device, generator)
    return torch.lerp(input[indices], input, mixing), target[indices], mixing


class MixUp(MixingAlgorithm):
    """Mixes each batch at AFTER_DATALOADER; the loss gets the mixed targets (interpolated loss).

    Args:
        alpha: the mixing weight is drawn from Beta(alpha, alpha); small alpha mixes little.
    """

    def __init__(self, alpha: float = 0.2) -> None:
        super().__init__()
        self.alpha = check_alpha(alpha)

    def mix(self, inputs: torch.Tensor, targets: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
        return mixup_batch(inputs, targets, alpha=self.alpha, generator=generator)
