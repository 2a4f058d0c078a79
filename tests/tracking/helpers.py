"""The trackers' tests: a tiny trainer, and a run's metrics as the trackers should hold them."""

from __future__ import annotations

import pandas as pd
import torch.nn.functional as F
from torch.utils.data import DataLoader

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.core.callback import Callback
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from tests.explore.factories import images


def tiny_trainer(callbacks=(), batches: str = "6ba", **kwargs) -> Trainer:
    """A narrow CNN on 8x8 images with CutOut and MixUp, evaluated every 3 batches."""
    return Trainer(SmallCNN(in_channels=1, num_classes=4, width=4), DataLoader(images(48), batch_size=8, shuffle=True),
                   batches, loss_fn=F.cross_entropy, eval_dataloader=DataLoader(images(32, seed=1), batch_size=16),
                   eval_interval="3ba", algorithms=[CutOut(), MixUp()], seed=0, progress_bar=False,
                   callbacks=list(callbacks), **kwargs)


def histories(metrics: pd.DataFrame) -> dict[str, list[tuple[int, float]]]:
    """Each metric name's ``(step, value)`` pairs, by step, as a tracker should hold them."""
    return {str(name): sorted(zip(rows["batch"].astype(int), rows["value"].astype(float)))
            for name, rows in metrics.groupby("name", observed=True)}


class FailAt(Callback):
    """Raises ``error`` at BATCH_END once ``batch`` batches were applied (a run killed mid-fit)."""

    def __init__(self, batch: int, error: BaseException) -> None:
        self.batch, self.error = batch, error

    def batch_end(self, state, logger):
        if state.timestamp.batch == self.batch:
            raise self.error
