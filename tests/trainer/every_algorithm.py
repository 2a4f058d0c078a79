"""A trainer for each algorithm of the collection, on a small problem it applies to, whose data
draws random numbers as it is read (so resuming and previews are tested where they are hard)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

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


def resnet_blocks() -> nn.Module:
    """torchvision ResNet blocks (for StochasticDepth): a stem, a BasicBlock, pool and a linear."""
    from torchvision.models.resnet import BasicBlock
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), BasicBlock(8, 8),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


ACTIVE_FROM_THE_START = {"selective_backprop": dict(start=0.0, interrupt=0), "random_subset": dict(start=0.0),
                         "layer_freezing": dict(freeze_start=0.0), "progressive_resizing": dict(size_increment=2),
                         "blurpool": dict(min_channels=1),
                         "swa": dict(swa_start="0.2dur", swa_end="0.6dur", update_interval="2ba",
                                     schedule_swa_lr=True, anneal_steps=2),
                         "seq_length_warmup": dict(duration=0.5, min_seq_length=4, max_seq_length=8, step_size=2)}
ACTIVE_FROM_THE_START.update({  # the surgeries, with thresholds the small models meet
    "stochastic_depth": dict(target_layer_name="ResNetBasicBlock", stochastic_method="sample", drop_rate=0.5),
    "squeeze_excite": dict(latent_channels=2, min_channels=3),
    "factorize": dict(min_channels=3, latent_channels=2, min_features=4, latent_features=1)})
LANGUAGE_MODEL_ALGORITHMS = ("alibi", "seq_length_warmup")
"""The algorithms trained on a language model (NoisyTokens, TinyGPT) rather than on images."""


class GroupNormCnn(Cnn):
    """The CNN with a GroupNorm in place of its BatchNorm (for LowPrecisionGroupNorm)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.GroupNorm(2, 8)


LOW_PRECISION = {"low_precision_layernorm": Transformer, "low_precision_groupnorm": GroupNormCnn}
"""The algorithms that act only under autocast: trained with precision='amp_bf16' on these models."""

ACTIVE_FROM_THE_START.update({"ghost_batchnorm": dict(ghost_batch_size=3), "gyro_dropout": dict(sigma=8, tau=2)})


def trainer_for(name: str, num_workers: int = 0, **kwargs):
    """A trainer for the algorithm ``name`` on a problem it applies to: a language model for
    ALiBi and SeqLengthWarmup, a transformer for GatedLinearUnits and FusedLayerNorm, a CNN for the others."""
    torch.manual_seed(0)
    data, loss_fn = NoisyImages(), nn.functional.cross_entropy
    if name in LANGUAGE_MODEL_ALGORITHMS:
        data, loss_fn = NoisyTokens(), language_model_loss
        model = TinyGPT(vocab_size=16, max_sequence_length=8, d_model=8, n_layers=1, n_heads=2, dropout=0.1)
    elif name in ("gated_linear_units", "fused_layernorm"):
        model = Transformer()
    elif name == "stochastic_depth":
        model = resnet_blocks()
    elif name in LOW_PRECISION:
        model = LOW_PRECISION[name]()
        kwargs = {"precision": "amp_bf16", **kwargs}
    else:
        model = Cnn()
    train = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, num_workers=num_workers)
    algorithm = ALGORITHMS[name](**ACTIVE_FROM_THE_START.get(name, {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FusedLayerNorm warns without Apex
        return make_trainer(model=model, train_dataloader=train, max_duration="2ep", seed=3, loss_fn=loss_fn,
                            algorithms=[algorithm], **kwargs)
