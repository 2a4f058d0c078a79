"""MixUp (Zhang et al., 2018): train on convex combinations of pairs of examples."""

from __future__ import annotations

from typing import Optional

import torch

from composer_lab.algorithms.mixing import (Mix, MixingAlgorithm, check_alpha, mix_values, random_permutation,
                                            sample_beta)
from composer_lab.algorithms.validation import check_fraction

__all__ = ["MixUp", "mixup_batch", "draw_mixing"]


def draw_mixing(alpha: float, generator: Optional[torch.Generator] = None) -> float:
    """``min(z, 1 - z)`` for ``z ~ Beta(alpha, alpha)``, as Composer draws it: the partner never
    outweighs the original example, so each mixed example keeps its own label as the larger part."""
    z = sample_beta(check_alpha(alpha), generator)
    return min(z, 1.0 - z)


def mixup_batch(input: torch.Tensor, target: torch.Tensor, mixing: Optional[float] = None, alpha: float = 0.2,
                indices: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(1 - mixing) * input + mixing * input[indices]``, Composer's meaning of ``mixing``.

    ``mixing`` defaults to :func:`draw_mixing` (Beta(alpha, alpha)), ``indices`` to a random
    permutation (both from the CPU ``generator``). Returns the mixed inputs, ``target[indices]``
    and ``mixing``; train towards ``(1 - mixing) * y + mixing * y[indices]``.
    """
    alpha = check_alpha(alpha)
    check_floating(input)
    mixing = draw_mixing(alpha, generator) if mixing is None else check_fraction("mixing", mixing)
    if indices is None:
        indices = random_permutation(input.shape[0], input.device, generator)
    return mix_values(input, indices, mixing), target[indices], mixing


def check_floating(input: torch.Tensor) -> None:
    """TypeError unless ``input`` is floating-point (a convex combination needs fractions)."""
    if not input.is_floating_point():
        raise TypeError(f"MixUp mixes floating-point inputs, got {input.dtype}; convert images to float first "
                        f"(token ids cannot be mixed: leave MixUp out for them)")


class MixUp(MixingAlgorithm):
    """Mixes each batch with a permutation of itself; trains towards the mixed targets.

    Args:
        alpha: the mixing weight is drawn from Beta(alpha, alpha) (see :func:`draw_mixing`);
            small alpha mixes little.
        interpolate_loss, num_classes: see :class:`~composer_lab.algorithms.mixing.MixingAlgorithm`.
    """

    def __init__(self, alpha: float = 0.2, interpolate_loss: bool = False, num_classes: Optional[int] = None) -> None:
        super().__init__(interpolate_loss, num_classes)
        self.alpha = check_alpha(alpha)

    def mix(self, inputs: torch.Tensor, generator: torch.Generator) -> Mix:
        check_floating(inputs)
        mixing = draw_mixing(self.alpha, generator)
        indices = random_permutation(inputs.shape[0], inputs.device, generator)
        return Mix(mix_values(inputs, indices, mixing), indices, mixing)
