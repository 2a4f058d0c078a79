"""The argument rules the bundled datasets share, each written once (counts: core/checks.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_held_out"]


def check_held_out(eval_fraction: Any) -> float:
    """``eval_fraction``, the share of a dataset held out for evaluation, if strictly between 0 and 1."""
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must be between 0 and 1 (the share held out), got {eval_fraction}")
    return eval_fraction
