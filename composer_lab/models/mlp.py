"""A multi-layer perceptron over flattened inputs."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = ["MLP"]


class MLP(nn.Module):
    """``Flatten``, then Linear + ReLU for each of ``hidden``, then a Linear to ``num_classes``."""

    def __init__(self, in_features: int = 64, num_classes: int = 10, hidden: Sequence[int] = (256,)) -> None:
        super().__init__()
        widths = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
