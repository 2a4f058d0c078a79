"""Tiny experiments for the explorer's tests: 8x8 images, a narrow CNN, a few batches each."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

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
