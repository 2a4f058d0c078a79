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
    that module; returns the qualified name under which each replaced module was first found.

    Each module object is replaced once: a module reachable under several names (held twice by
    a Sequential, or aliased by an attribute) gets one replacement, set at every name, and
    counts once. New modules are not visited again.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model surgery needs a torch.nn.Module, got {type(model).__name__}; pass the "
                        f"model itself")
    replaced: list[str] = []
    seen: dict[int, tuple[nn.Module, Optional[nn.Module]]] = {}  # id -> (module, its replacement): kept alive
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):  # (named_children skips a repeated child)
            if child is None:
                continue
            if id(child) not in seen:
                new = replacement(child)
                seen[id(child)] = (child, new if new is not child else None)
                if new is not None and new is not child:
                    replaced.append(f"{parent_name}.{child_name}" if parent_name else child_name)
            new = seen[id(child)][1]
            if new is not None:
                setattr(parent, child_name, new)
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
