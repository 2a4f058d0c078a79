"""What a run cost: the training loop's time, the samples it trained on and the FLOPs it performed.

A :class:`CostMeter` is a callback a frontier's trials attach to the trainer the factory built.
It measures each batch from ``before_dataloader`` to ``batch_end`` (loading, the algorithms of
``after_dataloader`` such as Selective Backprop's scoring pass or progressive resizing, forward,
backward and the optimizer step), so evaluation, checkpoints and the start-up before the first
batch are left out.

FLOPs are counted with torch's own FLOP formulas (:class:`~composer_lab.explore.flops.FlopCount`,
the table of ``torch.utils.flop_counter``: matrix products, convolutions and attention, forward
and backward, as they really ran: a smaller backward, smaller images and changed layers count as
what they are). Counting a batch slows it (about 1.5x for a small CNN: every operation passes
through Python), so not every batch is counted: the work of a batch is fixed by the shapes it
trains on and the parameters that learn, its *kind*, so the first batch is counted and each kind
that recurs is met and counted once (see :meth:`CostMeter._due`) and stands for the others of
that kind; no other batch is counted (a kind's work is the same each time, so counting it
again would only add to the run's time). A batch whose kind was never counted (a step of a
progressive-resizing ramp; an epoch's short last batch until the next epoch's last batch is
counted for it) takes the FLOPs of the nearest counted batch, scaled by the size of its inputs
(examples x features or pixels). ``flops_counted`` says how many batches were counted.

Time is taken honestly for a shared machine: the first batch (imports, the allocator and kernels
warming up) and the counted batches (slowed by the counter) take the median time of the other
batches of their kind (:data:`TIMING`). Wall time on a shared CPU is still noisy: FLOPs and
samples are the machine-independent costs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Hashable, Optional

import torch

from composer_lab.core.callback import Callback
from composer_lab.explore.flops import FlopCount

__all__ = ["CostMeter", "TIMING", "CHASES"]

CHASES = 2
"""How many counts the meter spends trying to meet a kind of batch it has not counted."""
TIMING = ("training loop time: each batch from before_dataloader to batch_end (evaluation, checkpoints and start-up "
          "left out); the first batch (warm-up) and the batches whose FLOPs were counted take the median time of "
          "the other batches of their kind")


class CostMeter(Callback):
    """Times every batch of a fit and counts the FLOPs of some (see the module's docstring);
    :meth:`row` gives the run's costs. ``every=1`` counts every batch (exact, slow)."""

    _internal = True

    def __init__(self, every: Optional[int] = None) -> None:
        self.every = every
        self.seconds: list[float] = []
        self.kinds: list[Hashable] = []
        self.sizes: list[int] = []
        self.counted: dict[int, int] = {}  # batch index -> FLOPs
        self._start = 0.0
        self._counter: Optional[FlopCount] = None
        self._spent = 0.0  # seconds the counted batches took beyond their kind's median
        self._chased: dict[Hashable, int] = {}  # uncounted kind -> counts spent trying to meet it
        self._tried: set = set()  # uncounted kinds a count of the batch after them failed to meet again
        self._before: dict[Hashable, set] = {}  # kind -> the uncounted kinds that followed it
        self._unmet: set = set()  # uncounted kinds met at an epoch's end: not chased

    @classmethod
    def attach(cls, trainer: Any, every: Optional[int] = None) -> "CostMeter":
        """A meter listening to ``trainer``'s loop."""
        meter = cls(every)
        trainer.state.callbacks.append(meter)
        return meter

    def before_dataloader(self, state: Any, logger: Any) -> None:
        # (a counter still open: the last before_dataloader found the epoch's data done; keep it)
        if self._counter is None and self._due(len(self.seconds), _epoch_ends_next(state)):
            self._counter = FlopCount()
            self._counter.__enter__()
        self._start = time.perf_counter()

    def batch_end(self, state: Any, logger: Any) -> None:
        seconds = time.perf_counter() - self._start
        index = len(self.seconds)
        self.seconds.append(seconds)
        self.kinds.append(_kind(state))
        self.sizes.append(_size(state.batch))
        if self._counter is not None:
            self.stop_counting(record=True)
            plain = self._plain_median(self.kinds[-1])
            if index > 0 and plain is not None:
                self._spent += max(0.0, seconds - plain)
        elif self.kinds[-1] not in self._counted_kinds():
            if _epoch_ended(state):
                self._unmet.add(self.kinds[-1])
            elif index > 0:
                self._before.setdefault(self.kinds[-2], set()).add(self.kinds[-1])

    def stop_counting(self, record: bool = False) -> None:
        """Close the counter; with ``record``, its count is the last batch's. Called without, it
        closes a counter left open (opened for a batch that never came: the run's data was done,
        or the fit failed mid-batch), so later runs in this process do not run under it."""
        if self._counter is not None:
            counter, self._counter = self._counter, None
            counter.__exit__(None, None, None)
            if record:
                self.counted[len(self.seconds) - 1] = int(counter.get_total_flops())

    def fit_end(self, state: Any, logger: Any) -> None:
        self.stop_counting()

    def _due(self, index: int, epoch_end: bool = False) -> bool:
        """Whether to count batch ``index``: always with ``every``=1 or at its multiples; else the
        first batch; the one after a batch of a kind not counted yet (a run of one kind; tried once
        per kind), or after a batch of a kind that such a kind followed (kinds that alternate, as
        Selective Backprop's selective and plain steps), at most :data:`CHASES` times per kind;
        and an epoch's last batch (``epoch_end``) when a kind met at an epoch's end is not counted
        yet (an epoch's short last batch: the batch after it starts the next epoch, so only the
        next epoch's end meets it again)."""
        if self.every is not None:
            return index % self.every == 0
        if index == 0 or (epoch_end and self._unmet - self._counted_kinds()):
            return True
        counted = self._counted_kinds()
        last = self.kinds[-1]
        wanted = [k for k in (*self._before.get(last, ()), *([last] if last not in self._tried else []))
                  if k not in counted and k not in self._unmet and self._chased.get(k, 0) < CHASES]
        self._tried.add(last)
        for kind in wanted:
            self._chased[kind] = self._chased.get(kind, 0) + 1
        return bool(wanted)

    def _per_count(self) -> float:
        """What counting one batch costs: the counted batches' mean time beyond their kind's median;
        before a second count, the first batch's whole time (an upper bound: it warms up too)."""
        if len(self.counted) > 1:
            return self._spent / (len(self.counted) - 1)
        return self.seconds[0] if self.seconds else 0.0

    def _counted_kinds(self) -> set:
        return {self.kinds[i] for i in self.counted}

    def _plain_median(self, kind: Hashable) -> Optional[float]:
        """The median time of the batches of ``kind`` neither first nor counted (any kind when
        none of this kind)."""
        plain = [i for i in range(1, len(self.seconds)) if i not in self.counted]
        same = [self.seconds[i] for i in plain if self.kinds[i] == kind]
        others = [self.seconds[i] for i in plain]
        return statistics.median(same) if same else statistics.median(others) if others else None

    def time(self) -> float:
        """The loop's seconds, the first and the counted batches at their kind's median."""
        return sum(self._plain_median(self.kinds[i]) or self.seconds[i]
                   if i == 0 or i in self.counted else self.seconds[i] for i in range(len(self.seconds)))

    def flops(self) -> float:
        """The FLOPs of the run: each counted batch's own count, each other batch its kind's
        mean count (or the nearest counted batch's, scaled by the size of its inputs); NaN if none was counted."""
        if not self.counted:
            return float("nan")
        by_kind: dict[Hashable, list[int]] = {}
        for i, flops in self.counted.items():
            by_kind.setdefault(self.kinds[i], []).append(flops)
        total = 0.0
        for i, kind in enumerate(self.kinds):
            if i in self.counted:
                total += self.counted[i]
            elif kind in by_kind:
                total += statistics.fmean(by_kind[kind])
            else:
                near = min(self.counted, key=lambda j: abs(j - i))
                total += self.counted[near] * self.sizes[i] / max(1, self.sizes[near])
        return total

    def row(self) -> dict[str, Any]:
        """The run's costs: ``time`` (s), ``flops``, ``batches``, ``flops_counted`` (batches counted)
        and ``counting_overhead`` (the counting's estimated time, every counted batch at
        :meth:`_per_count`, a share of the loop's)."""
        loop = self.time()
        return {"time": loop, "flops": self.flops(), "batches": len(self.seconds), "flops_counted": len(self.counted),
                "counting_overhead": self._per_count() * len(self.counted) / loop if loop > 0 else 0.0}


def _kind(state: Any) -> Hashable:
    """What fixes a batch's work: the shapes of the batch it trained on and how many parameters learn."""
    learning = sum(p.numel() for p in state.model.parameters() if p.requires_grad)
    return _shapes(state.batch), learning


def _epoch_ends_next(state: Any) -> bool:
    """Whether the batch about to load is its epoch's last."""
    length = state.dataloader_len
    return bool(length) and state.timestamp.batch_in_epoch == length - 1


def _epoch_ended(state: Any) -> bool:
    """Whether the batch just trained was its epoch's last (the timestamp has moved past it)."""
    length = state.dataloader_len
    return bool(length) and state.timestamp.batch_in_epoch >= length


def _shapes(batch: Any) -> tuple:
    if isinstance(batch, torch.Tensor):
        return tuple(batch.shape)
    if isinstance(batch, dict):
        return tuple((key, _shapes(value)) for key, value in sorted(batch.items(), key=lambda item: str(item[0])))
    if isinstance(batch, (list, tuple)):
        return tuple(_shapes(item) for item in batch)
    return ()


def _size(batch: Any) -> int:
    """The size of a batch's inputs: the elements of its first tensor (examples x features or pixels)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel()
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    return next((_size(item) for item in items if _size(item)), 0)
