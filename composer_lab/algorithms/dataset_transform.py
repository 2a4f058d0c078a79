"""Transforms an algorithm inserts into the training dataset at FIT_START (AugMix, ColOut with
``batch=False``): the one place that finds the dataset's transform slot, puts the transform in it
as Composer's ``add_vision_dataset_transform`` does, refuses a dataset without a slot (naming the
fix), and records what it inserted, so a dataset gets each algorithm's transform once."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

from torchvision import transforms
from torchvision.transforms import v2

__all__ = ["add_vision_dataset_transform", "InsertedTransforms"]

log = logging.getLogger(__name__)

_COMPOSE = (transforms.Compose, v2.Compose)
_TO_TENSOR = (transforms.ToTensor, transforms.PILToTensor, v2.ToImage, v2.PILToTensor)


def add_vision_dataset_transform(dataset: Any, transform: Callable, is_tensor_transform: bool = False) -> int:
    """Put ``transform`` into ``dataset.transform`` in place; returns its position there.

    As Composer: an empty slot takes it; in a ``Compose`` it goes just before the first
    to-tensor transform (just after it when ``is_tensor_transform``), else at the end; a single
    transform is joined with it in a ``Compose`` (it goes first only in front of a lone
    to-tensor transform it must precede). A dataset without a ``transform`` attribute: TypeError.
    """
    if not hasattr(dataset, "transform"):
        raise TypeError(f"{type(dataset).__name__} has no 'transform' attribute to add {type(transform).__name__} "
                        f"to; use a dataset with a transform slot (a torchvision VisionDataset)")
    current = dataset.transform
    if current is None:
        dataset.transform, position = transform, 0
    elif isinstance(current, _COMPOSE):
        steps = current.transforms
        position = next((i for i, t in enumerate(steps) if isinstance(t, _TO_TENSOR)), len(steps))
        position += int(is_tensor_transform and position < len(steps))
        steps.insert(position, transform)
    elif isinstance(current, _TO_TENSOR) and not is_tensor_transform:
        dataset.transform, position = transforms.Compose([transform, current]), 0
    else:
        dataset.transform, position = transforms.Compose([current, transform]), 1
    log.info("%r added to %s.transform at position %d", transform, type(dataset).__name__, position)
    return position


class InsertedTransforms:
    """What one algorithm inserted, dataset by dataset (held weakly: a dataset dropped is
    forgotten), so that every fit's FIT_START inserts into a new dataset and never twice into one."""

    def __init__(self) -> None:
        self._datasets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def pending(self, dataloader: Any) -> bool:
        """Whether the dataloader's dataset has not yet got this algorithm's transform."""
        dataset = getattr(dataloader, "dataset", None)
        return dataset is None or dataset not in self._datasets

    def insert(self, owner: str, dataloader: Any, transform: Callable, is_tensor_transform: bool = False) -> None:
        """Insert ``transform`` into the training dataset of ``dataloader`` for the algorithm
        ``owner``; TypeError naming ``owner`` and the fix when the dataset has no transform slot."""
        dataset = getattr(dataloader, "dataset", None)
        if not hasattr(dataset, "transform"):
            name = type(transform).__name__
            holder = (f"{type(dataset).__name__} has none" if dataset is not None else
                      f"the training dataloader ({type(dataloader).__name__}) has no dataset")
            raise TypeError(f"{owner} adds {name} to the training dataset's 'transform' at FIT_START, but {holder}; "
                            f"give a DataLoader over a dataset with a transform slot (a torchvision VisionDataset), "
                            f"or put {name}() in your own dataset's transforms and leave {owner} out")
        position = add_vision_dataset_transform(dataset, transform, is_tensor_transform)
        self._datasets[dataset] = (transform, position)

    def records(self) -> list[str]:
        """What was inserted where, one line per dataset still alive."""
        return [f"{transform!r} at position {position} of {type(dataset).__name__}.transform"
                for dataset, (transform, position) in self._datasets.items()]
