"""Devices and precision: where the model and batches live, and how forward/loss are cast."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Union

import torch

__all__ = ["PRECISIONS", "resolve_device", "resolve_precision", "move_to_device", "make_grad_scaler",
           "fresh_grad_scaler"]

PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    """'cpu', 'gpu' (or 'cuda', 'cuda:N', a torch.device); None picks cuda when available."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, str) and device.lower() == "gpu":
        device = "cuda"
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device; use 'cpu' or 'gpu' (or None to pick "
                         f"cuda when available)") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asks for a GPU but CUDA is not available here (torch "
                         f"{torch.__version__}, cuda build: {torch.version.cuda}); use device='cpu', or "
                         f"device=None to pick the GPU only when there is one")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} is not supported; use 'cpu' or 'gpu' (or None to pick cuda "
                         f"when available)")
    return resolved


def resolve_precision(precision: Optional[str], device: torch.device) -> str:
    """One of :data:`PRECISIONS`; None gives fp32 on CPU and amp_bf16 (amp_fp16 where bf16 is
    not supported) on GPU."""
    if precision is None:
        if device.type != "cuda":
            return "fp32"
        return "amp_bf16" if torch.cuda.is_bf16_supported() else "amp_fp16"
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}; 'amp_*' runs forward and "
                         f"loss under autocast, 'amp_fp16' also scales the loss")
    return precision


def move_to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor on ``device`` (non-blocking from pinned memory); a batch
    already there is returned as it is (the same object)."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return _move_sequence(batch, device)
    if isinstance(batch, Mapping):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    return batch


def _move_sequence(batch: Union[tuple, list], device: torch.device) -> Union[tuple, list]:
    """A tuple or list batch on ``device``: the same object when nothing in it moved."""
    moved = [move_to_device(v, device) for v in batch]
    if all(m is v for m, v in zip(moved, batch)):
        return batch
    return type(batch)(moved)


def make_grad_scaler(precision: str, device: torch.device) -> Optional[torch.amp.GradScaler]:
    """A GradScaler for 'amp_fp16' (small fp16 gradients would underflow); None otherwise."""
    if precision != "amp_fp16":
        return None
    return torch.amp.GradScaler(device.type)


def fresh_grad_scaler(scaler: torch.amp.GradScaler, device: torch.device) -> torch.amp.GradScaler:
    """A scaler with ``scaler``'s scale and growth state but no step under way (after a batch
    was abandoned between ``unscale_`` and ``step``, the old one would refuse the next step)."""
    fresh = torch.amp.GradScaler(device.type)
    fresh.load_state_dict(scaler.state_dict())
    return fresh
