"""The training step: microbatch gradients, sample counts, model forms, precision on CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from composer_lab import Event

from tests.trainer.helpers import OnEvent, make_trainer, tiny_data, tiny_loader, tiny_model


def _grads_after_one_batch(microbatch_size):
    grads = []
    record = OnEvent(Event.AFTER_TRAIN_BATCH,
                     lambda state: grads.append([p.grad.clone() for p in state.model.parameters()]))
    trainer = make_trainer(train_dataloader=tiny_loader(8, 8), max_duration="1ba", algorithms=[record],
                           device_train_microbatch_size=microbatch_size)
    trainer.fit()
    return grads[0], trainer.metrics


@pytest.mark.parametrize("size", [1, 3, 4, 7])
def test_microbatch_gradients_equal_whole_batch_gradients(size):
    whole, whole_metrics = _grads_after_one_batch(None)
    split, split_metrics = _grads_after_one_batch(size)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    loss = lambda m: m.loc[m["name"] == "loss/train", "value"].item()  # noqa: E731
    assert loss(split_metrics) == pytest.approx(loss(whole_metrics), rel=1e-5)


def test_microbatch_size_larger_than_batch_is_one_microbatch():
    trainer = make_trainer(train_dataloader=tiny_loader(8, 8), max_duration="1ba", device_train_microbatch_size=64)
    trainer.fit()
    assert (trainer.trace.events["event"] == "before_forward").sum() == 1


def test_sample_count_is_the_batch_trained_on():
    """An algorithm that halves the batch at AFTER_DATALOADER (as Selective Backprop does)."""
    def halve(state):
        x, y = state.batch
        state.batch = (x[: len(x) // 2], y[: len(y) // 2])

    trainer = make_trainer(train_dataloader=tiny_loader(24, 8), max_duration="1ep",
                           algorithms=[OnEvent(Event.AFTER_DATALOADER, halve)])
    trainer.fit()
    assert trainer.state.timestamp.sample == 12
    assert trainer.state.timestamp.batch == 3


def test_batch_is_on_device_at_after_dataloader():
    seen = []
    trainer = make_trainer(max_duration="1ba",
                           algorithms=[OnEvent(Event.AFTER_DATALOADER, lambda s: seen.append(s.batch[0].device))])
    trainer.fit()
    assert seen == [trainer.state.device]


def test_state_loss_fn_is_the_argument():
    trainer = make_trainer()
    assert trainer.state.loss_fn is nn.functional.cross_entropy


class OwnLoss(nn.Module):
    """The object form: forward(batch) and loss(outputs, batch), with dict batches."""

    def __init__(self):
        super().__init__()
        self.net = tiny_model()

    def forward(self, batch):
        return self.net(batch["input"])

    def loss(self, outputs, batch):
        return nn.functional.cross_entropy(outputs, batch["target"])


def _dict_loader(n=16, batch_size=8):
    data = tiny_data(n)
    return DataLoader([{"input": x, "target": y} for x, y in data], batch_size=batch_size)


def test_object_model_with_dict_batches_trains_and_evaluates():
    trainer = make_trainer(model=OwnLoss(), loss_fn=None, train_dataloader=_dict_loader(),
                           eval_dataloader=_dict_loader(), device_train_microbatch_size=4)
    assert trainer.state.loss_fn is None
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))
    assert set(trainer.metrics["name"]) >= {"loss/train", "loss/eval", "metrics/eval/Accuracy"}


def test_object_and_plain_forms_train_identically():
    plain = make_trainer(train_dataloader=_dict_loader(), max_duration="2ba")
    plain.fit()
    own = make_trainer(model=OwnLoss(), loss_fn=None, train_dataloader=_dict_loader(), max_duration="2ba")
    own.fit()
    for a, b in zip(plain.state.model.parameters(), own.state.model.net.parameters()):
        torch.testing.assert_close(a, b)


def test_default_optimizer_is_sgd_with_momentum():
    optimizer = make_trainer().state.optimizers[0]
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9


def test_user_optimizer_and_scheduler_are_used():
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    trainer = make_trainer(model=model, optimizers=optimizer, schedulers=scheduler, max_duration="3ba")
    trainer.fit()
    assert trainer.state.optimizers == [optimizer]
    lrs = trainer.metrics.query("name == 'lr'")["value"].tolist()
    assert lrs == pytest.approx([0.005, 0.0025, 0.00125])  # stepped after every batch


def test_amp_bf16_runs_forward_under_autocast_on_cpu():
    dtypes = []
    trainer = make_trainer(precision="amp_bf16", max_duration="1ba",
                           algorithms=[OnEvent(Event.AFTER_FORWARD, lambda s: dtypes.append(s.outputs.dtype))])
    trainer.fit()
    assert dtypes == [torch.bfloat16]
    assert trainer.scaler is None
    assert all(p.dtype == torch.float32 for p in trainer.state.model.parameters())


def test_amp_fp16_uses_a_grad_scaler():
    trainer = make_trainer(precision="amp_fp16", max_duration="2ba")
    assert isinstance(trainer.scaler, torch.amp.GradScaler)
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    assert trainer.scaler.get_scale() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))


class _SecondOrder(OnEvent):
    """Asks for a backward graph while ``on``: the answer may change between batches."""

    def __init__(self) -> None:
        super().__init__(Event.FIT_START)
        self.on = False

    @property
    def backwards_create_graph(self) -> bool:
        return self.on


class _AlwaysSecondOrder(OnEvent):
    backwards_create_graph = True  # (a class attribute, not a property)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_builds_a_graph_when_an_algorithm_asks_even_one_added_mid_run():
    """The algorithms that may ask are worked out again when the list changes (assigned or edited),
    and asked every batch."""
    second, always = _SecondOrder(), _AlwaysSecondOrder(Event.FIT_START)
    graphs = []

    def change(state):
        batch = state.timestamp.batch  # (at BATCH_END the batch is applied: the batches trained so far)
        if batch == 1:
            state.algorithms.append(second)  # an edit: asked from the next batch on
        elif batch == 2:
            second.on = True  # the same list, a new answer
        elif batch == 3:
            second.on = False
        elif batch == 4:
            state.algorithms = [*state.algorithms[:2], always]  # a new list

    record = OnEvent(Event.AFTER_BACKWARD, lambda s: graphs.append(next(s.model.parameters()).grad.requires_grad))
    trainer = make_trainer(train_dataloader=tiny_loader(48, 8), max_duration="6ba",
                           algorithms=[record, OnEvent(Event.BATCH_END, change)])
    trainer.fit()
    assert graphs == [False, False, True, False, True, True]
