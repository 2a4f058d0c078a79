"""Tiny models for the surgery tests: torchvision ResNet blocks (StochasticDepth), and
convolutions and linears wide enough for SqueezeExcite and Factorize with small thresholds."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck


def tiny_resnet(classes: int = 4) -> nn.Module:
    """Stem, a Bottleneck, two BasicBlocks (the second downsamples), pool, linear: 8x8 images."""
    down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         Bottleneck(8, 2), BasicBlock(8, 8), BasicBlock(8, 16, stride=2, downsample=down),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))


def wide_cnn(classes: int = 4) -> nn.Module:
    """Convolutions of 16 and 32 channels (one strided) and a 32-feature linear."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, classes))


def images(n: int = 12, side: int = 8, classes: int = 4, seed: int = 0) -> torch.utils.data.TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.rand(n, 3, side, side, generator=gen),
                                          torch.randint(0, classes, (n,), generator=gen))


def loader(n: int = 12) -> torch.utils.data.DataLoader:
    """3 batches of 4."""
    return torch.utils.data.DataLoader(images(n), batch_size=4)


def optimizer_params(optimizers) -> list[int]:
    """The ids of every parameter the optimizers hold, each time it is held."""
    return [id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread (the machine is shared and these models are tiny), the caller's count restored after;
    autouse in each test module that imports it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
