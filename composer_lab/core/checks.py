"""The whole-number rules every layer checks arguments by, written once: a count is an int >= 1,
and a bool is never an int here (``True`` passed as a count is a mistake, not 1)."""

from __future__ import annotations

from typing import Any

__all__ = ["is_int", "is_positive_int", "check_positive_int"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_positive_int(value: Any) -> bool:
    """Whether ``value`` is an int >= 1 and not a bool."""
    return is_int(value) and value >= 1


def check_positive_int(name: str, value: Any, rule: str = "must be a positive integer", fix: str = "") -> int:
    """``value`` if it is a positive int; otherwise ValueError ``'{name} {rule}, got {value!r}'``, then
    ``'; {fix}'`` where given, so each caller's message says what the number counts and how to pass one."""
    if not is_positive_int(value):
        raise ValueError(f"{name} {rule}, got {value!r}" + (f"; {fix}" if fix else ""))
    return value
