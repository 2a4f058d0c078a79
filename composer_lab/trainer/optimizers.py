"""The optimizers a run starts with: the default one, and the parameters surgery at INIT leaves out of them.

The optimizers exist when INIT fires, so an algorithm can wrap or schedule them there. Surgery
at INIT that swaps layers hands its new parameters to the optimizers (Composer's
``replace_module_classes(..., optimizers=...)`` contract). The trainer's own default optimizer
is brought up to date with the model after INIT in any case (it is meant to train every
parameter); a parameter that no optimizer of the user's holds is named in a warning, as it
would never train.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import torch

__all__ = ["DEFAULT_LR", "with_default", "after_init"]

DEFAULT_LR = 0.05
"""Learning rate of the default optimizer, SGD with momentum 0.9."""


def with_default(model: torch.nn.Module, optimizers: Any) -> tuple[Any, Optional[torch.optim.Optimizer]]:
    """``optimizers`` and None, or when none are given the default optimizer twice: SGD(lr=:data:`DEFAULT_LR`,
    momentum=0.9) over ``model``'s parameters."""
    if optimizers:
        return optimizers, None
    default = torch.optim.SGD(model.parameters(), lr=DEFAULT_LR, momentum=0.9)
    return default, default


def after_init(optimizers: list, model: torch.nn.Module, default: Any) -> None:
    """Once INIT has run: the ``default`` optimizer (None when the user gave theirs) trains the
    model's parameters as they are now, in its first param group, except those another of
    its groups holds; a trainable parameter in no optimizer is warned about."""
    if default is not None and default in optimizers:
        others = _held(default.param_groups[1:])
        default.param_groups[0]["params"] = [p for p in model.parameters() if id(p) not in others]
    held = _held([group for optimizer in optimizers for group in optimizer.param_groups])
    orphans = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if orphans:
        warnings.warn(f"the model's parameters {orphans[:5]}{' ...' if len(orphans) > 5 else ''} are in no "
                      f"optimizer, so they will not train (a layer replaced at INIT?); give the surgery the "
                      f"optimizers (e.g. register_new_parameters(model, before, state.optimizers)), or build "
                      f"the optimizer over the model after the surgery", stacklevel=3)


def _held(groups: list) -> set[int]:
    """The ids of the parameters in param ``groups``."""
    return {id(p) for group in groups for p in group["params"]}
