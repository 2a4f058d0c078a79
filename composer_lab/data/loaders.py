"""The one way the bundled datasets become dataloaders: shuffled training, ordered evaluation."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from composer_lab.core.checks import check_positive_int

__all__ = ["make_dataloaders"]


def make_dataloaders(train: Dataset, evaluation: Dataset, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """(train, eval) loaders; the trainer reseeds the training shuffle from its seed each epoch.
    With CUDA they pin their batches in memory, so the trainer's non-blocking copies to the GPU
    overlap the work already queued there."""
    check_positive_int("batch_size", batch_size)
    pin = torch.cuda.is_available()
    return (DataLoader(train, batch_size=batch_size, shuffle=True, pin_memory=pin),
            DataLoader(evaluation, batch_size=max(batch_size, 256), pin_memory=pin))
