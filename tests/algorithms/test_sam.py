"""SAM: the optimizer's two passes (by hand on a plain loop), and the trainer running them
through the closure, traced as two closure calls, with the batch methods still right."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from composer_lab import Event
from composer_lab.algorithms import SAM, LabelSmoothing, MixUp, SelectiveBackprop
from composer_lab.algorithms.sam import SAMOptimizer

from tests.trainer.helpers import OnEvent, make_trainer


def _regression(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, 3, generator=gen))
        model.bias.zero_()
    x, y = torch.randn(8, 3, generator=gen), torch.randn(8, 1, generator=gen)
    return model, x, y


def _closure(model, x, y, calls: list):
    def closure(**kwargs):
        calls.append(kwargs)
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss.detach()
    return closure


def _grad_at(model, x, y, weight, bias):
    probe = nn.Linear(3, 1)
    with torch.no_grad():
        probe.weight.copy_(weight)
        probe.bias.copy_(bias)
    nn.functional.mse_loss(probe(x), y).backward()
    return probe.weight.grad, probe.bias.grad


def test_a_sam_step_descends_with_the_gradient_taken_at_the_perturbed_weights():
    model, x, y = _regression()
    w, b = model.weight.detach().clone(), model.bias.detach().clone()
    gw, gb = _grad_at(model, x, y, w, b)
    rho, lr = 0.05, 0.1
    scale = rho / (torch.cat([gw.flatten(), gb]).norm() + 1e-12)
    gw2, gb2 = _grad_at(model, x, y, w + scale * gw, b + scale * gb)

    calls = []
    sam = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=lr), rho=rho)
    sam.step(_closure(model, x, y, calls))

    assert len(calls) == 2 and calls[0] == {"ddp_sync": False} and "loss_dict" in calls[1]
    torch.testing.assert_close(model.weight.detach(), w - lr * gw2)
    torch.testing.assert_close(model.bias.detach(), b - lr * gb2)


def test_off_its_interval_sam_makes_a_plain_step():
    model, x, y = _regression()
    w = model.weight.detach().clone()
    gw, _ = _grad_at(model, x, y, w, model.bias.detach())
    calls = []
    sam = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), interval=2)
    sam.step(_closure(model, x, y, calls))  # step 1 of 2: plain
    assert len(calls) == 1
    torch.testing.assert_close(model.weight.detach(), w - 0.1 * gw)
    sam.step(_closure(model, x, y, calls))  # step 2: SAM
    assert len(calls) == 3


def test_a_failing_second_pass_leaves_the_weights_where_they_were():
    model, x, y = _regression()
    before = [p.detach().clone() for p in model.parameters()]
    passes = []

    def closure(**kwargs):
        passes.append(kwargs)
        if len(passes) == 2:
            raise RuntimeError("second pass failed")
        return _closure(model, x, y, [])()

    sam = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="second pass failed"):
        sam.step(closure)
    for p, b in zip(model.parameters(), before):
        torch.testing.assert_close(p.detach(), b)


def test_sam_shares_the_base_optimizers_groups_and_state():
    model, x, y = _regression()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sam = SAMOptimizer(base)
    sam.step(_closure(model, x, y, []))
    sam.param_groups[0]["lr"] = 0.01  # a scheduler of either sets the rate both use
    assert base.param_groups[0]["lr"] == 0.01
    saved = sam.state_dict()
    assert saved["state"] and set(saved) == {"state", "param_groups"}  # the base optimizer's: loads into it
    fresh = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fresh.load_state_dict(saved)
    torch.testing.assert_close(fresh.state_dict()["state"][0]["momentum_buffer"],
                               base.state_dict()["state"][0]["momentum_buffer"])


@pytest.mark.parametrize("kwargs, error", [(dict(rho=-0.1), ValueError), (dict(interval=0), ValueError),
                                           (dict(interval=1.5), TypeError), (dict(epsilon="x"), TypeError)])
def test_bad_hyperparameters_are_refused(kwargs, error):
    with pytest.raises(error):
        SAM(**kwargs)


def test_a_step_without_a_closure_is_refused_with_the_fix():
    model, _, _ = _regression()
    with pytest.raises(RuntimeError, match="needs a closure"):
        SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1)).step()


def test_the_trainer_wraps_the_optimizer_after_load_and_traces_both_passes():
    trainer = make_trainer(algorithms=[SAM(rho=0.05)], max_duration="2ba", trace="all")
    assert isinstance(trainer.state.optimizers[0], SAMOptimizer)
    trainer.fit()
    events = trainer.trace.events
    batch = events[events["batch"] == 0]
    per_call = batch.groupby("closure_call")["event"].apply(list)
    assert sorted(per_call.index) == [0, 1]
    inner = ["before_train_batch", "before_forward", "after_forward", "before_loss", "after_loss",
             "before_backward", "after_backward", "after_train_batch"]
    for call in (0, 1):
        assert [e for e in per_call[call] if e in inner] == inner
    assert (events.loc[events["event"] == "batch_end", "closure_call"] == 0).all()
    assert trainer.state.timestamp.batch == 2


def test_the_second_pass_sees_the_batch_the_first_pass_saw():
    """The closure restores the batch before each pass: MixUp mixes the batch as it came (not the
    mixed one again), Selective Backprop's pruned batch is pruned once, LabelSmoothing smooths the
    given targets once: both passes see batches of one size and the loss is finite."""
    seen = {}

    def record(state):
        seen.setdefault(state.timestamp.batch, []).append((state.closure_call, state.batch[0].clone()))

    algorithms = [SAM(), SelectiveBackprop(start=0.0, end=1.0, keep=0.5, interrupt=0, scale_factor=1), MixUp(alpha=0.2),
                  LabelSmoothing(0.1), OnEvent(Event.BEFORE_TRAIN_BATCH, record)]
    trainer = make_trainer(algorithms=algorithms, max_duration="2ba", seed=1)
    trainer.fit()
    for calls in seen.values():
        assert [call for call, _ in calls] == [0, 1]
        torch.testing.assert_close(calls[0][1], calls[1][1])  # the same batch, before MixUp mixes it
        assert len(calls[0][1]) == 4  # pruned to half of 8 once, not twice
    assert torch.isfinite(torch.tensor(trainer.metrics["value"].to_numpy(dtype=float))).all()


def test_sam_under_fp16_autocast_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="amp_bf16"):
        SAM().apply(Event.AFTER_LOAD, type("S", (), {"precision": "amp_fp16", "optimizers": []})(), None)


def test_the_plan_and_the_order_preview_say_the_closure_events_run_twice_a_step():
    from composer_lab.lab import Control, OrderPreview

    trainer = make_trainer(algorithms=[SAM(), LabelSmoothing(0.1)], max_duration="2ba")
    closure_events = {e for e in Event if e.in_closure}
    assert closure_events == {Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS,
                              Event.AFTER_LOSS, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH}
    assert {e: trainer.engine.runs_per_step(e) for e in (Event.BEFORE_LOSS, Event.BATCH_END)} == {
        Event.BEFORE_LOSS: 2, Event.BATCH_END: 1}
    preview = OrderPreview(Control(trainer))
    row = next(r for r in preview.table.value.split("<tr>") if "<code>before_loss</code>" in r)
    assert "×2" in row and "LabelSmoothing" in row
    plain = make_trainer(algorithms=[LabelSmoothing(0.1)], max_duration="2ba")
    assert plain.engine.runs_per_step(Event.BEFORE_LOSS) == 1
    assert "×" not in OrderPreview(Control(plain)).table.value
