"""The order of the optimizers' parameters, by name: an optimizer's ``state_dict`` matches its
state to parameters by position, and model surgery may leave the same parameters in another
order in a resumed run (a surgery added to an optimizer built before it, or after it)."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["param_names", "align_param_order"]


def param_names(optimizers: list, model: nn.Module) -> list[list[list[str]]]:
    """Each optimizer's param groups as the model's names of their parameters ('' for one not in it)."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [[[names.get(id(p), "") for p in group["params"]] for group in opt.param_groups] for opt in optimizers]


def align_param_order(optimizers: list, model: nn.Module, saved: Any) -> None:
    """Put each param group's parameters in the order ``saved`` (:func:`param_names` of the run that
    wrote a checkpoint) names them, where a group holds exactly the named parameters in another
    order; anything else is left as it is (a mismatch is for ``load_state_dict`` to report)."""
    if not saved or len(saved) != len(optimizers):
        return
    by_name = dict(model.named_parameters())
    for opt, groups in zip(optimizers, saved):
        if len(groups) == len(opt.param_groups):
            for group, names in zip(opt.param_groups, groups):
                group["params"] = _reordered(group["params"], names, by_name)


def _reordered(params: list, names: list[str], by_name: dict) -> list:
    """``params`` in the order ``names`` gives, if the names are exactly these parameters; else ``params``."""
    wanted = [by_name.get(name) for name in names]
    if len(wanted) != len(params) or any(p is None for p in wanted):
        return params
    return wanted if {id(p) for p in wanted} == {id(p) for p in params} else params
