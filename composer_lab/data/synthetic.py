"""Generated images: each class is a fixed random pattern, seen through noise and a random
shift, so a model can learn it and augmentations have something to work on."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from composer_lab.core.checks import check_positive_int
from composer_lab.data.loaders import make_dataloaders

__all__ = ["synthetic_images", "synthetic_dataloaders"]


def synthetic_images(n: int = 2048, num_classes: int = 10, image_size: int = 32, channels: int = 3,
                     noise: float = 0.5, seed: int = 0) -> TensorDataset:
    """``n`` images ``(channels, image_size, image_size)`` with int64 labels."""
    for name, value in (("n", n), ("num_classes", num_classes), ("image_size", image_size), ("channels", channels)):
        check_positive_int(name, value)
    gen = torch.Generator().manual_seed(seed)
    patterns = torch.randn(num_classes, channels, image_size, image_size, generator=gen)
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    shifts = torch.randint(-2, 3, (n, 2), generator=gen)
    images = torch.stack([torch.roll(patterns[y], tuple(s.tolist()), dims=(1, 2)) for y, s in zip(labels, shifts)])
    images = images + noise * torch.randn(images.shape, generator=gen)
    return TensorDataset(images, labels)


def synthetic_dataloaders(batch_size: int = 64, seed: int = 0, n: int = 2048,
                          image_size: int = 32) -> tuple[DataLoader, DataLoader]:
    """Training loader over ``n`` generated images and an eval loader over ``n // 4`` more,
    drawn from the same class patterns."""
    everything = synthetic_images(n + n // 4, image_size=image_size, seed=seed)
    x, y = everything.tensors
    return make_dataloaders(TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:]), batch_size)
