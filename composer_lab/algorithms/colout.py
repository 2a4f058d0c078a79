"""ColOut: drop a random fraction of the rows and columns of each image (and of its mask).

The image gets smaller but keeps its content when the fraction is small, which trains faster
and varies the data. :func:`colout_batch` drops the same rows and columns from every image of a
batch (and from the target when it is a mask of the images' height and width); the
:class:`ColOut` algorithm does it per batch at AFTER_DATALOADER (``batch=True``, randomness from
the run's generator) or inserts a :class:`ColOutTransform` into the training dataset at
FIT_START (``batch=False``).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from composer_lab.algorithms.dataset_transform import InsertedTransforms
from composer_lab.algorithms.probe import check_accepts
from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import BatchKey, State

__all__ = ["ColOut", "ColOutTransform", "colout_batch"]

_BATCH_EVENTS = frozenset({Event.AFTER_DATALOADER})
_DATASET_EVENTS = frozenset({Event.FIT_START})


def _check_resize_target(resize_target: Any) -> Union[bool, str]:
    if not (isinstance(resize_target, bool) or resize_target == "auto"):
        raise ValueError(f"resize_target must be True, False or 'auto', got {resize_target!r}; 'auto' drops the "
                         f"target's rows and columns when it has the images' height and width (a mask)")
    return resize_target


def _as_tensor(image: Any) -> torch.Tensor:
    return TF.pil_to_tensor(image) if isinstance(image, Image.Image) else image


def _as_type(tensor: torch.Tensor, like: Any) -> Any:
    return TF.to_pil_image(tensor, mode=like.mode) if isinstance(like, Image.Image) else tensor


def _spatial_size(image: Any) -> tuple[int, ...]:
    return tuple(image.size[::-1]) if isinstance(image, Image.Image) else tuple(image.shape[-2:])


def _should_resize_target(sample: tuple, resize_target: Union[bool, str]) -> bool:
    """Composer's rule: a bool is the answer; 'auto' resizes a target of more than two
    dimensions (or a PIL image) with the input's height and width."""
    if isinstance(resize_target, bool):
        return resize_target
    if len(sample) < 2:
        return False
    target = sample[1]
    if isinstance(target, Image.Image):
        return _spatial_size(target) == _spatial_size(sample[0])
    return isinstance(target, torch.Tensor) and target.dim() > 2 and _spatial_size(target) == _spatial_size(sample[0])


def _kept(size: int, p: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """The sorted indices of ``int((1 - p) * size)`` of ``size`` rows (or columns), drawn on the CPU."""
    kept = int((1 - p) * size)
    if kept == 0:
        raise ValueError(f"ColOut would drop all {size} rows or columns (p={p}); pass a smaller p_row / p_col")
    return torch.randperm(size, generator=generator)[:kept].sort().values


def _drop(image: Any, rows: torch.Tensor, cols: torch.Tensor) -> Any:
    tensor = _as_tensor(image)
    out = tensor.index_select(-2, rows.to(tensor.device)).index_select(-1, cols.to(tensor.device))
    return _as_type(out, image)


def colout_batch(sample: Any, p_row: float = 0.15, p_col: float = 0.15, resize_target: Union[bool, str] = "auto",
                 generator: Optional[torch.Generator] = None) -> Any:
    """Drop the same random ``p_row`` of rows and ``p_col`` of columns from an image (PIL,
    ``(C, H, W)``) or a batch ``(N, C, H, W)``, and from a target given with it as
    ``(input, target)`` when ``resize_target`` says so ('auto': a mask of the input's height and
    width). Returns the smaller image, or the ``(input, target)`` pair when the target was
    resized too (as Composer's does).
    The indices are drawn from the CPU ``generator`` (None: torch's global one).
    """
    check_fraction("p_row", p_row, high_open=True)
    check_fraction("p_col", p_col, high_open=True)
    items = sample if isinstance(sample, tuple) else (sample,)
    if len(items) > 2:
        raise ValueError(f"colout_batch takes an image or an (input, target) pair, got a tuple of {len(items)}; "
                         f"pass (input, target)")
    image = items[0]
    if not isinstance(image, Image.Image) and not (isinstance(image, torch.Tensor) and image.dim() in (3, 4)):
        shape = tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise ValueError(f"ColOut needs images (N, C, H, W), one image (C, H, W) or a PIL image, got {shape}; "
                         f"leave it out for other inputs")
    height, width = _spatial_size(image)
    rows, cols = _kept(height, p_row, generator), _kept(width, p_col, generator)
    out = _drop(image, rows, cols)
    if not _should_resize_target(items, _check_resize_target(resize_target)):
        return out
    return out, _drop(items[1], rows, cols)


class ColOutTransform:
    """A torchvision-style transform: :func:`colout_batch` on an image or an ``(image, mask)``
    pair, drawing from torch's global generator (seeded per DataLoader worker)."""

    def __init__(self, p_row: float = 0.15, p_col: float = 0.15, resize_target: Union[bool, str] = "auto") -> None:
        self.p_row = check_fraction("p_row", p_row, high_open=True)
        self.p_col = check_fraction("p_col", p_col, high_open=True)
        self.resize_target = _check_resize_target(resize_target)

    def __call__(self, sample: Any) -> Any:
        return colout_batch(sample, self.p_row, self.p_col, self.resize_target)

    def __repr__(self) -> str:
        return f"ColOutTransform(p_row={self.p_row}, p_col={self.p_col}, resize_target={self.resize_target!r})"


class ColOut(Algorithm):
    """Drops rows and columns of the training images: per batch at AFTER_DATALOADER
    (``batch=True``, from the run's generator, the target too when it is a mask), or as a
    :class:`ColOutTransform` inserted into the training dataset at FIT_START (``batch=False``).

    Args:
        p_row: fraction of rows to drop, in [0, 1).
        p_col: fraction of columns to drop, in [0, 1).
        batch: per batch (True) or as a dataset transform (False).
        resize_target: True, False or 'auto' (a target of the images' height and width).
        input_key, target_key: where the batch holds inputs and targets (as ``State.batch_get_item``).
    """

    writes = {Event.AFTER_DATALOADER: frozenset({"batch"}),
              Event.FIT_START: frozenset()}  # the dataset's transform is no State field

    def __init__(self, p_row: float = 0.15, p_col: float = 0.15, batch: bool = True,
                 resize_target: Union[bool, str] = "auto", input_key: BatchKey = 0, target_key: BatchKey = 1) -> None:
        self.p_row = check_fraction("p_row", p_row, high_open=True)
        self.p_col = check_fraction("p_col", p_col, high_open=True)
        if not isinstance(batch, bool):
            raise TypeError(f"batch must be True (per batch) or False (a dataset transform), got {batch!r}")
        self.batch = batch
        self.resize_target = _check_resize_target(resize_target)
        if resize_target is True and not batch:
            raise ValueError("ColOut(batch=False) drops rows and columns of the images only, so resize_target=True "
                             "needs batch=True; pass batch=True, or resize_target='auto' or False")
        self.input_key, self.target_key = input_key, target_key
        self._inserted = InsertedTransforms()
        self._checked: set[tuple] = set()

    @property
    def events(self) -> frozenset:  # type: ignore[override]
        """AFTER_DATALOADER per batch, FIT_START as a dataset transform (read from ``batch``)."""
        return _BATCH_EVENTS if self.batch else _DATASET_EVENTS

    def match(self, event: Event, state: State) -> bool:
        """Per batch at AFTER_DATALOADER; at FIT_START once per training dataset."""
        if self.batch:
            return event is Event.AFTER_DATALOADER
        return event is Event.FIT_START and self._inserted.pending(state.dataloader)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.FIT_START:
            self._inserted.insert(type(self).__name__, state.dataloader,
                                  ColOutTransform(self.p_row, self.p_col, self.resize_target))
            return None
        inputs, targets = state.batch_get_item(self.input_key), state.batch_get_item(self.target_key)
        self._check_inputs(state, inputs)
        resize = _should_resize_target((inputs, targets), self.resize_target)
        result = colout_batch((inputs, targets), self.p_row, self.p_col, resize, state.generator("cpu"))
        state.batch_set_item(self.input_key, result[0] if resize else result)
        if resize:
            state.batch_set_item(self.target_key, result[1])
        return None

    def inserted(self) -> list[str]:
        """What ``batch=False`` inserted, one line per training dataset still alive."""
        return self._inserted.records()

    def _check_inputs(self, state: State, inputs: Any) -> None:
        """Once per model and input shape, before any dropping: image batches (N, C, H, W) of
        floats that the model takes at the smaller size (a probe forward of one example), else
        a ValueError naming the fix."""
        if not (isinstance(inputs, torch.Tensor) and inputs.dim() == 4 and inputs.is_floating_point()):
            shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
            dtype = f" {inputs.dtype}" if isinstance(inputs, torch.Tensor) else ""
            raise ValueError(f"ColOut drops rows and columns of image batches (N, C, H, W) of floats, got "
                             f"{shape}{dtype}; leave ColOut out for other inputs")
        key = (id(state.model), tuple(inputs.shape[1:]), inputs.dtype)
        if key in self._checked:
            return
        smaller = colout_batch(inputs[:1], self.p_row, self.p_col, False, torch.Generator().manual_seed(0))
        check_accepts(state, smaller, f"ColOut(p_row={self.p_row:g}, p_col={self.p_col:g}) makes inputs of "
                                      f"{'x'.join(map(str, smaller.shape[2:]))}, which this model refuses: pass "
                                      f"p_row=0 and p_col=0, or leave ColOut out for a model of one input size")
        self._checked.add(key)

