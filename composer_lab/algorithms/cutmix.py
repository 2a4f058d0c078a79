"""CutMix (Yun et al., 2019): paste a box of another example into each image."""

from __future__ import annotations

import math
from typing import Optional

import torch

from composer_lab.algorithms.mixing import MixingAlgorithm, check_alpha, random_permutation, sample_beta

__all__ = ["CutMix", "cutmix_batch", "random_box"]


def random_box(height: int, width: int, cut_fraction: float,
               generator: Optional[torch.Generator] = None) -> tuple[int, int, int, int]:
    """A box ``(top, bottom, left, right)`` of about ``cut_fraction`` of the image's area around
    a uniformly drawn centre, clipped to the image."""
    ratio = math.sqrt(cut_fraction)
    cy, cx = (torch.rand(2, generator=generator) * torch.tensor([height, width])).long().tolist()
    half_h, half_w = int(height * ratio) // 2, int(width * ratio) // 2
    return max(cy - half_h, 0), min(cy + half_h, height), max(cx - half_w, 0), min(cx + half_w, width)


def cutmix_batch(input: torch.Tensor, target: torch.Tensor, alpha: float = 1.0,
                 bbox: Optional[tuple[int, int, int, int]] = None, indices: Optional[torch.Tensor] = None,
                 generator: Optional[torch.Generator] = None
                 ) -> tuple[torch.Tensor, torch.Tensor, float, tuple[int, int, int, int]]:
    """Copy ``input[indices]`` into a box of each image (N, C, H, W, ...).

    The box covers about ``1 - m`` of the area, ``m ~ Beta(alpha, alpha)``, unless ``bbox``
    ``(top, bottom, left, right)`` is given. Returns the new inputs, ``target[indices]``, the
    share of each image left as it was (train towards ``share * y + (1 - share) * y[indices]``)
    and the box.
    """
    alpha = check_alpha(alpha)
    if input.dim() < 4:
        raise ValueError(f"CutMix needs images (N, C, H, W), got shape {tuple(input.shape)}")
    height, width = input.shape[-2:]
    if bbox is None:
        bbox = random_box(height, width, 1.0 - sample_beta(alpha, generator), generator)
    if indices is None:
        indices = random_permutation(input.shape[0], input.device, generator)
    top, bottom, left, right = bbox
    mixed = input.clone()
    mixed[..., top:bottom, left:right] = input[indices][..., top:bottom, left:right]
    share = 1.0 - (bottom - top) * (right - left) / (height * width)
    return mixed, target[indices], share, bbox


class CutMix(MixingAlgorithm):
    """Cuts and pastes boxes between images at AFTER_DATALOADER; the loss gets targets mixed in
    proportion to the areas (interpolated loss).

    Args:
        alpha: the kept area is drawn from Beta(alpha, alpha).
    """

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = check_alpha(alpha)

    def mix(self, inputs: torch.Tensor, targets: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
        mixed, permuted, share, _ = cutmix_batch(inputs, targets, self.alpha, generator=generator)
        return mixed, permuted, share
