"""CutMix (Yun et al., 2019): paste a box of another example into each image."""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch

from composer_lab.algorithms.mixing import (Mix, MixingAlgorithm, check_alpha, mixed_targets, random_permutation,
                                           sample_beta)
from composer_lab.algorithms.soft_targets import outputs_shape_for
from composer_lab.algorithms.validation import check_positive

__all__ = ["CutMix", "cutmix_batch", "cutmix", "random_box"]

Box = tuple[int, int, int, int]


def random_box(height: int, width: int, cut_fraction: float, generator: Optional[torch.Generator] = None) -> Box:
    """A box ``(top, bottom, left, right)`` of about ``cut_fraction`` of the image's area around
    a uniformly drawn centre, clipped to the image."""
    ratio = math.sqrt(cut_fraction)
    cy, cx = (torch.rand(2, generator=generator) * torch.tensor([height, width])).long().tolist()
    half_h, half_w = int(height * ratio) // 2, int(width * ratio) // 2
    return max(cy - half_h, 0), min(cy + half_h, height), max(cx - half_w, 0), min(cx + half_w, width)


def paste_box(values: torch.Tensor, indices: torch.Tensor, box: Box) -> torch.Tensor:
    """A copy of ``values`` (…, H, W) whose ``box`` holds the partners' (``values[indices]``) pixels."""
    top, bottom, left, right = box
    pasted = values.clone()
    pasted[..., top:bottom, left:right] = values[indices][..., top:bottom, left:right]
    return pasted


def _check_images(input: torch.Tensor) -> None:
    if input.dim() < 4:
        raise ValueError(f"CutMix needs images (N, C, H, W), got shape {tuple(input.shape)}; leave it out for "
                         f"other inputs")


def _draw(input: torch.Tensor, alpha: float, bbox: Optional[Box], indices: Optional[torch.Tensor],
          generator: Optional[torch.Generator]) -> Mix:
    height, width = input.shape[-2:]
    if bbox is None:
        bbox = random_box(height, width, 1.0 - sample_beta(alpha, generator), generator)
    if indices is None:
        indices = random_permutation(input.shape[0], input.device, generator)
    top, bottom, left, right = bbox
    return Mix(paste_box(input, indices, bbox), indices, (bottom - top) * (right - left) / (height * width), bbox)


def cutmix_batch(input: torch.Tensor, target: torch.Tensor, alpha: float = 1.0, bbox: Optional[Box] = None,
                 indices: Optional[torch.Tensor] = None,
                 generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor, float, Box]:
    """Copy ``input[indices]`` into a box of each image (N, C, H, W, ...).

    The box covers about ``1 - m`` of the area, ``m ~ Beta(alpha, alpha)``, unless ``bbox``
    ``(top, bottom, left, right)`` is given. Returns the new inputs, ``target[indices]``, the
    share of each image left as it was (train towards ``share * y + (1 - share) * y[indices]``)
    and the box.
    """
    alpha = check_alpha(alpha)
    _check_images(input)
    mix = _draw(input, alpha, bbox, indices, generator)
    return mix.inputs, target[mix.indices], 1.0 - mix.weight, mix.box


def cutmix(input: torch.Tensor, target: torch.Tensor, alpha: float = 1.0, num_classes: Optional[int] = None,
           generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CutMix in one call, as in the seeds (``cf.cutmix(data, target, alpha=..., num_classes=...)``):
    the new inputs and their targets, to train on both (``data, target = cf.cutmix(...)``).

    Class indices need ``num_classes`` and come back as per-class values mixed by area;
    per-class values are mixed as they are; targets of the images' height and width
    (segmentation) get the box pasted, like the inputs.
    """
    alpha = check_alpha(alpha)
    _check_images(input)
    if num_classes is not None:
        check_positive("num_classes", num_classes, integer=True)
    mix = _draw(input, alpha, None, None, generator)

    def outputs_shape() -> tuple[int, ...]:
        if num_classes is None and not target.is_floating_point():
            raise ValueError(f"class-index targets of shape {tuple(target.shape)} need num_classes to become "
                             f"per-class values; pass cf.cutmix(..., num_classes=10) for 10 classes")
        return tuple(target.shape) if num_classes is None else outputs_shape_for(target, num_classes)

    return mix.inputs, cutmix_targets(target, mix, outputs_shape)


def cutmix_targets(target: torch.Tensor, mix: Mix, outputs_shape: Callable[[], Sequence[int]]) -> torch.Tensor:
    """Targets of the images' height and width get the box pasted, as in Composer; others
    become per-class values mixed by area (:func:`~composer_lab.algorithms.mixing.mixed_targets`)."""
    if _is_image_sized(target, mix):
        return paste_box(target, mix.indices, mix.box)
    return mixed_targets(target, mix, outputs_shape)


def _is_image_sized(target: torch.Tensor, mix: Mix) -> bool:
    return target.dim() >= 3 and target.shape[-2:] == mix.inputs.shape[-2:]


class CutMix(MixingAlgorithm):
    """Cuts and pastes boxes between images; trains towards targets mixed in proportion to the
    areas (segmentation targets of the images' size get the box pasted instead).

    Args:
        alpha: the kept area is drawn from Beta(alpha, alpha).
        interpolate_loss, num_classes: see :class:`~composer_lab.algorithms.mixing.MixingAlgorithm`.
    """

    def __init__(self, alpha: float = 1.0, interpolate_loss: bool = False, num_classes: Optional[int] = None) -> None:
        super().__init__(interpolate_loss, num_classes)
        self.alpha = check_alpha(alpha)

    def mix(self, inputs: torch.Tensor, generator: torch.Generator) -> Mix:
        _check_images(inputs)
        return _draw(inputs, self.alpha, None, None, generator)

    def mix_targets(self, targets: torch.Tensor, mix: Mix, outputs_shape: Callable[[], Sequence[int]]) -> torch.Tensor:
        return cutmix_targets(targets, mix, outputs_shape)

    def partner_targets(self, targets: torch.Tensor, mix: Mix) -> torch.Tensor:
        if _is_image_sized(targets, mix):
            raise ValueError(f"CutMix(interpolate_loss=True) cannot interpolate the loss of targets of the images' "
                             f"height and width {tuple(targets.shape)}: the box belongs to the partner only inside "
                             f"it; use CutMix(interpolate_loss=False), which pastes the box into the targets")
        return super().partner_targets(targets, mix)
