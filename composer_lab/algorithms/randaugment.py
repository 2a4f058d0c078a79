"""RandAugment (Cubuk et al., 2020): ``depth`` random image operations of strength ``severity``.

Built on torchvision's ``transforms.v2.functional``, so it takes PIL images and image tensors
(uint8 or float in [0, 1]) alike. Use :func:`randaugment` inside a dataset's transforms, or
the :class:`RandAugment` algorithm, which puts it in front of the training dataset's transform.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from composer_lab.algorithms.dataset_transform import InsertedTransforms
from composer_lab.algorithms.validation import check_choice, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["RandAugment", "RandAugmentTransform", "randaugment", "randaugment_image", "AUGMENTATION_SETS"]

Op = Callable[[Any, float, float], Any]  # (image, magnitude in [0, 1], random sign) -> image


def _size(image: Any) -> tuple[int, int]:
    height, width = TF.get_size(image)
    return height, width


def _max_value(image: Any) -> float:
    if isinstance(image, torch.Tensor) and image.is_floating_point():
        return 1.0
    return 255.0


def _affine(image: Any, **kwargs: Any) -> Any:
    params = dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, 0.0]) | kwargs
    return TF.affine(image, **params)


_OPS: dict[str, Op] = {
    "autocontrast": lambda img, m, s: TF.autocontrast(img),
    "equalize": lambda img, m, s: TF.equalize(img),
    "posterize": lambda img, m, s: TF.posterize(img, 8 - int(4 * m)),
    "solarize": lambda img, m, s: TF.solarize(img, (1.0 - m) * _max_value(img)),
    "rotate": lambda img, m, s: TF.rotate(img, s * 30.0 * m),
    "shear_x": lambda img, m, s: _affine(img, shear=[s * 17.0 * m, 0.0]),
    "shear_y": lambda img, m, s: _affine(img, shear=[0.0, s * 17.0 * m]),
    "translate_x": lambda img, m, s: _affine(img, translate=[int(s * m * _size(img)[1] / 3), 0]),
    "translate_y": lambda img, m, s: _affine(img, translate=[0, int(s * m * _size(img)[0] / 3)]),
    "color": lambda img, m, s: TF.adjust_saturation(img, 1.0 + s * 0.9 * m),
    "contrast": lambda img, m, s: TF.adjust_contrast(img, 1.0 + s * 0.9 * m),
    "brightness": lambda img, m, s: TF.adjust_brightness(img, 1.0 + s * 0.9 * m),
    "sharpness": lambda img, m, s: TF.adjust_sharpness(img, 1.0 + s * 0.9 * m),
}
_CORRUPTION_LIKE = ("color", "contrast", "brightness", "sharpness")
AUGMENTATION_SETS = {
    "all": tuple(_OPS),
    # leaves out operations that resemble common test-time corruptions (ImageNet-C)
    "safe": tuple(name for name in _OPS if name not in _CORRUPTION_LIKE),
}


def _check(severity: int, depth: int, augmentation_set: str) -> None:
    check_positive("depth", depth, integer=True)
    check_positive("severity", severity, integer=True, allow_zero=True)
    if severity > 10:
        raise ValueError(f"severity must be between 0 and 10, got {severity}")
    check_choice("augmentation_set", augmentation_set, tuple(AUGMENTATION_SETS))


def randaugment_image(img: Any, severity: int = 9, depth: int = 2, augmentation_set: str = "all",
                      generator: Optional[torch.Generator] = None) -> Any:
    """Apply ``depth`` operations drawn from ``augmentation_set``, each at a strength drawn
    uniformly up to ``severity / 10`` with a random direction, to one image."""
    _check(severity, depth, augmentation_set)
    names = AUGMENTATION_SETS[augmentation_set]
    draws = torch.rand(depth, 3, generator=generator).tolist()
    for pick, strength, sign in draws:
        op = _OPS[names[int(pick * len(names))]]
        img = op(img, strength * severity / 10, 1.0 if sign < 0.5 else -1.0)
    return img


class RandAugmentTransform(v2.Transform):
    """A torchvision transform applying :func:`randaugment_image` to each image."""

    def __init__(self, severity: int = 9, depth: int = 2, augmentation_set: str = "all") -> None:
        super().__init__()
        _check(severity, depth, augmentation_set)
        self.severity, self.depth, self.augmentation_set = severity, depth, augmentation_set

    def forward(self, img: Any) -> Any:
        return randaugment_image(img, self.severity, self.depth, self.augmentation_set)


def randaugment(severity: int = 9, depth: int = 2, augmentation_set: str = "all") -> RandAugmentTransform:
    """A :class:`RandAugmentTransform`, for ``transforms.Compose([cf.randaugment(), ...])``."""
    return RandAugmentTransform(severity, depth, augmentation_set)


class RandAugment(Algorithm):
    """At FIT_START, inserts a :class:`RandAugmentTransform` into the training dataset's
    ``transform`` (once per dataset, as Composer's ``add_vision_dataset_transform`` places it);
    a dataset without a transform slot is refused (TypeError).

    Args:
        severity: the strongest strength, 0 to 10.
        depth: operations per image.
        augmentation_set: 'all' or 'safe'.
    """

    events = frozenset({Event.FIT_START})
    writes = frozenset()  # it changes the dataset's transform, not a State field

    def __init__(self, severity: int = 9, depth: int = 2, augmentation_set: str = "all") -> None:
        _check(severity, depth, augmentation_set)
        self.severity, self.depth, self.augmentation_set = severity, depth, augmentation_set
        self._inserted = InsertedTransforms()

    def match(self, event: Event, state: State) -> bool:
        """At FIT_START, once per training dataset."""
        return event is Event.FIT_START and self._inserted.pending(state.dataloader)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        transform = RandAugmentTransform(self.severity, self.depth, self.augmentation_set)
        self._inserted.insert(type(self).__name__, state.dataloader, transform)
        return None

    def inserted(self) -> list[str]:
        """What was inserted, one line per training dataset still alive."""
        return self._inserted.records()
