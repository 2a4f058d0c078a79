"""Model surgery: swap submodules in place and keep the optimizers' parameters right.

:func:`replace_modules` wraps or reuses the original modules' parameters (BlurPool);
:func:`replace_module_classes`, :func:`count_module_instances` and
:func:`update_params_in_optimizer` are Composer's ``composer.utils.module_surgery`` contract:
replaced parameters reach the optimizers' param groups, removed ones leave them.
:func:`replaced_names` and :func:`warn_if_unchanged` are what every surgery algorithm reports.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import torch
from torch import nn

from composer_lab.algorithms.warnings import NoEffectWarning

__all__ = ["replace_modules", "register_new_parameters", "ReplacementFunction", "replace_module_classes",
           "count_module_instances", "update_params_in_optimizer", "check_surgery_target", "replaced_names",
           "warn_if_unchanged"]


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


def replaced_names(model: nn.Module, surgery: Callable[[], Mapping[nn.Module, nn.Module]]) -> list[str]:
    """Run ``surgery()`` (returning ``{original: replacement}``, as :func:`replace_module_classes`)
    on ``model``; returns the qualified name each original had in ``model`` before it."""
    names = {id(m): name for name, m in model.named_modules()}
    return [names[id(old)] for old in surgery()]


def warn_if_unchanged(replaced: Any, algorithm: str, model: nn.Module, why: str, stacklevel: int = 2) -> None:
    """Warn :class:`~composer_lab.algorithms.warnings.NoEffectWarning` ``"<algorithm> changed nothing
    in <model class>: <why>"`` when ``replaced`` is empty; ``stacklevel`` as if the caller warned."""
    if not replaced:
        warnings.warn(NoEffectWarning(f"{algorithm} changed nothing in {type(model).__name__}: {why}"),
                      stacklevel=stacklevel + 1)


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


ReplacementFunction = Callable[[nn.Module, int], Optional[nn.Module]]
"""A surgery policy: ``(module, index)`` -> its replacement, or None to keep it; ``index`` counts
the modules of the policy's class seen so far (Composer's ``module_surgery.ReplacementFunction``)."""


def count_module_instances(module: nn.Module, module_class: Union[type, tuple[type, ...]]) -> int:
    """The number of distinct submodules of ``module`` (not itself) that are ``module_class``
    instances: a module reachable under several names counts once."""
    return len({id(m) for name, m in module.named_modules() if name and isinstance(m, module_class)})


def _parents_by_child(module: nn.Module, into: dict[nn.Module, list[tuple[nn.Module, str]]]) -> None:
    """Map each descendant of ``module`` to every ``(parent, attribute)`` holding it, in module order."""
    for name, child in module._modules.items():  # (named_children skips a repeated child)
        if child is None:
            continue
        if child not in into:
            into[child] = []
            _parents_by_child(child, into)
        into[child].append((module, name))


def _device_of(module: nn.Module) -> Optional[torch.device]:
    tensor = next(itertools.chain(module.parameters(), module.buffers()), None)
    return None if tensor is None else tensor.device


def replace_module_classes(module: nn.Module, policies: Mapping[type, ReplacementFunction],
                           optimizers: Any = None, recurse_on_replacements: bool = False,
                           indices: Optional[dict[Any, int]] = None) -> dict[nn.Module, nn.Module]:
    """Replace, in place, each submodule an entry of ``policies`` (class -> policy) returns a
    module for; returns ``{original: replacement}`` (intermediate ones too when
    ``recurse_on_replacements`` visits what the policies return). Composer's contract.

    A module held under several names gets one replacement, set at each. The replacement moves
    to the original's device. With ``optimizers``, the parameters of the replaced modules that
    left the model leave them, and the new ones join the param group of the modules they
    replace (:func:`update_params_in_optimizer`): nothing trained twice, nothing orphaned.
    All or nothing: if a policy or the optimizer update fails, every replacement is undone
    and the error raised, so the model is never left half-changed.
    """
    check_surgery_target(module)
    undo: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        replaced = _replace_all(module, policies, recurse_on_replacements,
                                indices if indices is not None else {cls: 0 for cls in policies}, undo)
        plan = _optimizer_plan(module, replaced, _as_optimizers(optimizers)) if optimizers else []
    except BaseException:
        for parent, name, old in reversed(undo):
            setattr(parent, name, old)
        raise
    for step in plan:
        step()
    return replaced


def check_surgery_target(module: Any) -> None:
    """TypeError naming the fix unless ``module`` is a plain ``nn.Module`` (not a DDP wrapper)."""
    if isinstance(module, nn.parallel.DistributedDataParallel):
        raise TypeError("model surgery needs the plain module, not its DistributedDataParallel wrapper; "
                        "operate on wrapper.module and wrap it again")
    if not isinstance(module, nn.Module):
        raise TypeError(f"model surgery needs a torch.nn.Module, got {type(module).__name__}; pass the "
                        f"model itself")


def _replace_all(module: nn.Module, policies: Mapping[type, ReplacementFunction], recurse: bool,
                 indices: dict[Any, int], undo: list) -> dict[nn.Module, nn.Module]:
    """The replacements of :func:`replace_module_classes`, each ``setattr`` noted in ``undo``
    ``(parent, name, previous)`` as it is made."""
    pending: dict[nn.Module, list[tuple[nn.Module, str]]] = {}
    _parents_by_child(module, pending)
    default_device = _device_of(module)
    replaced: dict[nn.Module, nn.Module] = {}
    while pending:
        child = next(iter(pending))
        parents = pending.pop(child)
        new = _apply_policies(child, policies, indices, default_device)
        if new is None:
            continue
        replaced[child] = new
        for parent, name in parents:
            undo.append((parent, name, parent._modules[name]))
            setattr(parent, name, new)
        if recurse and new is not child:
            pending[new] = list(parents)
            _parents_by_child(new, pending)
    return replaced


def _apply_policies(child: nn.Module, policies: Mapping[type, ReplacementFunction], indices: dict[Any, int],
                    default_device: Optional[torch.device]) -> Optional[nn.Module]:
    """The replacement of ``child`` by the first matching policy that gives one, on its device."""
    for cls, policy in policies.items():
        if not isinstance(child, cls):
            continue
        index = indices.get(cls, 0)
        new = policy(child, index)
        indices[cls] = index + 1
        if new is not None:
            device = _device_of(child) or default_device
            return new.to(device) if device is not None and new is not child else new
    return None


def _as_optimizers(optimizers: Any) -> list[torch.optim.Optimizer]:
    return list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]


def _optimizer_plan(model: nn.Module, replaced: dict[nn.Module, nn.Module],
                    optimizers: list[torch.optim.Optimizer]) -> list[Callable[[], None]]:
    """The optimizer edits of a surgery, worked out (and checked) before any is made: for each
    replacement, its parameters no longer in ``model`` leave the optimizers and its new ones
    join the group that held the original's."""
    in_model = {id(p) for p in model.parameters()}
    steps = []
    for old, new in replaced.items():
        old_params = list(old.parameters())
        gone = [p for p in old_params if id(p) not in in_model]  # (a tied weight still used stays)
        steps.append(_update_plan(old_params, gone, list(new.parameters()), optimizers))
    return steps


def update_params_in_optimizer(old_params: Iterable[nn.Parameter], new_params: Iterable[nn.Parameter],
                               optimizers: Any) -> None:
    """Remove from ``optimizers`` the ``old_params`` not in ``new_params`` (their state too) and
    add the ``new_params`` not in ``old_params`` to the param group that held the old ones (the
    only group, when there is one), keeping the order. A parameter already in an optimizer is
    not added again. Composer's contract, for any number of optimizers: the one holding
    ``old_params`` gets the new ones."""
    old, new = list(old_params), list(new_params)
    new_ids = {id(p) for p in new}
    gone = [p for p in old if id(p) not in new_ids]
    _update_plan(old, gone, new, _as_optimizers(optimizers))()


def _update_plan(old: list, gone: list, new: list, optimizers: list) -> Callable[[], None]:
    """A function making the edit :func:`update_params_in_optimizer` describes; ValueError (before
    any edit) when the optimizer or group of the new parameters cannot be told."""
    old_ids = {id(p) for p in old}
    held = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    added = [p for p in new if id(p) not in old_ids and id(p) not in held]
    gone_ids = {id(p) for p in gone}
    target = _target_group(old, added, optimizers)

    def edit() -> None:
        for opt in optimizers:
            for group in opt.param_groups:
                if any(id(p) in gone_ids for p in group["params"]):
                    group["params"] = [p for p in group["params"] if id(p) not in gone_ids]
            for p in gone:
                opt.state.pop(p, None)
        if target is not None:
            group = target[0].param_groups[target[1]]
            group["params"] = [*group["params"], *added]
    return edit


def _target_group(old: list, added: list, optimizers: list) -> Optional[tuple[torch.optim.Optimizer, int]]:
    """``(optimizer, group index)`` where ``added`` go: that of the ``old`` parameters found in an
    optimizer, or the only group of the only optimizer; None when nothing is added."""
    if not added or not optimizers:
        return None
    old_ids = {id(p) for p in old}
    homes = {(i, g) for i, opt in enumerate(optimizers) for g, group in enumerate(opt.param_groups)
             if not old_ids.isdisjoint(map(id, group["params"]))}
    if not homes and len(optimizers) == 1 and len(optimizers[0].param_groups) == 1:
        homes = {(0, 0)}
    if len(homes) != 1:
        raise ValueError(f"model surgery cannot tell which optimizer param group gets {len(added)} new parameters: "
                         f"the modules they replace have parameters in {len(homes) or 'no'} groups; give the "
                         f"surgery one optimizer with one param group, or build the optimizer after the surgery")
    i, g = homes.pop()
    return optimizers[i], g


def _find_param_in_optimizer(param: nn.Parameter, optimizer: torch.optim.Optimizer) -> int:
    """The index of the first param group of ``optimizer`` holding ``param``, or -1."""
    for index, group in enumerate(optimizer.param_groups):
        if any(p is param for p in group["params"]):
            return index
    return -1
