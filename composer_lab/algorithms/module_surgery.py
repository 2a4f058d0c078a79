"""Model surgery: swap submodules in place, keeping the Parameter objects that survive.

Replacements wrap or reuse the original modules' parameters, so an optimizer built before
the surgery stays valid; parameters a replacement adds are registered with the optimizers.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
from torch import nn

__all__ = ["replace_modules", "register_new_parameters"]


def replace_modules(model: nn.Module, replacement: Callable[[nn.Module], Optional[nn.Module]]) -> list[str]:
    """Set every submodule ``m`` (not the root) for which ``replacement(m)`` returns a module to
    that module; returns the qualified names replaced. New modules are not visited again."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model surgery needs a torch.nn.Module, got {type(model).__name__}; pass the "
                        f"model itself")
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            new = replacement(child)
            if new is not None and new is not child:
                setattr(parent, child_name, new)
                replaced.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return replaced


def register_new_parameters(model: nn.Module, before: Iterable[nn.Parameter],
                            optimizers: Iterable[torch.optim.Optimizer]) -> list[nn.Parameter]:
    """Add the parameters of ``model`` that are not in ``before`` to each optimizer as a new
    param group (its defaults); returns them."""
    known = {id(p) for p in before}
    new = [p for p in model.parameters() if id(p) not in known]
    if new:
        for optimizer in optimizers:
            optimizer.add_param_group({"params": new})
    return new
