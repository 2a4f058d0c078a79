"""A Hugging Face transformers model in the trainer's form: ``forward(batch)`` and ``loss(outputs, batch)``.

Named after Composer's ``HuggingFaceModel``, with one difference that lets the algorithms act
on language models: the loss is computed here, from the logits and the batch's ``labels``, after
the forward (at the LOSS event), not inside the transformers model. So label smoothing,
mixing and Selective Backprop's per-example losses see the targets and logits as they do for
any model. The logits come out with the class (vocabulary) dimension at dimension 1,
``(N, V, T)`` for token logits ``(N, T, V)``: Composer's rule of target forms (class indices
have one dimension fewer than the outputs, the class dimension being 1) then holds for tokens
as for pixels. Needs no weights: build the transformers model from a config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["HuggingFaceModel", "LABELS"]

LABELS = "labels"
"""The batch key of the targets, as Hugging Face's collators name it."""

IGNORE_INDEX = -100
"""The label of a position that does not count (padding), as in transformers."""


def _is_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` predicts the next token (its labels are its inputs, shifted by one)."""
    name = type(model).__name__
    return name.endswith("ForCausalLM") or name.endswith("LMHeadModel")


class HuggingFaceModel(nn.Module):
    """Wraps a transformers model for the Trainer: batches are dicts (``input_ids``,
    ``attention_mask``, ``labels``, ...), the model gets every key but ``labels``.

    Args:
        model: a transformers model whose outputs have ``logits``.
        shift_labels: compare the logits of position ``t`` with the label of ``t + 1`` (causal
            language models, whose labels are their inputs); None: True for ``*ForCausalLM`` and
            ``*LMHeadModel`` classes, as Composer infers it.
    """

    def __init__(self, model: nn.Module, shift_labels: Optional[bool] = None) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"HuggingFaceModel wraps a transformers model (a torch.nn.Module), got "
                            f"{type(model).__name__}; build one from a config, e.g. GPT2LMHeadModel(GPT2Config())")
        self.model = model
        self.shift_labels = _is_causal_lm(model) if shift_labels is None else bool(shift_labels)

    def forward(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """The logits for ``batch``, class dimension 1: ``(N, C)`` or ``(N, V, T)``."""
        if not isinstance(batch, Mapping):
            raise TypeError(f"HuggingFaceModel takes dict batches (input_ids, attention_mask, labels, ...), got "
                            f"{type(batch).__name__}; collate the dataset into dicts, e.g. with transformers' "
                            f"DataCollatorWithPadding")
        logits = self.model(**{key: value for key, value in batch.items() if key != LABELS}).logits
        return logits.movedim(-1, 1) if logits.dim() > 2 else logits

    def loss(self, outputs: torch.Tensor, batch: Mapping[str, Any], reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy of ``outputs`` against ``batch['labels']`` (class indices, or per-class
        values of the outputs' shape), positions shifted for a causal model; labels of -100
        count for nothing. ``reduction='none'`` gives one loss per label (per token)."""
        if LABELS not in batch:
            raise KeyError(f"HuggingFaceModel computes the loss from batch['labels'], and this batch has "
                           f"{sorted(batch)}; add the labels (for a causal language model, labels = input_ids)")
        targets = batch[LABELS]
        if self.shift_labels:
            outputs, targets = outputs[..., :-1], targets[..., 1:]
        return F.cross_entropy(outputs, targets, reduction=reduction, ignore_index=IGNORE_INDEX)
