"""The Trainer's argument checks: each refuses bad input with what was wrong, what was expected
and how to fix it, before anything is built."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.callback import Callback
from composer_lab.core.checks import check_positive_int, is_int

__all__ = ["check_callable", "check_model", "check_dataloader", "check_items", "check_distinct",
           "check_microbatch_size", "check_components"]


def check_callable(value: Any, name: str, expected: str) -> Any:
    """``value`` if it can be called; TypeError naming ``expected`` otherwise (a name given as a
    string is the usual mistake)."""
    if not callable(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}; pass the function "
                        f"itself, not its name")
    return value


def check_model(model: Any, loss_fn: Any) -> None:
    """A model is an ``nn.Module``, used with a callable ``loss_fn``, or with its own ``loss``
    method when ``loss_fn`` is None."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}; wrap your "
                        f"network in an nn.Module (with forward(batch) and loss(outputs, batch) if "
                        f"it computes its own loss)")
    if loss_fn is not None:
        check_callable(loss_fn, "loss_fn", "a callable (outputs, targets) -> loss such as "
                       "torch.nn.functional.cross_entropy")
    elif type(model).__module__.startswith("transformers."):
        raise TypeError(f"the model {type(model).__name__} is a Hugging Face transformers model, which takes keyword "
                        f"arguments; wrap it: Trainer(composer_lab.models.HuggingFaceModel(model), ...), which "
                        f"trains on dict batches (input_ids, attention_mask, labels)")
    elif not callable(getattr(model, "loss", None)):
        raise ValueError(f"the model {type(model).__name__} has no loss: pass loss_fn (e.g. "
                         f"loss_fn=torch.nn.functional.cross_entropy), or give the model a method "
                         f"loss(outputs, batch) and a forward(batch)")


def check_dataloader(dataloader: Any, name: str) -> Any:
    """``dataloader`` if it is an iterable of batches with at least one batch (when it has a length)."""
    if dataloader is None or not hasattr(dataloader, "__iter__"):
        raise TypeError(f"{name} must be an iterable of batches such as a torch DataLoader, got "
                        f"{type(dataloader).__name__} {dataloader!r}; wrap your dataset, e.g. "
                        f"DataLoader(dataset, batch_size=64)")
    try:
        length = len(dataloader)
    except TypeError:
        return dataloader
    if length == 0:
        raise ValueError(f"{name} is empty (0 batches); give it data, or lower batch_size / set "
                         f"drop_last=False if the dataset is smaller than one batch")
    return dataloader


def check_items(items: Any, cls: type, name: str, expected: str) -> list:
    """``items`` (None, one object or a sequence of them) as a list of ``cls`` instances."""
    if items is None:
        return []
    if isinstance(items, (cls, str, type)):
        items = [items]
    elif not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list of objects, each {expected}; got {type(items).__name__} {items!r}")
    items = list(items)
    for i, item in enumerate(items):
        if isinstance(item, type) and issubclass(item, cls):
            raise TypeError(f"{name}[{i}] is the class {item.__name__}, not an instance; write {item.__name__}(...)")
        if not isinstance(item, cls):
            raise TypeError(f"{name}[{i}] is {type(item).__name__} {item!r}; each entry must be {expected}"
                            f"{_by_name_hint(item) if name == 'algorithms' else ''}")
    return items


def check_distinct(items: list, name: str) -> list:
    """``items`` if no object is in it twice: one instance runs once at each event, so the same
    object listed twice is a mistake (or a wish for two instances)."""
    first: dict[int, int] = {}
    for i, item in enumerate(items):
        if id(item) in first:
            cls = type(item).__name__
            raise ValueError(f"{name}[{i}] is the same {cls} object as {name}[{first[id(item)]}]; an instance runs "
                             f"once at each event: to apply {cls} twice, pass two instances, e.g. "
                             f"[{cls}(...), {cls}(...)], else list it once")
        first[id(item)] = i
    return items


def _by_name_hint(item: Any) -> str:
    """For an algorithm given by its command-line name, how to make the instance."""
    from composer_lab.algorithms import ALGORITHMS
    if isinstance(item, str) and item in ALGORITHMS:
        return (f" (for the name {item!r}: {ALGORITHMS[item].__name__}() from composer_lab.algorithms, or "
                f"ALGORITHMS[{item!r}]())")
    return ""


def check_microbatch_size(size: Any) -> Optional[int]:
    """``device_train_microbatch_size``: None (whole batches) or a positive int."""
    if size is None:
        return None
    rule = "must be a positive integer (examples per microbatch) or None for whole batches"
    if not is_int(size):
        raise TypeError(f"device_train_microbatch_size {rule}, got {type(size).__name__} {size!r}; "
                        f"e.g. device_train_microbatch_size=16")
    return check_positive_int("device_train_microbatch_size", size, rule)


def check_components(train_dataloader: Any, eval_dataloader: Any, algorithms: Any, callbacks: Any,
                     optimizers: Any, schedulers: Any) -> tuple[list, list]:
    """Check what a Trainer is built from; return the algorithms and callbacks as lists."""
    check_dataloader(train_dataloader, "train_dataloader")
    if eval_dataloader is not None:
        check_dataloader(eval_dataloader, "eval_dataloader")
    algorithms = check_distinct(check_items(algorithms, Algorithm, "algorithms",
                                            "an Algorithm instance, e.g. LabelSmoothing(0.1)"), "algorithms")
    callbacks = check_items(callbacks, Callback, "callbacks", "a Callback instance (subclass composer_lab.Callback "
                            "and override e.g. after_loss(state, logger))")
    check_items(optimizers, torch.optim.Optimizer, "optimizers", "a torch.optim.Optimizer over the model's "
                "parameters, e.g. torch.optim.SGD(model.parameters(), lr=0.1)")
    check_items(schedulers, torch.optim.lr_scheduler.LRScheduler, "schedulers", "a learning-rate scheduler "
                "of torch.optim.lr_scheduler, e.g. StepLR(optimizer, step_size=100)")
    return algorithms, callbacks
