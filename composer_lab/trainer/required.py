"""``required_on_load``: a checkpoint names the algorithms its model needs (surgery that changed
the model's shape), and loading it into a trainer without them adds them, as Composer does:
rebuilt from the hyperparameters the checkpoint keeps and applied at once, as at INIT, so the
checkpoint's weights fit. Refused, with the fix, where that cannot be done faithfully."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event

__all__ = ["REQUIRED_KEY", "mark_required", "add_required_algorithms"]

REQUIRED_KEY = "required_on_load"
"""In a checkpoint's ``algorithms`` entries: True where the algorithm's ``required_on_load()`` was."""


def mark_required(entries: list[dict[str, Any]], algorithms: list) -> list[dict[str, Any]]:
    """``entries`` (one per algorithm, in order) with :data:`REQUIRED_KEY` set where it applies."""
    for entry, algorithm in zip(entries, algorithms):
        if isinstance(algorithm, Algorithm) and algorithm.required_on_load():
            entry[REQUIRED_KEY] = True
    return entries


def _refusal(path: Any, entry: dict[str, Any], why: str) -> Exception:
    from composer_lab.trainer.checkpoint import CheckpointError

    return CheckpointError(f"checkpoint {str(path)!r} was written with {entry['name']} ({entry['cls']}, "
                           f"required_on_load: the model's shape depends on it) and the trainer has none; {why}. "
                           f"Pass algorithms=[{entry['cls']}(...)] with the run's arguments")


def _rebuilt(entry: dict[str, Any], path: Any) -> Algorithm:
    """The algorithm ``entry`` describes, made again from its class and hyperparameters; a
    function or class argument is kept only where it was the default (a checkpoint holds its name)."""
    from composer_lab.algorithms import ALGORITHMS

    classes = {cls.__name__: cls for cls in ALGORITHMS.values()}
    cls = classes.get(entry["cls"])
    if cls is None:
        raise _refusal(path, entry, "composer_lab cannot rebuild it (not one of composer_lab.algorithms)")
    hparams = dict(entry["state"].get("hparams", {}))
    for name, parameter in inspect.signature(cls).parameters.items():
        default = parameter.default
        if name in hparams and isinstance(hparams[name], str) and (callable(default) or default is None):
            if hparams[name] != f"{getattr(default, '__module__', '')}.{getattr(default, '__qualname__', '')}":
                raise _refusal(path, entry, f"its argument {name} was a function or class, which a checkpoint "
                                            f"keeps only by name ({hparams[name]})")
            del hparams[name]
    try:
        return cls(**hparams)
    except (TypeError, ValueError) as err:
        raise _refusal(path, entry, f"rebuilding it failed ({err})") from None


def add_required_algorithms(trainer: Any, entries: list[dict[str, Any]], path: Any) -> list[Algorithm]:
    """Add to ``trainer`` the required_on_load algorithms of the checkpoint ``entries`` whose class
    it lacks, applied at once as at INIT, in the checkpoint's order (refused, before any is
    applied, when the run applied one before an algorithm this trainer has already applied).
    Returns them."""
    state = trainer.state
    present = {type(a).__name__: a for a in state.algorithms}
    missing = [e for e in entries if e.get(REQUIRED_KEY) and e.get("cls") not in present]
    added = [_rebuilt(entry, path) for entry in missing]
    if not added:
        return []
    _check_order(entries, missing[0], present, path)
    for algorithm in added:
        if algorithm.listens(Event.INIT) and algorithm.match(Event.INIT, state):
            algorithm.apply(Event.INIT, state, trainer.logger)
    state.algorithms.extend(added)
    state.model.to(state.device)
    trainer.ddp.wrap(state)
    _announce(trainer, added, missing, path)
    return added


def _check_order(entries: list[dict[str, Any]], first: dict[str, Any], present: dict[str, Algorithm],
                 path: Any) -> None:
    """Refuse when the saving run applied ``first`` at INIT before an algorithm the trainer has applied."""
    later = entries[entries.index(first) + 1:]
    applied = [present[e["cls"]] for e in later if e.get("cls") in present and present[e["cls"]].listens(Event.INIT)]
    if applied:
        raise _refusal(path, first, f"the run applied it at INIT before {type(applied[0]).__name__}, which this "
                                    f"trainer already applied, so adding it now would not give the run's model")


def _announce(trainer: Any, added: list[Algorithm], missing: list[dict[str, Any]], path: Any) -> None:
    """A trace note and a warning for each algorithm added."""
    for algorithm, entry in zip(added, missing):
        trainer.trace.note("load", f"added {entry['name']} (required_on_load) from the checkpoint",
                           trainer.state.timestamp)
        warnings.warn(f"the checkpoint {str(path)!r} needs {algorithm!r} (required_on_load), which the trainer "
                      f"lacked: added it. Pass it in algorithms= to say so yourself", stacklevel=4)
