"""The trackers' tests: a tiny trainer, and the tracked content read back through the real packages."""

from __future__ import annotations

import pandas as pd
import pytest
import torch.nn.functional as F
from torch.utils.data import DataLoader

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.models import SmallCNN
from composer_lab.trainer import Trainer
from tests.explore.factories import images

pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'composer_lab[mlflow]'")
pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'composer_lab[tensorboard]'")


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


@pytest.fixture
def uri(tmp_path) -> str:
    """A real MLflow tracking store: a sqlite database in the test's folder."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
