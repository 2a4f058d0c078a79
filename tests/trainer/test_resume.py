"""Resuming a run: exact for every algorithm, even when the data draws random numbers as it is
read, and the metrics of a resumed run hold one row per (name, step)."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
from torch import nn

from composer_lab import Callback
from composer_lab.algorithms import ALGORITHMS
from composer_lab.models.gpt import TinyGPT, language_model_loss

from tests.trainer.helpers import make_trainer


class NoisyImages(torch.utils.data.Dataset):
    """(3, 8, 8) images that draw fresh noise from torch's global generator in ``__getitem__``
    (lazily, as the DataLoader reads them), with a ``transform`` RandAugment can join."""

    transform = None

    def __init__(self, n: int = 40) -> None:
        gen = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, 8, 8, generator=gen)
        self.targets = torch.randint(0, 4, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        image = (self.images[i] + 0.05 * torch.rand(3, 8, 8)).clamp(0, 1)
        return (self.transform(image) if self.transform is not None else image), self.targets[i]


class NoisyTokens(torch.utils.data.Dataset):
    """Next-token windows of 8 tokens (of 16), one token of each replaced at random from torch's
    global generator in ``__getitem__``."""

    def __init__(self, n: int = 40) -> None:
        self.tokens = torch.randint(0, 16, (n, 9), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int):
        window = self.tokens[i].clone()
        window[torch.randint(0, 9, ())] = torch.randint(0, 16, ())
        return window[:-1], window[1:]


class Cnn(nn.Module):
    """A strided conv (for BlurPool) with BatchNorm and dropout (drawing from the global
    generator as it trains), on (N, 3, H, W) images of any size."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dropout = nn.Dropout(0.1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.relu(self.bn(self.conv(x))).mean((2, 3))))


class Transformer(nn.Module):
    """A transformer layer and a LayerNorm (for GatedLinearUnits and FusedLayerNorm) on the images' values."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.layer(x.reshape(x.shape[0], -1, 8))).mean(1))


ACTIVE_FROM_THE_START = {"selective_backprop": dict(start=0.0, interrupt=0), "random_subset": dict(start=0.0),
                         "layer_freezing": dict(freeze_start=0.0), "progressive_resizing": dict(size_increment=2),
                         "blurpool": dict(min_channels=1)}


def _trainer(name: str, num_workers: int = 0, **kwargs):
    """A trainer for the algorithm ``name`` on a problem it applies to: a language model for
    ALiBi, a transformer for GatedLinearUnits and FusedLayerNorm, a CNN for the others."""
    torch.manual_seed(0)
    data, loss_fn = NoisyImages(), nn.functional.cross_entropy
    if name == "alibi":
        data, loss_fn = NoisyTokens(), language_model_loss
        model = TinyGPT(vocab_size=16, max_sequence_length=8, d_model=8, n_layers=1, n_heads=2, dropout=0.1)
    elif name in ("gated_linear_units", "fused_layernorm"):
        model = Transformer()
    else:
        model = Cnn()
    train = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, num_workers=num_workers)
    algorithm = ALGORITHMS[name](**ACTIVE_FROM_THE_START.get(name, {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FusedLayerNorm warns without Apex
        return make_trainer(model=model, train_dataloader=train, max_duration="2ep", seed=3, loss_fn=loss_fn,
                            algorithms=[algorithm], **kwargs)


def _fit(trainer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit()


def _assert_same_training(a, b) -> None:
    for (name, x), (_, y) in zip(a.state.model.state_dict().items(), b.state.model.state_dict().items()):
        assert torch.equal(x, y), f"{name} differs"
    for opt_a, opt_b in zip(a.state.optimizers, b.state.optimizers):
        for key, saved in opt_a.state_dict()["state"].items():
            loaded = opt_b.state_dict()["state"][key]
            assert all(torch.equal(saved[k], loaded[k]) for k in saved), f"optimizer state {key} differs"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("checkpoint,num_workers", [("ep0-ba2.pt", 0), ("ep1-ba7.pt", 2)])
def test_resume_mid_epoch_is_exact_when_the_data_draws_lazily(tmp_path, name, checkpoint, num_workers):
    """5 batches an epoch; resumed at the 3rd batch of an epoch, after skipping 2 batches whose
    reading drew random numbers (in this process, or in worker processes): the data, and so
    the training, are the uninterrupted run's. In the second epoch, LayerFreezing has frozen
    layers at the first epoch's end, which the resumed run did not see."""
    full = _trainer(name, num_workers, save_folder=tmp_path, save_interval="1ba")
    _fit(full)
    resumed = _trainer(name, num_workers, load_path=tmp_path / checkpoint)
    _fit(resumed)
    assert resumed.state.timestamp == full.state.timestamp
    _assert_same_training(full, resumed)


class DrawsAtFitStart(Callback):
    """Draws from the global generator at FIT_START, which a resumed run fires and the
    uninterrupted run did not at that point."""

    def fit_start(self, state, logger) -> None:
        torch.rand(1)


@pytest.mark.parametrize("checkpoint,interval", [("ep0-ba2.pt", "1ba"), ("ep1-ba5.pt", "1ep")])
def test_resume_restores_random_state_after_the_events_before_the_first_batch(tmp_path, checkpoint, interval):
    """The checkpoint's random state is restored where the saving run went on from it (mid-epoch
    and at an epoch's start), not at load, before AFTER_LOAD and FIT_START draw from it."""
    full = _trainer("cutout", callbacks=[DrawsAtFitStart()], save_folder=tmp_path, save_interval=interval)
    _fit(full)
    resumed = _trainer("cutout", callbacks=[DrawsAtFitStart()], load_path=tmp_path / checkpoint)
    _fit(resumed)
    _assert_same_training(full, resumed)


class LogsAtInit(Callback):
    """Logs one metric at INIT, as a callback reporting its setup would."""

    def init(self, state, logger) -> None:
        logger.log_metrics({"setup/params": sum(p.numel() for p in state.model.parameters())})


def test_metrics_logged_at_init_are_not_repeated_by_resumes(tmp_path):
    first = make_trainer(callbacks=[LogsAtInit()], save_folder=tmp_path / "a", save_interval="1ba",
                         max_duration="2ba")
    first.fit()
    second = make_trainer(callbacks=[LogsAtInit()], load_path=first.checkpoints[-1], save_folder=tmp_path / "a",
                          save_interval="1ba", max_duration="4ba")
    second.fit()
    third = make_trainer(callbacks=[LogsAtInit()], load_path=second.checkpoints[-1], max_duration="6ba")
    third.fit()
    metrics = third.metrics.astype({"name": str})
    assert not metrics.duplicated(["batch", "epoch", "phase", "name"]).any(), metrics
    assert (metrics["name"] == "setup/params").sum() == 1
    assert metrics.query("name == 'loss/train'")["batch"].tolist() == list(range(6))
