"""The optimizer step through a closure (issue 46, Composer's contract): an optimizer that calls
the closure twice a step (as SAM does) trains the batch twice, each call numbered in
``state.closure_call``, and the algorithms stay right under it; the optimizers exist at INIT;
``state.schedulers`` is read at every step."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from composer_lab import Event
from composer_lab.algorithms import CutMix, GradientClipping, LabelSmoothing, MixUp, SelectiveBackprop
from composer_lab.trainer.closure import LOSS_KEY, uses_closures

from tests.trainer.helpers import OnEvent, make_trainer, tiny_model

LR = 0.05


class TwiceSGD(torch.optim.SGD):
    """SGD whose step calls the closure twice, as SAM does (the first without the DDP all-reduce,
    the second with a ``loss_dict`` of its own, so it is not logged); it steps with the second
    call's gradients. At the same weights those equal the first call's: it trains as SGD does."""

    def __init__(self, params, amp: bool = False) -> None:
        super().__init__(params, lr=LR, momentum=0.9)
        self._step_supports_amp_closure = amp
        self.second_losses: list = []

    def step(self, closure=None):
        with torch.enable_grad():
            first = closure(ddp_sync=False)
            second: dict = {}
            if closure(loss_dict=second) is None:  # (a fp16 GradScaler found infinities: no update)
                return first
        self.second_losses.append(second[LOSS_KEY])
        super().step()
        return first


def _images(n: int = 12) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 1, 4, 4, generator=gen), torch.randint(0, 3, (n,), generator=gen)),
                      batch_size=4)


def _image_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))


ALGORITHMS = {
    "none": lambda: [],
    "label_smoothing": lambda: [LabelSmoothing(0.1)],
    "gradient_clipping": lambda: [GradientClipping("norm", 0.05)],
    "selective_backprop": lambda: [SelectiveBackprop(start=0.0, end=1.0, keep=0.5, scale_factor=1.0)],
    "mixup": lambda: [MixUp(0.2)],
    "cutmix": lambda: [CutMix(1.0)],
}


def _fit(optimizer_class, algorithms: str, **kwargs):
    model, loader = (_image_model(), _images()) if algorithms in ("mixup", "cutmix") else (tiny_model(), None)
    extra = {"train_dataloader": loader} if loader is not None else {}
    trainer = make_trainer(model=model, optimizers=optimizer_class(model.parameters()),
                           algorithms=ALGORITHMS[algorithms](), max_duration="3ba", **extra, **kwargs)
    trainer.fit()
    return trainer


@pytest.mark.parametrize("algorithms", list(ALGORITHMS))
def test_a_closure_called_twice_trains_as_one_call_does(algorithms):
    """The second call starts from the batch as the dataloader gave it (not mixed, smoothed or
    selected twice) at the same weights: the weights come out exactly as with plain SGD."""
    once = _fit(lambda params: torch.optim.SGD(params, lr=LR, momentum=0.9), algorithms)
    twice = _fit(TwiceSGD, algorithms)
    for a, b in zip(once.state.model.parameters(), twice.state.model.parameters()):
        assert torch.equal(a, b)
    losses = twice.metrics.query("name == 'loss/train'")
    assert list(losses["batch"]) == [0, 1, 2], "one logged loss a batch: the second call's is not logged"
    assert losses["value"].tolist() == once.metrics.query("name == 'loss/train'")["value"].tolist()
    assert len(twice.state.optimizers[0].second_losses) == 3


def test_each_call_of_the_closure_is_numbered_and_runs_the_batch_events():
    seen = []
    probes = [OnEvent(event, lambda state, e=event: seen.append((e.value, state.closure_call)))
              for event in (Event.BATCH_START, Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD,
                            Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH, Event.BATCH_END)]
    model = tiny_model()
    trainer = make_trainer(model=model, optimizers=TwiceSGD(model.parameters()), algorithms=probes,
                           max_duration="1ba")
    trainer.fit()
    call = [("before_train_batch", None), ("before_forward", None), ("after_backward", None),
            ("after_train_batch", None)]
    assert seen == [("batch_start", 0), *[(e, 0) for e, _ in call], *[(e, 1) for e, _ in call],
                    ("batch_end", 0)]
    assert trainer.state.closure_call == 0


def test_interpolating_mixup_mixes_each_call_from_the_dataloaders_batch():
    """MixUp(interpolate_loss=True) mixes at BEFORE_FORWARD, inside the closure: each call gets the
    batch as the dataloader gave it, and mixes it afresh."""
    inputs = []
    probe = OnEvent(Event.BEFORE_TRAIN_BATCH, lambda state: inputs.append(state.batch[0].clone()))
    model = _image_model()
    trainer = make_trainer(model=model, optimizers=TwiceSGD(model.parameters()), train_dataloader=_images(),
                           algorithms=[probe, MixUp(0.2, interpolate_loss=True)], max_duration="1ba")
    trainer.fit()
    first_batch = next(iter(_images()))[0]
    assert len(inputs) == 2 and all(torch.equal(x, first_batch) for x in inputs)


def test_the_optimizers_exist_at_init_so_an_algorithm_can_replace_and_schedule_them():
    """The default optimizer is there when INIT fires; the optimizer an INIT algorithm puts in its
    place is the one that steps (its closure runs twice), with the scheduler set there."""
    at_init = []

    def take_over(state):
        at_init.append([type(o).__name__ for o in state.optimizers])
        state.optimizers = [TwiceSGD(state.model.parameters())]
        state.schedulers = [torch.optim.lr_scheduler.LambdaLR(state.optimizers[0], lambda step: 0.5 ** step)]

    calls = []
    trainer = make_trainer(algorithms=[OnEvent(Event.INIT, take_over),
                                       OnEvent(Event.BEFORE_FORWARD, lambda s: calls.append(s.closure_call))],
                           max_duration="2ba")
    trainer.fit()
    assert at_init == [["SGD"]], "the trainer's default SGD exists at INIT"
    assert calls == [0, 1, 0, 1]
    assert trainer.metrics.query("name == 'lr'")["value"].tolist() == pytest.approx([LR / 2, LR / 4])


def test_schedulers_are_read_at_every_step():
    """An algorithm replacing ``state.schedulers`` mid-run (as SWA does) takes over the schedule."""
    def swap(state):
        optimizer = state.optimizers[0]
        state.schedulers = [torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.1)]

    trainer = make_trainer(algorithms=[OnEvent(Event.BATCH_END, lambda s: s.timestamp.batch == 2 and swap(s))],
                           max_duration="4ba")
    trainer.fit()
    assert trainer.metrics.query("name == 'lr'")["value"].tolist() == pytest.approx([LR, LR, LR * 0.1, LR * 0.1])


def test_a_layer_replaced_at_init_trains_with_the_default_optimizer():
    def replace(state):
        state.model[3] = nn.Linear(16, 3)

    trainer = make_trainer(algorithms=[OnEvent(Event.INIT, replace)], max_duration="2ba")
    new = trainer.state.model[3].weight.detach().clone()
    held = {id(p) for group in trainer.state.optimizers[0].param_groups for p in group["params"]}
    assert held == {id(p) for p in trainer.state.model.parameters()}, "nothing orphaned, nothing stale"
    trainer.fit()
    assert not torch.equal(trainer.state.model[3].weight, new), "the new layer trained"


def test_a_layer_replaced_at_init_outside_the_users_optimizer_is_warned_about():
    def replace(state):
        state.model[3] = nn.Linear(16, 3)

    model = tiny_model()
    with pytest.warns(UserWarning, match=r"\['3.weight', '3.bias'\] are in no optimizer"):
        make_trainer(model=model, optimizers=torch.optim.SGD(model.parameters(), lr=LR),
                     algorithms=[OnEvent(Event.INIT, replace)])


def test_fp16_closures_only_for_optimizers_that_support_them():
    scaler = torch.amp.GradScaler("cpu")
    sgd = torch.optim.SGD(tiny_model().parameters(), lr=LR)
    assert uses_closures([sgd], None)
    assert not uses_closures([sgd], scaler)
    assert uses_closures([TwiceSGD(tiny_model().parameters(), amp=True)], scaler)


def test_fp16_with_an_optimizer_that_supports_amp_closures_calls_it_twice():
    calls = []
    model = tiny_model()
    trainer = make_trainer(model=model, optimizers=TwiceSGD(model.parameters(), amp=True), precision="amp_fp16",
                           algorithms=[OnEvent(Event.AFTER_TRAIN_BATCH, lambda s: calls.append(s.closure_call))],
                           max_duration="2ba")
    before = [p.detach().clone() for p in model.parameters()]
    trainer.fit()
    assert calls == [0, 1, 0, 1]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), "it trained"


def test_several_optimizers_train_the_batch_once_and_each_steps_on_its_gradients():
    """Each optimizer steps through the closure; the batch's forward and backward run once for
    all of them (Composer runs them again for each), so two SGDs over halves of the model train
    as one SGD over all of it."""
    def fit(split: bool):
        model = tiny_model()
        first, second = list(model[0].parameters()), list(model[3].parameters())
        optimizers = ([torch.optim.SGD(first, lr=LR, momentum=0.9), torch.optim.SGD(second, lr=LR, momentum=0.9)]
                      if split else [torch.optim.SGD(first + second, lr=LR, momentum=0.9)])
        forwards = OnEvent(Event.BEFORE_FORWARD)
        trainer = make_trainer(model=model, optimizers=optimizers, algorithms=[forwards], max_duration="3ba")
        trainer.fit()
        return model, forwards.calls

    (split, calls), (whole, _) = fit(True), fit(False)
    assert calls == 3, "one forward a batch"
    for a, b in zip(split.parameters(), whole.parameters()):
        assert torch.equal(a, b)


def test_the_closure_returns_the_loss_as_a_tensor_without_a_host_read():
    returned = []

    class Keep(torch.optim.SGD):
        def step(self, closure=None):
            with torch.enable_grad():
                returned.append(closure())
            return super().step()

    model = tiny_model()
    make_trainer(model=model, optimizers=Keep(model.parameters(), lr=LR), max_duration="1ba").fit()
    assert isinstance(returned[0], torch.Tensor) and not returned[0].requires_grad
