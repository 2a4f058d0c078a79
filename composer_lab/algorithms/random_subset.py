"""RandomSubset: Selective Backprop's schedule with examples kept uniformly at random.

The control experiment for Selective Backprop: published work reports that loss-based
selection does not always beat a random subset of the same size, so compare the two on your
own problem (same ``keep``, same schedule, same seed).
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import torch

from composer_lab.algorithms.batch_selection import BatchSelection, kept_count
from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.state import State

__all__ = ["RandomSubset", "select_random_subset"]


def random_indices(batch_size: int, count: int, device: torch.device,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """``count`` distinct indices below ``batch_size``, uniformly at random, on ``device``."""
    return torch.randperm(batch_size, device=device, generator=generator)[:count]


def select_random_subset(input: torch.Tensor, target: torch.Tensor, keep: float = 0.5,
                         generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep ``int(keep * N)`` examples chosen uniformly without replacement, inputs and targets paired."""
    check_fraction("keep", keep, low_open=True)
    index = random_indices(input.shape[0], kept_count(input.shape[0], keep), input.device, generator)
    return input[index], target[index]


class RandomSubset(BatchSelection):
    """Keeps a uniform random ``int(keep * N)`` of the batch on Selective Backprop's schedule.

    Same arguments as :class:`SelectiveBackprop` except ``scale_factor`` (there is no scoring
    pass). Logs ``random_subset/keep_ratio`` every step.
    """

    metric_prefix: ClassVar[str] = "random_subset"

    def select(self, state: State, inputs: torch.Tensor, targets: Any,
               count: int) -> tuple[torch.Tensor, dict[str, Any]]:
        return random_indices(inputs.shape[0], count, inputs.device, state.generator(inputs.device)), {}
