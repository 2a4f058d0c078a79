"""The one way the bundled datasets become dataloaders: shuffled training, ordered evaluation."""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset

__all__ = ["make_dataloaders"]


def make_dataloaders(train: Dataset, evaluation: Dataset, batch_size: int) -> tuple[DataLoader, DataLoader]:
    """(train, eval) loaders; the trainer reseeds the training shuffle from its seed each epoch."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(evaluation, batch_size=max(batch_size, 256)))
