"""A small convolutional classifier that works at any image size (8x8 digits to 32x32)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SmallCNN"]


def _conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


class SmallCNN(nn.Module):
    """Two conv blocks, a 2x2 max-pool, a wider conv block, global average pooling and a
    linear head. Global pooling makes it accept any input size (so Selective Backprop can
    score downsampled images and progressive resizing can shrink them)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(_conv(in_channels, width), _conv(width, width), nn.MaxPool2d(2, ceil_mode=True),
                                      _conv(width, 2 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
