"""Selective Backprop (Jiang et al., 2019): train on the examples the model finds hardest.

A forward pass without gradients, optionally on downsampled inputs, scores every example of
the batch; ``int(keep * N)`` are drawn without replacement with a probability that rises with
the rank of their loss, ``((rank + 0.5) / N) ** (1 / keep - 1)``, so hard examples are kept more
often but easy ones still appear. The draw uses a seeded generator on the batch's device (no
host round-trip), and the scoring pass leaves BatchNorm running statistics untouched.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from typing import Any, Callable, ClassVar, Iterator, Optional

import torch
import torch.nn.functional as F

from composer_lab.algorithms.batch_selection import BatchSelection, kept_count, should_selective_backprop
from composer_lab.algorithms.probe import check_accepts
from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.state import State, batch_with_item

__all__ = ["SelectiveBackprop", "select_using_loss", "should_selective_backprop", "per_example_loss_fn",
           "select_by_loss_rank", "frozen_norm_statistics"]

_INTERPOLATE_MODES = {3: "linear", 4: "bilinear", 5: "trilinear"}


def check_scale_factor(scale_factor: float) -> float:
    """``scale_factor`` in (0, 1] as a float, else ValueError / TypeError."""
    if isinstance(scale_factor, (int, float)) and not isinstance(scale_factor, bool) and scale_factor > 1:
        raise ValueError(f"scale_factor={scale_factor} > 1 would upsample the scoring inputs; it must be "
                         f"in (0, 1]: pass 1 to score on full-size inputs, or e.g. 0.5")
    return check_fraction("scale_factor", scale_factor, low_open=True)


def per_example_loss_fn(loss_fun: Any) -> Callable[..., torch.Tensor]:
    """``loss_fun`` called with ``reduction='none'``: a copy of a torch loss module with its
    ``reduction`` set to 'none', or the function with the keyword bound. TypeError when it is
    not callable or takes no ``reduction`` argument."""
    if isinstance(loss_fun, torch.nn.Module) and hasattr(loss_fun, "reduction"):
        module = copy.copy(loss_fun)
        module.reduction = "none"
        return module
    if not callable(loss_fun):
        raise TypeError(f"the loss function must be callable as loss(outputs, targets, reduction='none'), "
                        f"got {type(loss_fun).__name__} {loss_fun!r}; pass the function itself, e.g. "
                        f"torch.nn.functional.cross_entropy")
    try:
        params = inspect.signature(loss_fun).parameters
    except (TypeError, ValueError):
        params = {}
    if "reduction" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        name = getattr(loss_fun, "__name__", type(loss_fun).__name__)
        raise TypeError(f"the loss function {name} takes no 'reduction' argument; Selective Backprop needs "
                        f"per-example losses from loss(outputs, targets, reduction='none'): use e.g. "
                        f"torch.nn.functional.cross_entropy or torch.nn.CrossEntropyLoss()")
    return functools.partial(loss_fun, reduction="none")


@contextlib.contextmanager
def frozen_norm_statistics(model: Any) -> Iterator[None]:
    """Inside, batch-norm layers in training mode normalise with batch statistics as usual but
    do not update their running statistics (nor ``num_batches_tracked``)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
             and m.track_running_stats] if isinstance(model, torch.nn.Module) else []
    for m in norms:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m in norms:
            m.track_running_stats = True


def downsample(inputs: torch.Tensor, scale_factor: float) -> torch.Tensor:
    """``inputs`` spatially scaled by ``scale_factor`` (a no-op at 1); ValueError unless 3-D to 5-D."""
    if scale_factor == 1:
        return inputs
    if not inputs.is_floating_point():
        raise ValueError(f"downsampling with scale_factor={scale_factor} interpolates, which needs floating-point "
                         f"inputs (images, signals), got {inputs.dtype}. Use scale_factor=1 for these inputs")
    if inputs.dim() not in _INTERPOLATE_MODES:
        raise ValueError(f"downsampling with scale_factor={scale_factor} needs inputs of 3 to 5 dimensions "
                         f"(N, C, L), (N, C, H, W) or (N, C, D, H, W); got shape {tuple(inputs.shape)}. "
                         f"Use scale_factor=1 for these inputs")
    return F.interpolate(inputs, scale_factor=scale_factor, mode=_INTERPOLATE_MODES[inputs.dim()],
                         align_corners=False, recompute_scale_factor=False)


@functools.lru_cache(maxsize=16)
def _rank_weights(batch_size: int, keep: float, device: torch.device) -> torch.Tensor:
    percentiles = (torch.arange(batch_size, device=device, dtype=torch.float32) + 0.5) / batch_size
    return percentiles.pow(1.0 / keep - 1.0)


def select_by_loss_rank(losses: torch.Tensor, count: int, keep: float,
                        generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Indices of ``count`` examples drawn without replacement, the one of loss rank ``r`` (0 =
    lowest) weighted by ``((r + 0.5) / N) ** (1 / keep - 1)``.

    Weighted sampling without replacement as the top ``count`` of ``log(u) / w`` (Efraimidis and
    Spirakis, 2006), all on the losses' device.
    """
    order = torch.argsort(losses.detach().float())
    weights = _rank_weights(losses.shape[0], keep, losses.device)
    uniform = torch.rand(losses.shape[0], device=losses.device, generator=generator)
    keys = uniform.log_() / weights
    return order[keys.topk(count, sorted=False).indices]


def score_examples(inputs: torch.Tensor, targets: Any, forward: Callable[[torch.Tensor], Any],
                   loss: Callable[[Any, Any], torch.Tensor], model: Any, scale_factor: float) -> torch.Tensor:
    """Per-example losses from a forward pass without gradients on downsampled inputs; a loss
    per position (per token of a language model, per pixel) is averaged over each example's,
    leaving out the positions whose class index is negative (ignored by the loss: -100, Hugging
    Face's ``ignore_index``, where ``reduction='none'`` gives 0), so that padding does not make an
    example look easy."""
    with torch.no_grad(), frozen_norm_statistics(model):
        losses = loss(forward(downsample(inputs, scale_factor)), targets)
    if losses.dim() == 0 or losses.shape[0] != inputs.shape[0]:
        raise ValueError(f"the loss with reduction='none' returned shape {tuple(losses.shape)}; Selective "
                         f"Backprop needs one loss per example, shape ({inputs.shape[0]},), or per example and "
                         f"position (per token, per pixel), shape ({inputs.shape[0]}, ...)")
    if losses.dim() == 1:
        return losses
    if isinstance(targets, torch.Tensor) and not (targets.is_floating_point() or targets.is_complex()):
        if targets.shape[:-1] == losses.shape[:-1] and targets.shape[-1] == losses.shape[-1] + 1:
            targets = targets[..., 1:]  # (a causal model's loss: position t predicts label t + 1)
        if targets.shape == losses.shape:  # (class indices per position)
            counted = (targets >= 0).flatten(1).sum(1)
            return losses.flatten(1).sum(1) / counted.clamp_min(1).to(losses.dtype)
    return losses.flatten(1).mean(1)


def select_using_loss(input: torch.Tensor, target: torch.Tensor, model: Callable[[torch.Tensor], Any],
                      loss_fun: Callable[..., torch.Tensor], keep: float = 0.5, scale_factor: float = 1,
                      generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep ``int(keep * N)`` examples of the batch, harder ones (higher loss) more likely.

    ``loss_fun(outputs, targets, reduction='none')`` must give per-example losses; the scoring
    forward runs without gradients on inputs downsampled by ``scale_factor`` (< 1 needs 3-D to
    5-D inputs). Pass ``generator`` (on the input's device) for a repeatable draw. Returns the
    kept inputs and targets, still paired.
    """
    check_fraction("keep", keep, low_open=True)
    scale_factor = check_scale_factor(scale_factor)
    loss = per_example_loss_fn(loss_fun)
    count = kept_count(input.shape[0], keep)
    losses = score_examples(input, target, model, loss, model, scale_factor)
    index = select_by_loss_rank(losses, count, keep, generator)
    return input[index], target[index]


class SelectiveBackprop(BatchSelection):
    """Selective Backprop at AFTER_DATALOADER on the steps :func:`should_selective_backprop` picks.

    Args:
        start, end: the interval of training, as fractions, in which SB runs.
        keep: fraction of each batch kept for the weight update, in (0, 1].
        scale_factor: spatial scale of the scoring forward's inputs, in (0, 1].
        interrupt: every ``interrupt``-th batch of the epoch is a plain step (0: none).

    At INIT it takes the loss from ``state.loss_fn`` (called with ``reduction='none'``) or
    from a model with ``loss(outputs, batch, reduction=...)``, and raises TypeError if neither
    gives per-example losses. Logs ``sb/keep_ratio`` every step and, on selective steps,
    ``sb/loss_kept`` and ``sb/loss_all`` (mean scoring losses of the kept and of all examples).
    """

    metric_prefix: ClassVar[str] = "sb"

    def __init__(self, start: float = 0.5, end: float = 0.9, keep: float = 0.5, scale_factor: float = 0.5,
                 interrupt: int = 2) -> None:
        super().__init__(start, end, keep, interrupt)
        self.scale_factor = check_scale_factor(scale_factor)
        self._checked: set[tuple] = set()
        self._loss: Optional[Callable[[Any, Any], torch.Tensor]] = None
        self._forward: Optional[Callable[[torch.Tensor], Any]] = None

    def attach(self, state: State) -> None:
        if state.loss_fn is not None:
            self._loss = per_example_loss_fn(state.loss_fn)
            self._forward = lambda x: state.model(x)
            return
        model_loss = getattr(state.model, "loss", None)
        if model_loss is None:
            raise TypeError("SelectiveBackprop found no loss: give the Trainer a loss_fn that accepts "
                            "reduction='none', or a model with loss(outputs, batch, reduction='none')")
        per_example = per_example_loss_fn(model_loss)
        self._forward = lambda x: state.model(batch_with_item(state.batch, 0, x))
        self._loss = lambda outputs, targets: per_example(outputs, batch_with_item(state.batch, 1, targets))

    def check_inputs(self, state: State) -> None:
        """With ``scale_factor`` < 1, once per model and input shape: the model must take the
        downsampled inputs (a probe forward of one example), else a ValueError naming the fix."""
        inputs = state.batch_get_item(0)
        key = (id(state.model), tuple(inputs.shape[1:]), inputs.dtype)
        if self.scale_factor == 1 or key in self._checked:
            return
        name = f"SelectiveBackprop(scale_factor={self.scale_factor:g})"
        try:
            small = downsample(inputs[:1], self.scale_factor)
        except ValueError as err:
            raise ValueError(f"{name} scores on downsampled inputs: {err}") from None
        check_accepts(state, small, f"{name} scores on inputs resized to {'x'.join(map(str, small.shape[2:]))}, "
                                    f"which this model refuses: pass scale_factor=1.0")
        self._checked.add(key)

    def select(self, state: State, inputs: torch.Tensor, targets: Any,
               count: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if self._loss is None:
            self.attach(state)
        with state.precision_context():
            losses = score_examples(inputs, targets, self._forward, self._loss, state.model, self.scale_factor)
        index = select_by_loss_rank(losses, count, self.keep, state.generator(inputs.device))
        losses = losses.detach().float()  # integer losses (error counts) have no mean of their own dtype
        return index, {"sb/loss_kept": losses[index].mean(), "sb/loss_all": losses.mean()}
