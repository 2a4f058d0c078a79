"""Small algorithms and a State + Engine for the lab's tests."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from composer_lab.core import Algorithm, Engine, Event, State
from composer_lab.trainer import Trainer


class Pick(Algorithm):
    """Selects half of the batch inside [start, end) of the run, like Selective Backprop."""

    selects_batch = True

    def __init__(self, start: float = 0.5, end: float = 0.9) -> None:
        if not 0 <= start <= end <= 1:
            raise ValueError(f"need 0 <= start <= end <= 1, got start={start}, end={end}")
        self.start, self.end = start, end

    def match(self, event, state):
        return event is Event.AFTER_DATALOADER and self.start <= state.get_elapsed_duration() < self.end

    def apply(self, event, state, logger):
        x, y = state.batch
        state.batch = (x[: len(x) // 2], y[: len(y) // 2])


class Mix(Algorithm):
    """Changes the inputs after the dataloader."""

    def __init__(self, alpha: float = 0.2, enabled_epochs: int = 3) -> None:
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.alpha, self.enabled_epochs = alpha, enabled_epochs

    def match(self, event, state):
        return event is Event.AFTER_DATALOADER

    def apply(self, event, state, logger):
        x, y = state.batch
        state.batch = (x * (1 - self.alpha), y)


class Smooth(Algorithm):
    """Replaces the targets before the loss and puts them back after it."""

    def __init__(self, smoothing: float = 0.1) -> None:
        self.smoothing = smoothing

    def match(self, event, state):
        return event in (Event.BEFORE_LOSS, Event.AFTER_LOSS)

    def apply(self, event, state, logger):
        x, y = state.batch
        state.batch = (x, y.clone())


@pytest.fixture
def engine() -> Engine:
    """An engine over a tiny model with Pick, Mix and Smooth, 20 batches long."""
    model = torch.nn.Linear(4, 2)
    state = State(model, "20ba", algorithms=[Pick(), Mix(), Smooth()])
    return Engine(state)


class Fail(Algorithm):
    """Raises inside apply at after_forward of the given batch."""

    def __init__(self, at: int = 2) -> None:
        self.at = at

    def match(self, event, state):
        return event is Event.AFTER_FORWARD and state.timestamp.batch == self.at

    def apply(self, event, state, logger):
        raise RuntimeError(f"failed on purpose at batch {self.at}")


def make_trainer(algorithms=(), max_duration="12ba", eval_interval="4ba", seed=0, **kwargs) -> Trainer:
    """A real Trainer on a tiny generated problem (64 examples of 4 features, batches of 8)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=gen)
    y = (x[:, 0] > 0).long()
    data = TensorDataset(x, y)
    return Trainer(torch.nn.Linear(4, 2), DataLoader(data, batch_size=8), max_duration, loss_fn=F.cross_entropy,
                   eval_dataloader=DataLoader(data, batch_size=32), eval_interval=eval_interval,
                   algorithms=algorithms, progress_bar=False, seed=seed, **kwargs)

# The browser test opens browser_lab.ipynb itself; nbval must not collect it as a doc notebook.
collect_ignore_glob = ["*.ipynb"]
