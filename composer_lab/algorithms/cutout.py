"""CutOut (DeVries and Taylor, 2017): zero square holes at random places of each image."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from composer_lab.algorithms.validation import check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["CutOut", "cutout_batch"]


def hole_length(length: Union[int, float], height: int, width: int) -> int:
    """The side of a hole in pixels: ``length`` if >= 1, else that fraction of the shorter side."""
    check_positive("length", length)
    return int(length) if length >= 1 else max(1, int(length * min(height, width)))


def cutout_batch(input: Any, num_holes: int = 1, length: Union[int, float] = 0.5,
                 generator: Optional[torch.Generator] = None) -> Any:
    """Images with ``num_holes`` squares of side ``length`` zeroed in each, centred at uniformly
    drawn pixels (clipped at the borders); ``generator`` must be on the input's device.

    Takes a batch (N, C, H, W), a single image (C, H, W) or a PIL image, as Composer's does,
    and returns the same kind.
    """
    check_positive("num_holes", num_holes, integer=True)
    if isinstance(input, Image.Image):
        return TF.to_pil_image(cutout_batch(TF.pil_to_tensor(input), num_holes, length, generator), mode=input.mode)
    if not isinstance(input, torch.Tensor) or input.dim() not in (3, 4):
        shape = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise ValueError(f"CutOut needs images (N, C, H, W), one image (C, H, W) or a PIL image, got {shape}; "
                         f"leave it out for other inputs")
    if input.dim() == 3:
        return cutout_batch(input.unsqueeze(0), num_holes, length, generator)[0]
    n, _, height, width = input.shape
    side = hole_length(length, height, width)
    centres = torch.rand(2, n, num_holes, 1, device=input.device, generator=generator)
    cy, cx = (centres[0] * height).floor(), (centres[1] * width).floor()
    rows = torch.arange(height, device=input.device)
    cols = torch.arange(width, device=input.device)
    low = side // 2
    in_rows = (rows >= cy - low) & (rows < cy - low + side)          # (N, holes, H)
    in_cols = (cols >= cx - low) & (cols < cx - low + side)          # (N, holes, W)
    holes = (in_rows.unsqueeze(-1) & in_cols.unsqueeze(-2)).any(1)  # (N, H, W)
    return input.masked_fill(holes.unsqueeze(1), 0)


class CutOut(Algorithm):
    """Applies :func:`cutout_batch` to the inputs at AFTER_DATALOADER.

    Args:
        num_holes: holes per image.
        length: side of a hole, in pixels (>= 1) or as a fraction of the shorter image side.
    """

    def __init__(self, num_holes: int = 1, length: Union[int, float] = 0.5) -> None:
        self.num_holes = check_positive("num_holes", num_holes, integer=True)
        self.length = check_positive("length", length)

    events = frozenset({Event.AFTER_DATALOADER})
    writes = frozenset({"batch"})

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        inputs = state.batch_get_item(0)
        state.batch_set_item(0, cutout_batch(inputs, self.num_holes, self.length, state.generator(inputs.device)))
        return None
