"""Pins of the "Differences from Composer" rows (docs/composer_differences.md) whose behaviour lives
in the trainer: each fails if composer_lab drifts to Composer's behaviour without the table saying so."""

import inspect

import pytest
import torch
import torch.nn.functional as F

from composer_lab.trainer import Trainer


def test_train_dataloader_is_required():
    """Composer's Trainer takes ``train_dataloader=None`` (to give one to ``fit`` later, or only
    to evaluate); here it is the second positional argument, and None is refused with the fix."""
    parameter = inspect.signature(Trainer).parameters["train_dataloader"]
    assert parameter.default is inspect.Parameter.empty and list(inspect.signature(Trainer).parameters)[1] == \
        "train_dataloader"
    with pytest.raises(TypeError, match=r"train_dataloader must be an iterable of batches such as a torch "
                                        r"DataLoader, got NoneType None; wrap your dataset"):
        Trainer(torch.nn.Linear(4, 2), None, "1ep", loss_fn=F.cross_entropy)
