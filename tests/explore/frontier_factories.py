"""Tiny experiments for the frontier's tests: :mod:`tests.explore.factories`' images, with a duration."""

from __future__ import annotations

import torch.nn.functional as F
from torch.utils.data import DataLoader

from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from composer_lab.trainer.rng import seed_all
from tests.explore.factories import images


def make_trainer(algorithms: list, seed: int, duration: str) -> Trainer:
    """A narrow CNN on 8x8 images, batches of 4, for ``duration``, evaluated at the end."""
    seed_all(seed)
    train = DataLoader(images(16), batch_size=4, shuffle=True)
    test = DataLoader(images(16, seed=1), batch_size=16)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), train, duration, loss_fn=F.cross_entropy,
                   eval_dataloader=test, eval_interval=duration, algorithms=algorithms, seed=seed, progress_bar=False)


def ignoring_duration(algorithms: list, seed: int, duration: str) -> Trainer:
    """:func:`make_trainer` that always trains 2 batches, whatever the duration (a broken factory)."""
    return make_trainer(algorithms, seed, "2ba")


def curved(speeds: dict, noise: float, algorithms: list, seed: int, duration: str) -> Trainer:
    """An experiment of known curves: ``duration`` batches of 4 of one tiny model, then 'score' =
    0.5 + 0.1 * log2(samples * speed), ``speed`` from ``speeds`` by the algorithms' class names
    ('' for none), + a seed effect shared by every candidate (sd 0.01) + the run's own noise (sd
    ``noise``), both fixed by the seed: a candidate of speed 2 reaches any quality at half the samples."""
    import math
    import random

    from tests.explore.factories import Score

    name = " + ".join(type(a).__name__ for a in algorithms)
    samples = 4 * int(duration.removesuffix("ba"))
    own = random.Random(f"{name}/{duration}/{seed}").gauss(0, 1)
    value = 0.5 + 0.1 * math.log2(samples * speeds[name]) + 0.01 * random.Random(seed).gauss(0, 1) + noise * own
    seed_all(seed)
    train = DataLoader(images(8), batch_size=4, shuffle=True)
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=2), train, duration, loss_fn=F.cross_entropy,
                   algorithms=algorithms, callbacks=[Score(value)], seed=seed, progress_bar=False, trace="off")
