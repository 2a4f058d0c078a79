"""AugMix (Hendrycks et al., 2020): mix an image with ``width`` randomly augmented copies of it.

Each copy goes through a chain of ``depth`` operations (1 to 3 at random for ``depth=-1``)
drawn from RandAugment's operations at strength up to ``severity / 10``
(:func:`~composer_lab.algorithms.randaugment.randaugment_image`, so the two share one set of
operations); the copies are averaged with weights from ``Dirichlet(alpha, ..., alpha)`` and
the average mixed into the original with a weight from ``Beta(alpha, alpha)``. Use
:func:`augmix_image` or :class:`AugmentAndMixTransform` in a dataset's transforms, or the
:class:`AugMix` algorithm, which inserts the transform into the training dataset at FIT_START.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from composer_lab.algorithms.dataset_transform import InsertedTransforms
from composer_lab.algorithms.randaugment import AUGMENTATION_SETS, randaugment_image
from composer_lab.algorithms.validation import check_choice, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.checks import is_int
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["AugMix", "AugmentAndMixTransform", "augmix_image", "mixing_weights"]


def _check(severity: int, depth: int, width: int, alpha: float, augmentation_set: str) -> None:
    check_positive("severity", severity, integer=True, allow_zero=True)
    if severity > 10:
        raise ValueError(f"severity must be between 0 and 10, got {severity}")
    if not (is_int(depth) and (depth == -1 or depth >= 1)):
        raise ValueError(f"depth must be -1 (1 to 3 operations at random per chain) or an integer >= 1, "
                         f"got {depth!r}")
    check_positive("width", width, integer=True)
    check_positive("alpha", alpha)
    check_choice("augmentation_set", augmentation_set, tuple(AUGMENTATION_SETS))


def mixing_weights(width: int, alpha: float, generator: Optional[torch.Generator] = None) -> tuple[list[float], float]:
    """The chains' weights, from ``Dirichlet(alpha, ..., alpha)`` (``width`` of them, summing to
    1), and the augmented share of the mix, from ``Beta(alpha, alpha)``; drawn from a NumPy
    generator seeded by one draw of ``generator`` (None: torch's global one)."""
    check_positive("width", width, integer=True)
    check_positive("alpha", alpha)
    rng = np.random.default_rng(int(torch.randint(2**62, (), generator=generator)))
    return rng.dirichlet([alpha] * width).tolist(), float(rng.beta(alpha, alpha))


def _mix(image: torch.Tensor, chains: list[torch.Tensor], weights: list[float], share: float) -> torch.Tensor:
    """``(1 - share) * image + share * sum(w * chain)``, in the image's dtype: integers rounded
    (Composer truncates, which takes 1 off a pixel whose mix falls a rounding error short of it)."""
    combined = sum(w * chain.float() for w, chain in zip(weights, chains))
    mixed = (1 - share) * image.float() + share * combined
    return mixed if image.is_floating_point() else mixed.round().clamp(0, 255).to(image.dtype)


def augmix_image(img: Any, severity: int = 3, depth: int = -1, width: int = 3, alpha: float = 1.0,
                 augmentation_set: str = "all", generator: Optional[torch.Generator] = None) -> Any:
    """AugMix one image (PIL, or a ``(C, H, W)`` tensor, uint8 or float in [0, 1]) or each image
    of a batch ``(N, C, H, W)``; returns the same kind, shape and dtype. Draws, in order: the
    weights (:func:`mixing_weights`), then each chain's depth (when -1) and operations."""
    _check(severity, depth, width, alpha, augmentation_set)
    if isinstance(img, Image.Image):
        mixed = augmix_image(TF.pil_to_tensor(img), severity, depth, width, alpha, augmentation_set, generator)
        return TF.to_pil_image(mixed, mode=img.mode)
    if not isinstance(img, torch.Tensor) or img.dim() not in (3, 4):
        shape = tuple(img.shape) if isinstance(img, torch.Tensor) else type(img).__name__
        raise ValueError(f"AugMix needs an image (C, H, W), a batch (N, C, H, W) or a PIL image, got {shape}; "
                         f"leave it out for other inputs")
    if img.dim() == 4:
        return torch.stack([augmix_image(one, severity, depth, width, alpha, augmentation_set, generator)
                            for one in img])
    weights, share = mixing_weights(width, alpha, generator)
    chains = []
    for _ in range(width):
        chain_depth = depth if depth > 0 else int(torch.randint(1, 4, (), generator=generator))
        chains.append(randaugment_image(img, severity, chain_depth, augmentation_set, generator))
    return _mix(img, chains, weights, share)


class AugmentAndMixTransform(torch.nn.Module):
    """A torchvision-style transform applying :func:`augmix_image` to each image, drawing from
    torch's global generator (seeded per DataLoader worker)."""

    def __init__(self, severity: int = 3, depth: int = -1, width: int = 3, alpha: float = 1.0,
                 augmentation_set: str = "all") -> None:
        super().__init__()
        _check(severity, depth, width, alpha, augmentation_set)
        self.severity, self.depth, self.width, self.alpha = severity, depth, width, alpha
        self.augmentation_set = augmentation_set

    def forward(self, img: Any) -> Any:
        return augmix_image(img, self.severity, self.depth, self.width, self.alpha, self.augmentation_set)

    def extra_repr(self) -> str:
        return (f"severity={self.severity}, depth={self.depth}, width={self.width}, alpha={self.alpha}, "
                f"augmentation_set={self.augmentation_set!r}")


class AugMix(Algorithm):
    """At FIT_START, inserts an :class:`AugmentAndMixTransform` into the training dataset's
    ``transform`` (once per dataset); a dataset without a transform slot is refused (TypeError).

    Args:
        severity: strength of the operations, 0 to 10.
        depth: operations per chain; -1 draws 1 to 3 per chain.
        width: chains mixed.
        alpha: concentration of the Dirichlet and Beta mixing weights (> 0; large: even weights).
        augmentation_set: 'all' or 'safe' (without the operations that resemble ImageNet-C corruptions).
    """

    events = frozenset({Event.FIT_START})
    writes = frozenset()  # it changes the dataset's transform, not a State field

    def __init__(self, severity: int = 3, depth: int = -1, width: int = 3, alpha: float = 1.0,
                 augmentation_set: str = "all") -> None:
        _check(severity, depth, width, alpha, augmentation_set)
        self.severity, self.depth, self.width, self.alpha = severity, depth, width, alpha
        self.augmentation_set = augmentation_set
        self._inserted = InsertedTransforms()

    def match(self, event: Event, state: State) -> bool:
        """At FIT_START, once per training dataset."""
        return event is Event.FIT_START and self._inserted.pending(state.dataloader)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        transform = AugmentAndMixTransform(self.severity, self.depth, self.width, self.alpha, self.augmentation_set)
        self._inserted.insert(type(self).__name__, state.dataloader, transform)
        return None

    def inserted(self) -> list[str]:
        """What was inserted, one line per training dataset still alive."""
        return self._inserted.records()
