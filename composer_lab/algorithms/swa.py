"""Stochastic weight averaging (Izmailov et al., 2018): average the weights late in the run.

From ``swa_start`` on, SWA keeps a running average of the weights (a ``torch.optim.swa_utils
.AveragedModel`` on the CPU), updated every ``update_interval``; at ``swa_end`` it copies the
average into the model (in place: the Parameter objects and the optimizer are untouched) and
training goes on from there, so batch-norm statistics follow the averaged weights.

With ``schedule_swa_lr`` SWA takes over the learning rate from ``swa_start``: the run's
schedulers are paused (they stop stepping; their state is what a checkpoint keeps, so a resumed
run loads into the same schedulers) and a ``SWALR`` anneals the rate to ``swa_lr``, one step per
update of the average.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import torch
from torch.optim.swa_utils import SWALR, AveragedModel

from composer_lab.algorithms.validation import check_choice, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeUnit, ensure_time

__all__ = ["SWA"]

_STRATEGIES = {"linear": "linear", "lin": "linear", "cos": "cos", "cosine": "cos"}


class PausedScheduler:
    """A run's scheduler while SWA holds the learning rate: ``step`` does nothing; its state is
    the paused scheduler's, so checkpoints written before and after ``swa_start`` load alike."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: SWA's own scheduler sets the learning rate."""

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)


class SWA(Algorithm):
    """Stochastic weight averaging, as Composer's ``SWA``.

    Args:
        swa_start: when averaging begins, in 'dur' (fraction of the run) or 'ep'. Default '0.7dur'.
        swa_end: when the average replaces the model's weights, in the unit of ``swa_start``.
            Leave at least an epoch after it so batch-norm statistics follow the averaged
            weights. Default '0.97dur'.
        update_interval: how often the average is updated, in 'ep' or 'ba'. Default '1ep'.
        schedule_swa_lr: anneal the learning rate to ``swa_lr`` from ``swa_start`` (the run's
            schedulers pause). Default False.
        anneal_strategy: 'linear' or 'cos'. Default 'linear'.
        anneal_steps: the updates over which the rate anneals. Default 10.
        swa_lr: the rate to anneal to; None: the rate in force at ``swa_start``.
    """

    writes = {Event.INIT: frozenset(), Event.FIT_START: frozenset({"optimizers"}),
              Event.BATCH_END: frozenset({"model", "optimizers"}), Event.EPOCH_END: frozenset({"model", "optimizers"})}

    def __init__(self, swa_start: str = "0.7dur", swa_end: str = "0.97dur", update_interval: str = "1ep",
                 schedule_swa_lr: bool = False, anneal_strategy: str = "linear", anneal_steps: int = 10,
                 swa_lr: Optional[float] = None) -> None:
        self.swa_start = ensure_time(swa_start, "swa_start")
        self.swa_end = ensure_time(swa_end, "swa_end")
        self.update_interval = ensure_time(update_interval, "update_interval")
        _check_times(self.swa_start, self.swa_end, self.update_interval)
        self.schedule_swa_lr = bool(schedule_swa_lr)
        self.anneal_strategy = _STRATEGIES[check_choice("anneal_strategy", str(anneal_strategy).lower(),
                                                        tuple(_STRATEGIES))]
        self.anneal_steps = check_positive("anneal_steps", anneal_steps, integer=True)
        self.swa_lr = None if swa_lr is None else check_positive("swa_lr", swa_lr, allow_zero=True)
        update_event = Event.BATCH_END if self.update_interval.unit is TimeUnit.BATCH else Event.EPOCH_END
        self.events = frozenset({Event.INIT, Event.FIT_START, update_event})
        self.swa_model: Optional[AveragedModel] = None
        self.swa_scheduler: Optional[SWALR] = None
        self.swa_started = False
        self.swa_completed = False
        self.step_counter = 0
        self._loaded: Optional[dict[str, Any]] = None

    def match(self, event: Event, state: State) -> bool:
        if event in (Event.INIT, Event.FIT_START):
            return True
        return self.listens(event) and not self.swa_completed and self._progress(state) >= self.swa_start.value

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.INIT:
            self._check_run(state)
        elif event is Event.FIT_START:
            self._restore(state)
        else:
            self._update(state)
        return None

    def _progress(self, state: State) -> float:
        if self.swa_start.unit is TimeUnit.EPOCH:
            return float(state.timestamp.epoch)
        return state.get_elapsed_duration()

    def _check_run(self, state: State) -> None:
        """Refuse, before any weight update, a run SWA cannot schedule."""
        if self.schedule_swa_lr and len(state.optimizers) != 1:
            raise ValueError(f"SWA(schedule_swa_lr=True) schedules one optimizer, the run has "
                             f"{len(state.optimizers)}; pass one optimizer or schedule_swa_lr=False")
        if self.update_interval.unit is TimeUnit.EPOCH and state.max_duration.unit is not TimeUnit.EPOCH \
                and state.dataloader_len is None:
            raise ValueError("SWA(update_interval in 'ep') needs epochs: the run's dataloader has no length; "
                             "give update_interval in batches, e.g. '100ba'")
        if self.swa_end.unit is TimeUnit.DURATION and self.swa_end.value == 1:
            warnings.warn("SWA(swa_end='1dur') swaps the averaged weights in after the last batch: their "
                          "batch-norm statistics are never updated; end SWA at least an epoch before the run does",
                          stacklevel=2)

    def _start(self, state: State) -> None:
        self.swa_model = AveragedModel(state.model, device=torch.device("cpu"))
        if self.schedule_swa_lr:
            self._take_over_schedule(state)

    def _take_over_schedule(self, state: State) -> None:
        optimizer = state.optimizers[0]
        swa_lr = self.swa_lr if self.swa_lr is not None else optimizer.param_groups[0]["lr"]
        state.schedulers = [s if isinstance(s, PausedScheduler) else PausedScheduler(s) for s in state.schedulers]
        self.swa_scheduler = SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=self.anneal_steps,
                                   anneal_strategy=self.anneal_strategy)

    def _update(self, state: State) -> None:
        if not self.swa_started:
            self._start(state)
            self.swa_started = True
        if self.step_counter % self.update_interval.value == 0:
            self.swa_model.update_parameters(state.model)
            if self.swa_scheduler is not None:
                self.swa_scheduler.step()
        self.step_counter += 1
        if self._progress(state) >= self.swa_end.value:
            self.swa_completed = True
            with torch.no_grad():
                state.model.load_state_dict(self.swa_model.module.state_dict())

    def _restore(self, state: State) -> None:
        """At FIT_START after a checkpoint: rebuild the average and SWA's scheduler from it."""
        loaded, self._loaded = self._loaded, None
        if loaded is None or not self.swa_started or self.swa_completed:
            return
        self._start(state)
        self.swa_model.load_state_dict(loaded["swa_model"])
        if self.swa_scheduler is not None and loaded["swa_scheduler"] is not None:
            self.swa_scheduler.load_state_dict(loaded["swa_scheduler"])
            for group, lr in zip(state.optimizers[0].param_groups, self.swa_scheduler.get_last_lr()):
                group["lr"] = lr

    def state_dict(self) -> dict[str, Any]:
        scheduler = None
        if self.swa_scheduler is not None:
            scheduler = {k: v for k, v in self.swa_scheduler.state_dict().items() if k != "anneal_func"}
        return {"swa_model": None if self.swa_model is None else self.swa_model.state_dict(),
                "swa_scheduler": scheduler, "swa_started": self.swa_started,
                "swa_completed": self.swa_completed, "step_counter": self.step_counter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.swa_started, self.swa_completed = state["swa_started"], state["swa_completed"]
        self.step_counter = state["step_counter"]
        self._loaded = state

    @staticmethod
    def required_on_load() -> bool:
        return True


def _check_times(start: Time, end: Time, interval: Time) -> None:
    if start.unit is not end.unit:
        raise ValueError(f"SWA: swa_start ({start}) and swa_end ({end}) must have the same unit; "
                         f"give both in 'dur' or both in 'ep'")
    if start.unit not in (TimeUnit.DURATION, TimeUnit.EPOCH):
        raise ValueError(f"SWA: swa_start must be in 'dur' or 'ep', got {start}; e.g. '0.7dur' or '6ep'")
    if start.unit is TimeUnit.DURATION and not 0 <= start.value <= end.value <= 1:
        raise ValueError(f"SWA: swa_start and swa_end in 'dur' must lie in [0, 1], got {start} and {end}")
    if start.value >= end.value:
        raise ValueError(f"SWA: swa_end ({end}) must come after swa_start ({start})")
    if not interval.is_period():
        raise ValueError(f"SWA: update_interval must be a whole number of epochs or batches, at least 1, "
                         f"got {interval}; e.g. '1ep' or '10ba'")
