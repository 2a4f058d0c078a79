"""Tiny experiments for the explorer's tests: 8x8 images, a narrow CNN, a few batches each."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from composer_lab.core.callback import Callback
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from composer_lab.trainer.rng import seed_all


def images(n: int = 48, seed: int = 0) -> TensorDataset:
    """``n`` random 1x8x8 images whose class (of 4) is the brightest quadrant: learnable fast."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    for label in range(4):
        rows, cols = divmod(label, 2)
        x[y == label, :, rows * 4:rows * 4 + 4, cols * 4:cols * 4 + 4] += 1.0
    return TensorDataset(x, y)


def make_trainer(algorithms: list, seed: int, batches: str = "6ba") -> Trainer:
    """A narrow CNN on :func:`images`, batches of 8, evaluated at the end."""
    seed_all(seed)
    train = DataLoader(images(48), batch_size=8, shuffle=True)
    test = DataLoader(images(32, seed=1), batch_size=16)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), train, batches, loss_fn=F.cross_entropy,
                   eval_dataloader=test, eval_interval=batches, algorithms=algorithms, seed=seed, progress_bar=False)


def not_a_trainer(algorithms: list, seed: int) -> str:
    return "a trainer"


def failing_while(flag: str, algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer`, but seed 1 fails while the file ``flag`` exists (a run that crashes)."""
    import os

    if seed == 1 and os.path.exists(flag):
        raise RuntimeError("the worker crashed")
    return make_trainer(algorithms, seed)


def slow(delay: float, algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` that takes ``delay`` seconds longer to build (a run long enough to kill)."""
    import time

    time.sleep(delay)
    return make_trainer(algorithms, seed)


def dying_while(flag: str, algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer`, but the worker process dies at seed 1 while the file ``flag`` exists."""
    import os

    if seed == 1 and os.path.exists(flag):
        os._exit(1)
    return make_trainer(algorithms, seed)


class Score(Callback):
    """Logs ``value`` as the metric 'score' when the fit ends."""

    def __init__(self, value: float) -> None:
        self.value = value

    def fit_end(self, state, logger) -> None:
        logger.log_metrics({"score": self.value})


def scored(effects: dict, noise: float, algorithms: list, seed: int) -> Trainer:
    """An experiment of known effects: one batch of :func:`make_trainer`'s, then 'score' =
    ``effects`` of the list order ('CutOut > MixUp') + a seed effect shared by every order (sd 0.05)
    + the run's own noise (sd ``noise``), both fixed by the seed, so a race's verdicts can be
    checked against the truth."""
    import random

    order = " > ".join(type(a).__name__ for a in algorithms)
    shared, own = random.Random(seed).gauss(0, 1), random.Random(f"{order}/{seed}").gauss(0, 1)
    value = effects[order] + 0.05 * shared + noise * own
    seed_all(seed)
    train = DataLoader(images(16), batch_size=8, shuffle=True)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), train, "1ba", loss_fn=F.cross_entropy,
                   algorithms=algorithms, callbacks=[Score(value)], seed=seed, progress_bar=False)


def dying_once(flag: str, algorithms: list, seed: int, then: Callable = make_trainer) -> Trainer:
    """``then`` (default :func:`make_trainer`), but the first run at seed 1 that finds the file
    ``flag`` removes it and kills its worker process (a worker lost once, mid-sweep)."""
    import os

    if seed == 1 and os.path.exists(flag):
        os.remove(flag)
        os._exit(1)
    return then(algorithms, seed)


def dropping(algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` that ignores the algorithms it is given (a broken factory)."""
    return make_trainer([], seed)


def reordering(algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` that trains the algorithms it is given in reverse (a broken factory)."""
    return make_trainer(algorithms[::-1], seed)


def with_passes(passes: list, algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` whose engine runs ``passes``."""
    trainer = make_trainer(algorithms, seed)
    trainer.engine.passes = passes
    return trainer


def from_file(path: str, algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` on the images saved in the file ``path`` (``torch.save`` of x, y): data
    that may be rewritten on disk while the factory's code and values stay as they were."""
    seed_all(seed)
    x, y = torch.load(path)
    train = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), train, "2ba", loss_fn=F.cross_entropy,
                   eval_dataloader=DataLoader(images(16, seed=1), batch_size=16), eval_interval="2ba",
                   algorithms=algorithms, seed=seed, progress_bar=False)


class Stream(torch.utils.data.IterableDataset):
    """Images as a stream: a data set that cannot be read by index."""

    def __iter__(self):
        return iter(images(16))


def streaming(algorithms: list, seed: int) -> Trainer:
    """:func:`make_trainer` whose training data is a :class:`Stream`."""
    seed_all(seed)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), DataLoader(Stream(), batch_size=8), "2ba",
                   loss_fn=F.cross_entropy, eval_dataloader=DataLoader(images(16, seed=1), batch_size=16),
                   eval_interval="2ba", algorithms=algorithms, seed=seed, progress_bar=False)
