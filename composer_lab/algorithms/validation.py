"""Argument checks shared by the algorithms: each error says what was wrong and how to fix it."""

from __future__ import annotations

from typing import Any

from composer_lab.core.checks import is_int

__all__ = ["check_fraction", "check_positive", "check_choice"]


def check_fraction(name: str, value: Any, *, low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a float in [0, 1] (ends excluded where asked), else ValueError / TypeError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number between 0 and 1, got {type(value).__name__} {value!r}; "
                        f"pass a fraction such as 0.5")
    low_ok = value > 0 if low_open else value >= 0
    high_ok = value < 1 if high_open else value <= 1
    if not (low_ok and high_ok):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{name} must lie in {interval}, got {value!r}; pass a fraction such as 0.5")
    return float(value)


def check_positive(name: str, value: Any, *, integer: bool = False, allow_zero: bool = False) -> Any:
    """``value`` as a positive (or non-negative) number, integer if asked, else ValueError / TypeError."""
    if not (is_int(value) or not integer and isinstance(value, float)):
        kind = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: tuple) -> Any:
    """``value`` if it is one of ``choices``, else ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
