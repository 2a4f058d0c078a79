"""CIFAR-10 from its standard python pickles (``data/cifar-10-batches-py/data_batch_1..5`` and
``test_batch``), read with an unpickler that only rebuilds NumPy arrays (no code runs)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from composer_lab.data.loaders import make_dataloaders

__all__ = ["CIFAR10", "cifar10_dataloaders", "CIFAR10_MEAN", "CIFAR10_STD"]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
_FOLDER = "cifar-10-batches-py"
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR-10 batch file")
        return super().find_class(module, name)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A batch file's images and labels; its keys may be ``bytes`` (the original Python-2 pickles)
    or ``str`` (pickled again under Python 3), as torchvision accepts."""
    try:
        with open(path, "rb") as f:
            entry = _ArrayUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, TypeError, ValueError, EOFError, AttributeError) as err:
        raise ValueError(f"{path} is not a CIFAR-10 python batch ({type(err).__name__}: {err}); download "
                         f"cifar-10-python.tar.gz and unpack it so that {path.parent} holds data_batch_1..5 "
                         f"and test_batch") from None
    found = {key.decode("latin1") if isinstance(key, bytes) else key: value
             for key, value in (entry.items() if isinstance(entry, dict) else ())}
    labels = found.get("labels", found.get("fine_labels"))
    if "data" not in found or labels is None:
        raise ValueError(f"{path} is a pickle but not a CIFAR-10 batch: expected a dict with 'data' (N x 3072 "
                         f"uint8 pixels) and 'labels' (N ints), as bytes or str keys; found "
                         f"{sorted(found) if isinstance(entry, dict) else type(entry).__name__}")
    try:
        data = np.asarray(found["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    except ValueError as err:
        raise ValueError(f"{path}: 'data' is not N x 3072 uint8 pixels (3 x 32 x 32 per image): {err}") from None
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(data)} images but {len(labels)} labels; the file is damaged")
    return data, labels


class CIFAR10(Dataset):
    """CIFAR-10 images as normalised float ``(3, 32, 32)`` tensors with int64 labels.

    ``root`` holds ``cifar-10-batches-py`` (or is that folder); ``train`` picks
    ``data_batch_*`` or ``test_batch``; ``transform`` is applied to each image tensor.
    """

    def __init__(self, root: Union[str, os.PathLike] = "data", train: bool = True,
                 transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> None:
        folder = Path(root)
        if folder.name != _FOLDER:
            folder = folder / _FOLDER
        names = sorted(p.name for p in folder.glob("data_batch_*")) if train else ["test_batch"]
        files = [folder / n for n in names if (folder / n).is_file()]
        if not files:
            raise FileNotFoundError(f"no CIFAR-10 {'training' if train else 'test'} batches in {folder}; "
                                    f"unpack cifar-10-python.tar.gz into {folder.parent} (datasets are not "
                                    f"downloaded here)")
        parts = [_read_batch(f) for f in files]
        images = torch.from_numpy(np.concatenate([p[0] for p in parts]))
        mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
        self.images = (images.float() / 255.0 - mean) / std
        self.labels = torch.from_numpy(np.concatenate([p[1] for p in parts]))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        return (self.transform(image) if self.transform else image), self.labels[index]


def cifar10_dataloaders(batch_size: int = 128,
                        root: Union[str, os.PathLike] = "data") -> tuple[DataLoader, DataLoader]:
    """Shuffled training and ordered test loaders over CIFAR-10 under ``root``."""
    return make_dataloaders(CIFAR10(root, train=True), CIFAR10(root, train=False), batch_size)
