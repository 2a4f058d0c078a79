"""The one way the bundled datasets become dataloaders: shuffled training, ordered evaluation."""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset

from composer_lab.data.checks import check_positive_int

__all__ = ["make_dataloaders"]


def make_dataloaders(train: Dataset, evaluation: Dataset, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """(train, eval) loaders; the trainer reseeds the training shuffle from its seed each epoch."""
    check_positive_int("batch_size", batch_size)
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(evaluation, batch_size=max(batch_size, 256)))
