"""SWA: the average it swaps in, the learning rate it takes over, its refusals, and a resume
mid-average that ends where the uninterrupted run does."""

from __future__ import annotations

import warnings

import pytest
import torch

from composer_lab import Event
from composer_lab.algorithms import SWA
from composer_lab.algorithms.swa import PausedScheduler

from tests.trainer.helpers import OnEvent, make_trainer


def _weights(state) -> list[torch.Tensor]:
    return [p.detach().clone() for p in state.model.parameters()]


def _fit(trainer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit()


def test_at_swa_end_the_model_holds_the_mean_of_the_averaged_weights():
    seen, swapped = [], []
    swa = SWA(swa_start="0.3dur", swa_end="0.7dur", update_interval="1ba")
    before = OnEvent(Event.BATCH_END, lambda s: seen.append((s.get_elapsed_duration(), _weights(s))))
    after = OnEvent(Event.BATCH_END, lambda s: swa.swa_completed and not swapped and swapped.append(_weights(s)))
    _fit(make_trainer(algorithms=[before, swa, after], max_duration="10ba"))
    averaged = []
    for elapsed, weights in seen:
        if elapsed >= 0.3:
            averaged.append(weights)
        if elapsed >= 0.7:
            break
    assert len(averaged) >= 3
    expected = [torch.stack(ws).mean(0) for ws in zip(*averaged)]
    for got, want in zip(swapped[0], expected):
        torch.testing.assert_close(got, want)


def test_the_swap_keeps_the_parameter_objects_the_optimizer_steps():
    trainer = make_trainer(algorithms=[SWA(swa_start="0.2dur", swa_end="0.5dur", update_interval="1ba")],
                           max_duration="6ba")
    params = list(trainer.state.model.parameters())
    _fit(trainer)
    assert all(a is b for a, b in zip(params, trainer.state.model.parameters()))
    assert all(a is b for a, b in zip(params, trainer.state.optimizers[0].param_groups[0]["params"]))


def test_with_schedule_swa_lr_swa_holds_the_rate_and_the_runs_scheduler_pauses():
    model_args = make_trainer(max_duration="1ba").state.model
    optimizer = torch.optim.SGD(model_args.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    swa = SWA(swa_start="0.2dur", swa_end="0.9dur", update_interval="1ba", schedule_swa_lr=True, swa_lr=0.05,
              anneal_steps=2)
    rates = []
    recorder = OnEvent(Event.BATCH_END, lambda s: rates.append(s.optimizers[0].param_groups[0]["lr"]))
    trainer = make_trainer(model=model_args, optimizers=optimizer, schedulers=scheduler, max_duration="10ba",
                           algorithms=[swa, recorder])
    _fit(trainer)
    assert isinstance(trainer.state.schedulers[0], PausedScheduler)
    assert scheduler.last_epoch < 10  # it stopped stepping when SWA began
    assert rates[-1] == pytest.approx(0.05)  # annealed to swa_lr over 2 updates, then held


@pytest.mark.parametrize("kwargs, error", [
    (dict(swa_start="0.5dur", swa_end="8ep"), ValueError),
    (dict(swa_start="10ba", swa_end="20ba"), ValueError),
    (dict(swa_start="0.8dur", swa_end="0.5dur"), ValueError),
    (dict(swa_start="0.5dur", swa_end="1.5dur"), ValueError),
    (dict(update_interval="0.5dur"), ValueError),
    (dict(anneal_strategy="step"), ValueError),
    (dict(anneal_steps=0), ValueError),
    (dict(swa_start="soon"), ValueError),
])
def test_bad_hyperparameters_are_refused(kwargs, error):
    with pytest.raises(error):
        SWA(**kwargs)


def test_scheduling_two_optimizers_is_refused_before_any_step():
    model = make_trainer(max_duration="1ba").state.model
    first, second = list(model.children())[0], list(model.children())[-1]
    optimizers = [torch.optim.SGD(first.parameters(), lr=0.1), torch.optim.SGD(second.parameters(), lr=0.1)]
    with pytest.raises(ValueError, match="schedule_swa_lr=False"):
        make_trainer(model=model, optimizers=optimizers, algorithms=[SWA(schedule_swa_lr=True)])


def test_a_run_resumed_mid_average_ends_with_the_same_weights(tmp_path):
    def trainer(**kwargs):
        model = make_trainer(max_duration="1ba").state.model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        swa = SWA(swa_start="0.2dur", swa_end="0.8dur", update_interval="1ba", schedule_swa_lr=True, anneal_steps=3)
        return make_trainer(model=model, optimizers=optimizer, schedulers=scheduler, algorithms=[swa],
                            max_duration="4ep", seed=2, **kwargs)

    full = trainer(save_folder=tmp_path, save_interval="1ba")
    _fit(full)
    resumed = trainer(load_path=tmp_path / "ep2-ba7.pt")
    _fit(resumed)
    for a, b in zip(full.state.model.state_dict().values(), resumed.state.model.state_dict().values()):
        assert torch.equal(a, b)
    assert resumed.state.optimizers[0].param_groups[0]["lr"] == full.state.optimizers[0].param_groups[0]["lr"]
