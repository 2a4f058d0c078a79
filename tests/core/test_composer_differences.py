"""Pins of the "Differences from Composer" rows (docs/composer_differences.md) whose behaviour lives
in an algorithm: each fails if composer_lab drifts to Composer's behaviour (or anywhere else) without the table
saying so."""

import inspect

import torch

from composer_lab.algorithms import EMA, SelectiveBackprop
from composer_lab.core import Engine, Event, State, Timestamp


def test_selective_backprop_defaults_are_the_seeds():
    defaults = {name: p.default for name, p in inspect.signature(SelectiveBackprop).parameters.items()}
    assert defaults == {"start": 0.5, "end": 0.9, "keep": 0.5, "scale_factor": 0.5, "interrupt": 2}


def test_selective_backprop_reads_its_interval_in_batches_of_an_epoch_run():
    """In a 2-epoch run of 4 batches each, start=0.25 begins at batch 2 of the first epoch
    (Composer reads whole epochs there, so it would begin only at epoch 1)."""
    sb = SelectiveBackprop(start=0.25, end=0.9, interrupt=0)
    state = State(torch.nn.Linear(4, 2), "2ep", dataloader=[0, 1, 2, 3], algorithms=[sb])
    active = []
    for batch in range(4):
        state.timestamp = Timestamp(epoch=0, batch=batch, batch_in_epoch=batch)
        active.append(sb.active(Event.AFTER_DATALOADER, state))
        assert sb.match(Event.AFTER_DATALOADER, state)  # listening on every batch: keep ratio 1.0 is logged
    assert active == [False, False, True, True]


def test_ema_interval_in_epochs_counts_batches():
    """update_interval='1ep' updates every dataloader-length batches (at BATCH_END)."""
    model = torch.nn.Linear(2, 1, bias=False)
    ema = EMA(half_life=None, smoothing=0.5, update_interval="1ep")
    engine = Engine(State(model, "2ep", dataloader=[0, 1, 2], algorithms=[ema]))
    engine.run_event(Event.FIT_START)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    for _ in range(2):
        engine.run_event(Event.BATCH_END)
    assert torch.equal(ema.averages[0], start)
    engine.run_event(Event.BATCH_END)
    assert torch.allclose(ema.averages[0], start + 1.0)


def test_adaptive_clipping_floors_the_weight_norm_so_a_zero_initialised_unit_still_trains():
    """Composer scales a unit's gradient by ``threshold * |w| / |g|`` with no floor, so a unit whose
    weights are all zero (a zero-initialised bias) gets a zero gradient and never trains; here
    ``|w|`` is floored at 1e-3 (Brock et al.'s epsilon)."""
    import composer_lab.functional as cf

    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        layer.bias.zero_()
    layer.weight.grad, layer.bias.grad = torch.zeros(2, 3), torch.tensor([3.0, 4.0])  # |g| = 5
    cf.apply_gradient_clipping(layer, "adaptive", 0.1)
    assert torch.allclose(layer.bias.grad, torch.tensor([3.0, 4.0]) * (0.1 * 1e-3 / 5))
