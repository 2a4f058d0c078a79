"""The handwritten digits that ship with scikit-learn: 1797 8x8 grey images of 10 classes."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from composer_lab.data.checks import check_held_out
from composer_lab.data.loaders import make_dataloaders

__all__ = ["digits_datasets", "digits_dataloaders"]


def digits_datasets(eval_fraction: float = 0.2, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """(train, eval) datasets of ``(1, 8, 8)`` float images in [0, 1] and int64 labels, split
    at random (fixed by ``seed``)."""
    from sklearn.datasets import load_digits

    check_held_out(eval_fraction)
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_eval = int(len(labels) * eval_fraction)
    held, kept = order[:n_eval], order[n_eval:]
    return TensorDataset(images[kept], labels[kept]), TensorDataset(images[held], labels[held])


def digits_dataloaders(batch_size: int = 64, seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """Shuffled training and ordered eval loaders over :func:`digits_datasets`."""
    return make_dataloaders(*digits_datasets(seed=seed), batch_size)
