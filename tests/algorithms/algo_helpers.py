"""Tiny models (aliased submodules, tied weights among them) and an engine-driving helper shared by
the algorithm tests."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from composer_lab.core import Engine, Event, State


class TinyCNN(nn.Module):
    """Conv - BatchNorm - ReLU - pool - linear on (N, 3, 8, 8) images, any spatial size."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1))


class Aliased(nn.Module):
    """A model zoo's shape: the stem is ``features[0]`` and also ``stem``; strided convolutions
    and a max-pool (BlurPool has work), BatchNorm (its statistics must survive every probe)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.stem = self.features[0]
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class Tied(nn.Module):
    """Two layers sharing one weight Parameter, as a language model's embedding and head do."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.project = nn.Linear(16, 16)
        self.head = nn.Linear(16, classes)
        self.unembed = nn.Linear(16, 16, bias=False)
        self.unembed.weight = self.project.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.head(torch.relu(self.unembed(torch.relu(self.project(h)))))


def make_state(model: nn.Module, batch, algorithms: Sequence = (), max_duration: str = "10ba",
               loss_fn=nn.functional.cross_entropy, seed: int = 0) -> tuple[State, Engine]:
    """A State holding ``batch`` and an Engine over ``algorithms``, after INIT."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = State(model, max_duration, optimizers=opt, algorithms=algorithms, seed=seed)
    state.loss_fn = loss_fn
    state.batch = batch
    engine = Engine(state)
    engine.run_event(Event.INIT)
    return state, engine


def at_batch(state: State, batch: int, batch_in_epoch: int | None = None) -> None:
    """Move the state's timestamp to global batch ``batch``."""
    from composer_lab.core import Timestamp
    state.timestamp = Timestamp(batch=batch, batch_in_epoch=batch if batch_in_epoch is None else batch_in_epoch)
