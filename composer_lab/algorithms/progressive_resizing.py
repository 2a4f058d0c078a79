"""Progressive resizing (as in fast.ai's DAWNBench entries): train on smaller images first."""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from composer_lab.algorithms.probe import check_accepts
from composer_lab.algorithms.validation import check_choice, check_fraction, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["ProgressiveResizing", "resize_batch", "scale_schedule", "RESIZE_MODES"]

RESIZE_MODES = ("resize", "crop")


def scale_schedule(current_duration: float, initial_scale: float = 0.5, delay_fraction: float = 0.5,
                   finetune_fraction: float = 0.2) -> float:
    """``initial_scale`` until ``delay_fraction`` of training, then linearly up to 1 at
    ``1 - finetune_fraction``, then 1."""
    ramp_end = 1.0 - finetune_fraction
    if current_duration < delay_fraction:
        return initial_scale
    if current_duration >= ramp_end:
        return 1.0
    return initial_scale + (1.0 - initial_scale) * (current_duration - delay_fraction) / (ramp_end - delay_fraction)


def scaled_size(size: int, scale: float, size_increment: int = 1) -> int:
    """``size * scale`` rounded down to a multiple of ``size_increment``, within [increment, size]."""
    return min(size, max(size_increment, int(size * scale) // size_increment * size_increment))


def resize_batch(input: torch.Tensor, target: Any, scale_factor: float, mode: str = "resize",
                 resize_targets: bool = False, size_increment: int = 1,
                 generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, Any]:
    """Images (N, C, H, W) scaled by ``scale_factor``: interpolated ('resize') or a random crop
    shared by the batch ('crop', offsets from the CPU ``generator``).

    With ``resize_targets`` (segmentation masks, (N, H', W') or (N, C, H', W')) the targets get
    the same treatment at their own resolution: scaled by the inputs' factor, and cropped at
    the same place of the image, their offsets scaled by ``H' / H`` (as Composer does).
    """
    check_fraction("scale_factor", scale_factor, low_open=True)
    check_choice("mode", mode, RESIZE_MODES)
    if input.dim() != 4:
        raise ValueError(f"progressive resizing needs images (N, C, H, W), got shape {tuple(input.shape)}; it "
                         f"resizes images only: leave it out for other inputs")
    height, width = input.shape[-2:]
    new_h, new_w = scaled_size(height, scale_factor, size_increment), scaled_size(width, scale_factor, size_increment)
    if (new_h, new_w) == (height, width):
        return input, target
    top = left = 0
    if mode == "crop":
        top = int(torch.randint(height - new_h + 1, (), generator=generator))
        left = int(torch.randint(width - new_w + 1, (), generator=generator))

    def change(t: torch.Tensor) -> torch.Tensor:
        """``t`` resized or cropped at its own resolution (the input's own sizes for the input)."""
        t_h, t_w = t.shape[-2:]
        size = (round(t_h * new_h / height), round(t_w * new_w / width))
        if mode == "resize":
            return _interpolate(t, size)
        t_top, t_left = top * t_h // height, left * t_w // width
        return t[..., t_top:t_top + size[0], t_left:t_left + size[1]]

    return change(input), change(target) if resize_targets else target


def _interpolate(t: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, C, H, W) or (N, H, W) at ``size``: bilinear for floats, nearest for class indices."""
    t4 = t if t.dim() == 4 else t.unsqueeze(1)
    out = F.interpolate(t4 if t4.is_floating_point() else t4.float(), size=size,
                        mode="bilinear" if t4.is_floating_point() else "nearest").to(t.dtype)
    return out if t.dim() == 4 else out.squeeze(1)


class ProgressiveResizing(Algorithm):
    """Resizes the inputs at AFTER_DATALOADER following :func:`scale_schedule`; logs the scale.

    Args:
        mode: 'resize' (interpolate) or 'crop' (random crop).
        initial_scale: the starting scale, in (0, 1].
        finetune_fraction: the final fraction of training at full size.
        delay_fraction: the first fraction of training at ``initial_scale``.
        size_increment: sides are rounded down to a multiple of this.
        resize_targets: resize the targets too (segmentation).
    """

    def __init__(self, mode: str = "resize", initial_scale: float = 0.5, finetune_fraction: float = 0.2,
                 delay_fraction: float = 0.5, size_increment: int = 4, resize_targets: bool = False) -> None:
        self.mode = check_choice("mode", mode, RESIZE_MODES)
        self.initial_scale = check_fraction("initial_scale", initial_scale, low_open=True)
        self.finetune_fraction = check_fraction("finetune_fraction", finetune_fraction)
        self.delay_fraction = check_fraction("delay_fraction", delay_fraction)
        if delay_fraction + finetune_fraction > 1:
            raise ValueError(f"delay_fraction ({delay_fraction}) + finetune_fraction ({finetune_fraction}) must "
                             f"be at most 1: together they are the parts of training without resizing ramps; "
                             f"lower one of them")
        self.size_increment = check_positive("size_increment", size_increment, integer=True)
        self.resize_targets = resize_targets
        self._checked: set[tuple] = set()

    events = frozenset({Event.AFTER_DATALOADER})
    writes = frozenset({"batch"})

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        scale = scale_schedule(state.get_elapsed_duration(), self.initial_scale, self.delay_fraction,
                               self.finetune_fraction)
        logger.log_metrics({"progressive_resizing/scale": scale})
        self.check_inputs(state)
        if scale < 1.0:
            inputs, targets = resize_batch(state.batch_get_item(0), state.batch_get_item(1), scale, self.mode,
                                           self.resize_targets, self.size_increment, state.generator("cpu"))
            state.batch_set_item(0, inputs)
            if self.resize_targets:
                state.batch_set_item(1, targets)
        return None

    def check_inputs(self, state: State) -> None:
        """Once per model and input shape, before any resizing: the model must take the
        smallest inputs this will give it (``initial_scale``; a probe forward of one example),
        else a ValueError naming the fix."""
        inputs = state.batch_get_item(0)
        key = (id(state.model), tuple(inputs.shape[1:]), inputs.dtype)
        if key in self._checked:
            return
        name = f"ProgressiveResizing(initial_scale={self.initial_scale:g})"
        try:
            smallest, _ = resize_batch(inputs[:1], None, self.initial_scale, "resize", False, self.size_increment)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        check_accepts(state, smallest, f"{name} resizes inputs to {'x'.join(map(str, smallest.shape[2:]))}, which "
                                       f"this model refuses: pass a larger initial_scale (1.0 resizes nothing), or "
                                       f"leave ProgressiveResizing out for a model of one input size")
        self._checked.add(key)
