"""Tiny data, models and algorithms for the trainer tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from composer_lab import Algorithm, Event, Trainer


def tiny_data(n: int = 24, features: int = 6, classes: int = 3, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    return TensorDataset(x, y)


def tiny_loader(n: int = 24, batch_size: int = 8, shuffle: bool = False, **kwargs) -> DataLoader:
    return DataLoader(tiny_data(n, **kwargs), batch_size=batch_size, shuffle=shuffle)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))


def counts(timestamp) -> dict:
    """A Timestamp's (or its state_dict's) counts, without its wall-clock times (which differ between runs)."""
    fields = timestamp if isinstance(timestamp, dict) else timestamp.state_dict()
    return {name: value for name, value in fields.items() if not name.endswith("_wct")}


def make_trainer(**kwargs) -> Trainer:
    """A small CPU trainer; keyword arguments override the defaults."""
    args = dict(model=tiny_model(), train_dataloader=tiny_loader(), max_duration="2ep",
                loss_fn=nn.functional.cross_entropy, device="cpu", progress_bar=False)
    args.update(kwargs)
    return Trainer(**args)


class OnEvent(Algorithm):
    """Runs ``fn(state)`` at one event; records how often it ran."""

    def __init__(self, event: Event, fn=None) -> None:
        self.event = event
        self.fn = fn
        self.calls = 0

    def match(self, event, state) -> bool:
        return event is self.event

    def apply(self, event, state, logger) -> None:
        self.calls += 1
        if self.fn is not None:
            self.fn(state)
