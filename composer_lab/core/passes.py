"""Algorithm passes: functions ``(algorithms, event) -> algorithms`` that order what runs.

The engine runs the matched algorithms of an event through its passes, in order, before
applying them. Composer registers its passes as SB-first, FusedLayerNorm-last, FILO
(:data:`COMPOSER_PASSES`); since FILO reverses the whole list on after-events, Selective
Backprop, sorted first, ends up *last* on AFTER_DATALOADER, after the augmentations it must
precede. Here FILO runs first and the pinning passes after it (:data:`DEFAULT_PASSES`), so
what is pinned stays pinned on every event.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence, TypeVar, Union

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event

__all__ = [
    "AlgorithmPass", "set_filo_order", "set_filo_order_composer", "sort_selective_backprop_first",
    "sort_fused_layernorm_last", "sort_low_precision_layernorm_last", "sort_to_front", "sort_to_back",
    "warn_if_multiple_loss_interpolation",
    "warn_if_multiple_mixers", "DEFAULT_PASSES", "COMPOSER_PASSES", "is_filo_reversed", "pass_name",
]

T = TypeVar("T")
AlgorithmPass = Callable[[Sequence[Algorithm], Event], Sequence[Algorithm]]
_Key = Union[type, tuple, Callable[[Any], bool]]


def _predicate(key: _Key) -> Callable[[Any], bool]:
    if isinstance(key, (type, tuple)):
        return lambda obj: isinstance(obj, key)
    return key


def pass_name(algorithm_pass: Callable) -> str:
    """The name a pass is shown, saved and looked up by: its function name."""
    return getattr(algorithm_pass, "__name__", type(algorithm_pass).__name__)


def sort_to_front(list_to_sort: Sequence[T], cls: _Key) -> list[T]:
    """Stable sort of instances of ``cls`` (a class, tuple of classes or predicate) to the front.

    >>> sort_to_front([1, 'b', 3], str)
    ['b', 1, 3]
    """
    pred = _predicate(cls)
    return [x for x in list_to_sort if pred(x)] + [x for x in list_to_sort if not pred(x)]


def sort_to_back(list_to_sort: Sequence[T], cls: _Key) -> list[T]:
    """Stable sort of instances of ``cls`` (a class, tuple of classes or predicate) to the back.

    >>> sort_to_back([1, 'b', 3], str)
    [1, 3, 'b']
    """
    pred = _predicate(cls)
    return [x for x in list_to_sort if not pred(x)] + [x for x in list_to_sort if pred(x)]


_FILO_EVENTS = frozenset(e for e in Event if e.opening is not None)


def is_filo_reversed(event: Event) -> bool:
    """Whether :func:`set_filo_order` reverses ``event``: the ``*after_*`` events that close a
    ``*before_*`` one (AFTER_LOSS, EVAL_AFTER_FORWARD...); ``*_end`` events keep their order."""
    return event in _FILO_EVENTS


def set_filo_order(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """First in, last out: reverse the order on ``after_*`` events, so A, B, C on BEFORE_LOSS
    run as C, B, A on AFTER_LOSS and each can undo its change (LabelSmoothing restores the
    targets it smoothed). ``_start`` / ``_end`` events keep their order. Unlike Composer's, it
    also reverses ``EVAL_AFTER_*`` and ``PREDICT_AFTER_FORWARD`` (see :func:`set_filo_order_composer`)."""
    return algorithms[::-1] if event in _FILO_EVENTS else algorithms


def set_filo_order_composer(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """Composer's ``set_filo_order``: reverse only the events whose name starts with ``AFTER_``."""
    return algorithms[::-1] if event.name.startswith("AFTER_") else algorithms


def _flagged(algorithms: Sequence[Algorithm], flag: str) -> list[Algorithm]:
    """The algorithms whose attribute ``flag`` is true: one scan, no call per algorithm, so a
    pass with nothing to do (the usual case) costs little."""
    return [a for a in algorithms if getattr(a, flag, False)]


def sort_selective_backprop_first(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """Batch-selecting algorithms (Selective Backprop) run first, so they score and prune the
    batch the dataloader gave, before any augmentation changes it."""
    selecting = _flagged(algorithms, "selects_batch")
    return sort_to_front(algorithms, selecting.__contains__) if selecting else algorithms


def sort_fused_layernorm_last(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """FusedLayerNorm runs after algorithms that add LayerNorms (GatedLinearUnits), so every
    LayerNorm is converted."""
    fusing = _flagged(algorithms, "fuses_layernorm")
    return sort_to_back(algorithms, fusing.__contains__) if fusing else algorithms


def sort_low_precision_layernorm_last(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """LowPrecisionLayerNorm (flag ``lowers_layernorm_precision``) runs after algorithms that add
    LayerNorms (GatedLinearUnits), so every LayerNorm is converted to the low precision."""
    lowering = _flagged(algorithms, "lowers_layernorm_precision")
    return sort_to_back(algorithms, lowering.__contains__) if lowering else algorithms


def warn_if_multiple_loss_interpolation(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """Warn when more than one algorithm interpolates the loss (``interpolate_loss=True`` on
    MixUp or CutMix, as in Composer): the loss is then mixed twice."""
    return _warn_if_several(algorithms, "interpolate_loss", "multiple algorithms interpolate the loss at {event}: "
                            "{names}; this can lead to unexpected behavior. Set interpolate_loss=False on all but one.",
                            event)


def warn_if_multiple_mixers(algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
    """Warn when two algorithms that mix examples (MixUp, CutMix) run at one event: the second
    mixes an already mixed batch, which may not be what was meant."""
    return _warn_if_several(algorithms, "mixes_examples", "{names} all mix examples at {event}; composing them mixes "
                            "already mixed examples. Keep one, or run them in different epochs.", event)


def _warn_if_several(algorithms: Sequence[Algorithm], flag: str, message: str, event: Event) -> Sequence[Algorithm]:
    """Warn ``message`` (with ``{names}`` and ``{event}`` filled in) when more than one of
    ``algorithms`` has ``flag``; return them unchanged."""
    flagged = _flagged(algorithms, flag)
    if len(flagged) > 1:
        names = ", ".join(type(a).__name__ for a in flagged)
        warnings.warn(message.format(names=names, event=event.value), stacklevel=3)
    return algorithms


DEFAULT_PASSES: tuple[AlgorithmPass, ...] = (
    set_filo_order,
    sort_selective_backprop_first,
    sort_fused_layernorm_last,
    sort_low_precision_layernorm_last,
    warn_if_multiple_loss_interpolation,
    warn_if_multiple_mixers,
)
"""composer_lab's passes: FILO first, so the pinning passes hold on every event."""

COMPOSER_PASSES: tuple[AlgorithmPass, ...] = (
    sort_selective_backprop_first,
    sort_fused_layernorm_last,
    sort_low_precision_layernorm_last,
    set_filo_order_composer,
    warn_if_multiple_loss_interpolation,
)
"""The passes as Composer registers them, in its order, to compare in the pass editor."""

ORDER_ONLY_PASSES = frozenset(DEFAULT_PASSES + COMPOSER_PASSES)
"""Passes that only reorder (or warn about) the algorithms given, never add or drop one: with
these alone, an event where fewer than two algorithms matched needs no pass at all."""
