"""Character-level text that needs no download: the source of a few Python standard-library
modules, which every Python installation carries.

Characters are ASCII codes (vocabulary of 128; other characters become ``?``), so the
vocabulary is the same on every machine. Each example is a window of ``sequence_length``
characters and the same window shifted by one: (input, target) for next-character prediction.
"""

from __future__ import annotations

import importlib.util
from typing import Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from composer_lab.core.checks import check_positive_int
from composer_lab.data.checks import check_held_out
from composer_lab.data.loaders import make_dataloaders

__all__ = ["VOCAB_SIZE", "STDLIB_MODULES", "stdlib_text", "encode", "decode", "TextSequences", "text_datasets",
           "text_dataloaders"]

VOCAB_SIZE = 128
STDLIB_MODULES = ("argparse", "dataclasses", "functools", "textwrap", "string", "enum", "fractions", "calendar")
"""The modules whose source makes the corpus, in order (about 370 thousand characters)."""


def stdlib_text(modules: Sequence[str] = STDLIB_MODULES) -> str:
    """The source code of ``modules``, read from this Python's standard library, concatenated."""
    texts = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(".py"):
            raise ValueError(f"{name!r} has no Python source file in this installation (found {origin!r}); "
                             f"name modules of the standard library written in Python, e.g. {STDLIB_MODULES[:3]}")
        with open(origin, encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


def encode(text: str) -> torch.Tensor:
    """The ASCII codes of ``text`` as int64 token ids (``?`` for a non-ASCII character)."""
    return torch.tensor(list(text.encode("ascii", errors="replace")), dtype=torch.int64)


def decode(tokens: torch.Tensor) -> str:
    """The text of ASCII token ids."""
    return bytes(tokens.tolist()).decode("ascii")


class TextSequences(Dataset):
    """Non-overlapping windows of ``tokens``: item ``i`` is ``(tokens[s:s+L], tokens[s+1:s+L+1])``
    with ``s = i * L`` and ``L = sequence_length``."""

    def __init__(self, tokens: torch.Tensor, sequence_length: int) -> None:
        check_positive_int("sequence_length", sequence_length)
        if len(tokens) <= sequence_length:
            raise ValueError(f"a text of {len(tokens)} tokens has no window of sequence_length={sequence_length} "
                             f"plus the next token; use a shorter sequence_length or more text")
        self.tokens = tokens
        self.sequence_length = sequence_length
        self.vocab_size = VOCAB_SIZE

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.sequence_length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} sequences")
        start = (index % len(self)) * self.sequence_length
        window = self.tokens[start:start + self.sequence_length + 1]
        return window[:-1], window[1:]


def text_datasets(sequence_length: int = 128, eval_sequence_length: Optional[int] = None,
                  eval_fraction: float = 0.1,
                  modules: Sequence[str] = STDLIB_MODULES) -> tuple[TextSequences, TextSequences]:
    """(train, eval) windows: the corpus's first ``1 - eval_fraction`` for training, the rest held
    out, cut into windows of ``sequence_length`` and ``eval_sequence_length`` (default: the same)."""
    check_held_out(eval_fraction)
    tokens = encode(stdlib_text(modules))
    split = int(len(tokens) * (1 - eval_fraction))
    return (TextSequences(tokens[:split], sequence_length),
            TextSequences(tokens[split:], sequence_length if eval_sequence_length is None else eval_sequence_length))


def text_dataloaders(batch_size: int = 64, sequence_length: int = 128, eval_sequence_length: Optional[int] = None,
                     modules: Sequence[str] = STDLIB_MODULES) -> tuple[DataLoader, DataLoader]:
    """Shuffled training and ordered eval loaders of ``(input, target)`` token batches ``(N, L)``
    over :func:`text_datasets`."""
    datasets = text_datasets(sequence_length, eval_sequence_length, modules=modules)
    return make_dataloaders(*datasets, batch_size)
