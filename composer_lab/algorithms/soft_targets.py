"""Target forms: class indices or per-class values, told apart by the shape of the outputs.

Composer's rule (``composer.loss.utils.infer_target_type``): targets with the outputs' shape
hold per-class values (probabilities, smoothed or one-hot rows, integer one-hot included);
targets with one dimension fewer hold class indices, the class dimension being dimension 1
of the outputs: ``(N,)`` for outputs ``(N, C)``, ``(N, H, W)`` for segmentation outputs
``(N, C, H, W)``. Anything else is refused, never guessed.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["class_values", "outputs_shape_for"]


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(s) for s in shape)


def class_values(target: torch.Tensor, outputs_shape: Sequence[int],
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``target`` as per-class values of ``outputs_shape`` (class dimension 1): a new tensor of
    ``dtype``, free to change in place.

    Class indices become one-hot; per-class values are copied. ValueError when the target
    fits neither form, or holds fractional class indices.
    """
    shape, target_shape = _shape(outputs_shape), _shape(target.shape)
    if len(shape) < 2:
        raise ValueError(f"per-class targets need class scores of shape (N, C, ...) from the model, got outputs "
                         f"of shape {shape}; make the model return one score per class")
    if target_shape == shape:
        return target.to(dtype, copy=True)
    if target_shape == (shape[0], *shape[2:]):
        if target.is_floating_point() or target.is_complex():
            raise ValueError(f"targets of shape {target_shape} for outputs {shape} are class indices, which must "
                             f"be integers, got {target.dtype}; convert them with target.long(), or give "
                             f"per-class values of shape {shape}")
        try:
            hot = torch.nn.functional.one_hot(target.long(), shape[1])
        except RuntimeError as err:  # (torch checks the indices on the CPU; reading them here would sync a GPU)
            raise ValueError(f"class indices must lie in [0, {shape[1]}) for outputs of shape {shape} ({err}); "
                             f"per-class targets cannot mark a position to ignore (ignore_index, -100 in Hugging "
                             f"Face labels): leave this algorithm out for such targets, or give every position "
                             f"a class") from None
        return hot.movedim(-1, 1).to(dtype)
    raise ValueError(f"cannot tell the form of targets of shape {target_shape} for outputs of shape {shape}: give "
                     f"class indices of shape {(shape[0], *shape[2:])} or per-class values of shape {shape} "
                     f"(the class dimension is dimension 1, as in Composer)")


def outputs_shape_for(target: torch.Tensor, num_classes: int) -> tuple[int, ...]:
    """The outputs shape ``target`` implies with ``num_classes`` classes: its own shape for
    floating-point per-class values, ``(N, num_classes, ...)`` for integer class indices.

    ValueError for an integer target whose dimension 1 is ``num_classes`` long: integer
    one-hot rows and that many class indices per example look alike, so the form is asked for.
    """
    shape = _shape(target.shape)
    if target.is_floating_point():
        if len(shape) < 2 or shape[1] != num_classes:
            raise ValueError(f"floating-point targets are per-class values and need {num_classes} classes in "
                             f"dimension 1, got shape {shape}; give class indices as integers, or values of "
                             f"shape (N, {num_classes}, ...)")
        return shape
    if len(shape) >= 2 and shape[1] == num_classes:
        raise ValueError(f"integer targets of shape {shape} with num_classes={num_classes} may be one-hot rows or "
                         f"{num_classes} class indices per example; give one-hot rows as floats "
                         f"(target.float()), or leave num_classes unset so the model's output shape decides")
    return (shape[0], num_classes, *shape[1:])
