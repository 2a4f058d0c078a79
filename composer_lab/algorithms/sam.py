"""Sharpness-aware minimization (Foret et al., 2020): step where the loss is flat around the weights.

Each SAM step runs the batch's forward and backward twice through the optimizer's closure: once
at the weights ``w`` to find the gradient, once at ``w + e(w)`` (a step of size ``rho`` up that
gradient), and the base optimizer then steps ``w`` with the second gradient. The trainer fires
the microbatch events (FORWARD, LOSS, BACKWARD) at each call of the closure and the trace says
which call a row belongs to (its ``closure_call`` column: 0, then 1).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from composer_lab.algorithms.validation import check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["SAM", "SAMOptimizer"]


class SAMOptimizer(torch.optim.Optimizer):
    """Wraps ``base_optimizer`` with sharpness-aware minimization; see :class:`SAM`.

    It shares the base optimizer's parameter groups (a scheduler of the base optimizer still sets
    the learning rate), and its ``state_dict`` is the base optimizer's, so a checkpoint loads into
    a trainer whether or not SAM has wrapped the optimizer yet. ``step`` needs the closure the
    trainer passes: it runs the forward and backward passes and returns the loss.

    Args:
        base_optimizer: the optimizer that makes the update.
        rho: the neighbourhood size (>= 0). Default ``0.05``.
        epsilon: added to the gradient norm for numerical stability. Default ``1e-12``.
        interval: SAM runs on one step in ``interval`` (the others are plain steps). Default ``1``.
    """

    closure_calls = 2
    """The calls of the closure a SAM step makes (a step off the ``interval`` makes one)."""

    def __init__(self, base_optimizer: torch.optim.Optimizer, rho: float = 0.05, epsilon: float = 1.0e-12,
                 interval: int = 1, **kwargs: Any) -> None:
        if not isinstance(base_optimizer, torch.optim.Optimizer):
            raise TypeError(f"SAMOptimizer wraps a torch.optim.Optimizer, got {type(base_optimizer).__name__}; "
                            f"pass the optimizer that should make the update")
        _check_hyperparameters(rho, epsilon, interval)
        self.base_optimizer = base_optimizer
        self.global_step = 0
        self.interval = interval
        self._step_supports_amp_closure = True
        super().__init__(base_optimizer.param_groups, {"rho": rho, "epsilon": epsilon, **kwargs})

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"] if p.grad is not None]

    @torch.no_grad()
    def first_step(self) -> None:
        """Climb from ``w`` to ``w + e(w)``, ``e(w) = rho * grad / (||grad|| + epsilon)``; keep ``e(w)``."""
        grads = [p.grad for p in self._params()]
        if not grads:
            return
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        for group in self.param_groups:
            scale = group["rho"] / (norm + group["epsilon"])
            for p in group["params"]:
                if p.grad is not None:
                    e_w = p.grad * scale.to(p)
                    p.add_(e_w)
                    self.state[p]["e_w"] = e_w

    @torch.no_grad()
    def sub_e_w(self) -> None:
        """Go back from ``w + e(w)`` to ``w``."""
        for group in self.param_groups:
            for p in group["params"]:
                e_w = self.state[p].pop("e_w", None)
                if e_w is not None:
                    p.sub_(e_w)

    @torch.no_grad()
    def second_step(self) -> None:
        """Back to ``w``, then the base optimizer's step with the gradient taken at ``w + e(w)``."""
        self.sub_e_w()
        self.base_optimizer.step()

    @torch.no_grad()
    def step(self, closure: Optional[Callable[..., Any]] = None) -> Any:
        if closure is None:
            raise RuntimeError("SAMOptimizer.step needs a closure that runs the forward and backward passes; "
                               "train with composer_lab's Trainer, or call step(closure) in your own loop")
        closure = torch.enable_grad()(closure)
        self.global_step += 1
        if self.global_step % self.interval:
            loss = closure()
            self.base_optimizer.step()
            return loss
        loss = closure(ddp_sync=False)  # the gradient at w (each process its own: no all-reduce needed)
        self.first_step()
        try:
            closure(loss_dict={})  # the gradient at w + e(w); its loss is not the step's loss
        except BaseException:
            self.sub_e_w()  # never leave the model at w + e(w)
            raise
        self.second_step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return self.base_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base_optimizer.load_state_dict(state_dict)


def _check_hyperparameters(rho: Any, epsilon: Any, interval: Any) -> None:
    check_positive("rho", rho, allow_zero=True)
    check_positive("epsilon", epsilon, allow_zero=True)
    check_positive("interval", interval, integer=True)


class SAM(Algorithm):
    """Sharpness-aware minimization: wraps each optimizer in a :class:`SAMOptimizer` at
    ``AFTER_LOAD`` (after a checkpoint, if any, restored the base optimizers).

    SAM steps take about twice the time of a plain step (two forward and backward passes).
    Under ``amp_fp16`` SAM is refused: torch's GradScaler does not take a closure; use
    ``amp_bf16`` or ``fp32``.

    Args:
        rho: the neighbourhood size (>= 0). Default ``0.05``.
        epsilon: added to the gradient norm for numerical stability. Default ``1e-12``.
        interval: SAM runs once every ``interval`` steps. Default ``1``.
    """

    events = frozenset({Event.AFTER_LOAD})
    writes = frozenset({"optimizers"})

    def __init__(self, rho: float = 0.05, epsilon: float = 1.0e-12, interval: int = 1) -> None:
        _check_hyperparameters(rho, epsilon, interval)
        self.rho = rho
        self.epsilon = epsilon
        self.interval = interval

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if state.precision == "amp_fp16":
            raise ValueError("SAM cannot train under precision='amp_fp16': torch's GradScaler does not run an "
                             "optimizer closure, which SAM's two passes need; use precision='amp_bf16' or 'fp32'")
        wrapped = []
        for optimizer in state.optimizers:
            if isinstance(optimizer, SAMOptimizer):
                raise ValueError("the optimizer is already a SAMOptimizer; list SAM once, or pass the base "
                                 "optimizer and let SAM wrap it")
            sam = SAMOptimizer(optimizer, rho=self.rho, epsilon=self.epsilon, interval=self.interval)
            sam.global_step = int(state.timestamp.batch)  # (a resumed run keeps SAM's interval in phase)
            wrapped.append(sam)
        state.optimizers = wrapped
        return None
