"""Counting host syncs: the calls that make the host wait for the device (on a GPU they stall the
launch queue), counted on any device, CPU included, so a test or a benchmark can hold a loop to
none per batch (``from benchmarks.syncs import SyncCounter``: the tests run from the repository root)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["HOST_SYNCS", "SyncCounter"]

HOST_SYNCS = frozenset({torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy,
                        torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__,
                        torch.Tensor.nonzero, torch.nonzero})
"""What counts as a sync: reading a tensor's value on the host (``.item()``, ``float(t)``...) or
a shape that depends on its values (``.nonzero()``)."""


class SyncCounter(TorchFunctionMode):
    """``with SyncCounter() as counter:`` counts in ``counter.count`` the :data:`HOST_SYNCS`
    called meanwhile, wherever the tensors are."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        self.count += func in HOST_SYNCS
        return func(*args, **(kwargs or {}))
