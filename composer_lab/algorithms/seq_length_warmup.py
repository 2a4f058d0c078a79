"""Sequence length warm-up (Li et al., 2022): train a language model on short sequences first.

Over the first ``duration`` of training the sequence length grows from ``min_seq_length`` to
``max_seq_length`` in steps of ``step_size`` (:func:`seq_length_schedule`, Composer's formula);
each batch is cut to that length at AFTER_DATALOADER by :func:`set_batch_sequence_length`:
truncated (the tokens past the length are dropped) or reshaped (the batch's tokens, read row
after row, are cut into more rows of the length, so no token but the last few is lost). Every
per-token entry of the batch is cut alike, so targets and masks stay aligned with their inputs:
Hugging Face dict batches (``input_ids``, ``attention_mask``, ``labels``) and the lab's
``(input, target)`` token batches (:mod:`composer_lab.data.text`) alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch

from composer_lab.algorithms.validation import check_fraction, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.time import TimeUnit

__all__ = ["SeqLengthWarmup", "set_batch_sequence_length", "seq_length_schedule"]


def _entries(batch: Any) -> list[tuple[Any, Any]]:
    """``(key, value)`` of a dict batch, ``(position, value)`` of a tuple or list batch."""
    if isinstance(batch, Mapping):
        return list(batch.items())
    if isinstance(batch, (tuple, list)):
        return list(enumerate(batch))
    raise TypeError(f"SeqLengthWarmup cuts dict batches (input_ids, attention_mask, labels) or (input, target) "
                    f"batches, got {type(batch).__name__}; give the dataloader one of those")


def _rebuilt(batch: Any, entries: list[tuple[Any, Any]]) -> Any:
    """A new batch of ``batch``'s kind (a dict for any mapping) holding ``entries``."""
    if isinstance(batch, Mapping):
        return dict(entries)
    return type(batch)(value for _, value in entries)


def _inputs_key(batch: Any) -> Any:
    """Where the token ids are: 'input_ids' of a dict batch, position 0 of a tuple batch."""
    if isinstance(batch, Mapping):
        if "input_ids" not in batch:
            raise ValueError(f"SeqLengthWarmup needs the token ids under 'input_ids' in a dict batch; this one has "
                             f"{sorted(batch)}: rename the dataset's key")
        return "input_ids"
    return 0


def _sequence_shaped(key: Any, value: Any) -> torch.Tensor:
    if not (isinstance(value, torch.Tensor) and value.dim() >= 2):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"SeqLengthWarmup cuts every entry of the batch along its sequence dimension, but entry "
                         f"{key!r} is {shape}, not (N, T, ...); leave SeqLengthWarmup out for batches with "
                         f"per-example entries (sequence classification labels)")
    return value


def _truncated(entries: list[tuple[Any, Any]], length: int, mask: Optional[torch.Tensor]) -> list[tuple[Any, Any]]:
    """Each entry cut to its first ``length`` positions; with ``mask`` (the attention mask), each
    row's last real token is kept as its last token within the length."""
    out = []
    if mask is not None:
        rows = torch.arange(mask.shape[0], device=mask.device)
        end = mask.sum(dim=1).long() - 1
        end_cut = end.clamp(max=length - 1)
    for key, value in entries:
        cut = _sequence_shaped(key, value)[:, :length].contiguous()
        if mask is not None:
            cut[rows, end_cut] = value[rows, end]
        out.append((key, cut))
    return out


def _reshaped(entries: list[tuple[Any, Any]], length: int, shape: torch.Size) -> list[tuple[Any, Any]]:
    """Each entry's tokens, row after row, cut into rows of ``length`` (the last partial row dropped)."""
    kept = shape[0] * shape[1] // length * length
    out = []
    for key, value in entries:
        if not (isinstance(value, torch.Tensor) and value.shape == shape):
            found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"SeqLengthWarmup(truncate=False) reshapes every entry of the batch like the token "
                             f"ids {tuple(shape)}, but entry {key!r} is {found}; pass truncate=True")
        out.append((key, value.reshape(-1)[:kept].view(-1, length)))
    return out


def set_batch_sequence_length(batch: Any, curr_seq_len: int, truncate: bool = True,
                              preserve_end_of_sequence: bool = False) -> Any:
    """A batch like ``batch`` whose per-token entries are ``curr_seq_len`` long: truncated, or
    (``truncate=False``) reshaped into more rows of that length. ``batch`` is a dict (Hugging
    Face: ``input_ids``, ``attention_mask``, ``labels``...) or an ``(input, target)`` tuple of
    token batches; it is returned as it is when no longer than ``curr_seq_len``, and is never
    changed in place. ``preserve_end_of_sequence`` keeps each row's last real token (read from
    ``attention_mask``) as its last token when truncating, as Composer does.
    """
    check_positive("curr_seq_len", curr_seq_len, integer=True)
    entries = _entries(batch)
    inputs = dict(entries)[_inputs_key(batch)]
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ValueError(f"SeqLengthWarmup needs token ids (N, T), got {shape}; leave it out for other inputs")
    if curr_seq_len >= inputs.shape[1]:
        return batch
    if not truncate:
        return _rebuilt(batch, _reshaped(entries, curr_seq_len, inputs.shape))
    mask = None
    if preserve_end_of_sequence:
        if not isinstance(batch, Mapping) or "attention_mask" not in batch:
            raise ValueError("SeqLengthWarmup(preserve_end_of_sequence=True) finds each sequence's end in the "
                             "batch's 'attention_mask', and this batch has none; pass preserve_end_of_sequence=False, "
                             "or give dict batches with an attention_mask")
        mask = batch["attention_mask"]
    return _rebuilt(batch, _truncated(entries, curr_seq_len, mask))


def seq_length_schedule(batch: int, total_batches: int, duration: float = 0.3, min_seq_length: int = 8,
                        max_seq_length: int = 1024, step_size: int = 8) -> int:
    """The sequence length at batch ``batch`` (counted from 0) of ``total_batches``: Composer's
    ``min_seq_length + step_size * (batch // every)``, ``every`` the warm-up's batches
    (``int(total_batches * duration)``) over its ``(max - min) // step_size`` steps, capped at
    ``max_seq_length``, and ``max_seq_length`` from the warm-up's end on. A warm-up of fewer
    batches than steps steps every batch (Composer divides by zero there)."""
    warmup = int(total_batches * duration)
    if batch >= warmup:
        return max_seq_length
    steps = (max_seq_length - min_seq_length) // step_size
    every = max(1, warmup // steps) if steps else warmup
    return min(max_seq_length, min_seq_length + step_size * (batch // every))


def _total_batches(state: State) -> int:
    """The run's length in batches, for the schedule."""
    duration = state.max_duration
    if duration.unit is TimeUnit.BATCH:
        return int(duration.value)
    if duration.unit is TimeUnit.EPOCH and state.dataloader_len:
        return int(duration.value) * state.dataloader_len
    raise ValueError(f"SeqLengthWarmup schedules its warm-up in batches and cannot count the batches of "
                     f"max_duration={duration} with this dataloader; give max_duration in batches (e.g. '600ba'), "
                     f"or in epochs with a dataloader that has a length")


class SeqLengthWarmup(Algorithm):
    """At AFTER_DATALOADER, cuts the batch to the length :func:`seq_length_schedule` gives for
    this batch (:func:`set_batch_sequence_length`) and logs ``seq_length_warmup/curr_seq_len``
    and ``seq_length_warmup/curr_bs``.

    Args:
        duration: fraction of training over which the length grows, in [0, 1].
        min_seq_length: the length at the start.
        max_seq_length: the length at the end of the warm-up and after it.
        step_size: how much the length grows at a time.
        truncate: drop the tokens past the length (True), or reshape them into more rows (False).
        preserve_end_of_sequence: when truncating, keep each row's last real token (dict batches
            with an ``attention_mask``).
    """

    events = frozenset({Event.AFTER_DATALOADER})
    writes = frozenset({"batch"})

    def __init__(self, duration: float = 0.3, min_seq_length: int = 8, max_seq_length: int = 1024,
                 step_size: int = 8, truncate: bool = True, preserve_end_of_sequence: bool = False) -> None:
        self.duration = check_fraction("duration", duration)
        self.min_seq_length = check_positive("min_seq_length", min_seq_length, integer=True)
        self.max_seq_length = check_positive("max_seq_length", max_seq_length, integer=True)
        if max_seq_length < min_seq_length:
            raise ValueError(f"max_seq_length={max_seq_length} must be at least min_seq_length={min_seq_length}; "
                             f"the warm-up grows the length from the one to the other")
        self.step_size = check_positive("step_size", step_size, integer=True)
        for name, flag in (("truncate", truncate), ("preserve_end_of_sequence", preserve_end_of_sequence)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {type(flag).__name__} {flag!r}")
        self.truncate = truncate
        self.preserve_end_of_sequence = preserve_end_of_sequence

    def current_seq_length(self, state: State) -> int:
        """The length for the batch under way."""
        return seq_length_schedule(state.timestamp.batch, _total_batches(state), self.duration, self.min_seq_length,
                                   self.max_seq_length, self.step_size)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is not Event.AFTER_DATALOADER:  # (Composer's also runs at INIT, to check the model's class)
            return None
        inputs = state.batch_get_item(0)
        if not (isinstance(inputs, torch.Tensor) and inputs.dim() == 2 and not inputs.is_floating_point()):
            shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
            dtype = f" {inputs.dtype}" if isinstance(inputs, torch.Tensor) else ""
            raise ValueError(f"SeqLengthWarmup cuts batches of token ids (N, T), got inputs {shape}{dtype}; leave "
                             f"SeqLengthWarmup out for models that do not read token sequences")
        length = self.current_seq_length(state)
        state.batch = set_batch_sequence_length(state.batch, length, self.truncate, self.preserve_end_of_sequence)
        logger.log_metrics({"seq_length_warmup/curr_seq_len": length,
                            "seq_length_warmup/curr_bs": state.batch_get_item(0).shape[0]})
        return None
