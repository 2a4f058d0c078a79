"""Messages in the command line's terms: a library error read at the shell names the flag to
pass, not the Python argument (``--overwrite``, not ``overwrite=True``)."""

from __future__ import annotations

import re

__all__ = ["in_cli_terms", "reword"]

_PYTHON_TO_FLAG = [
    (re.compile(r"\boverwrite=True\b"), "--overwrite"),
    (re.compile(r"\bTrainer\(run_name=\.\.\.\)"), "--name"),
]
"""The Python words the library's untyped messages use (``Run.save``'s refusal), and the flag
each stands for here. A typed refusal is worded by the command itself (a sweep folder:
:meth:`~composer_lab.explore.SweepFolderTaken.worded`)."""


def in_cli_terms(message: str) -> str:
    """``message`` with each Python argument it names replaced by the command line's flag."""
    for python, flag in _PYTHON_TO_FLAG:
        message = python.sub(flag, message)
    return message


def reword(err: BaseException) -> None:
    """Put ``err``'s message in the command line's terms (:func:`in_cli_terms`), in place, for the
    one line the command prints; the exception's type stays."""
    err.args = (in_cli_terms(str(err)),)
