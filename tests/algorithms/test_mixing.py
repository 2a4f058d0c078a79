"""MixUp and CutMix composed with row selection: every kept row trains towards the targets of
the rows its input was made from, in every order and with microbatches.

The inputs say where they came from: example ``k`` of a batch is an image whose channel ``k``
is 1 and every other channel 0. However the rows are mixed (blended, boxes pasted, twice),
the mean of channel ``k`` over a row's pixels is the share of example ``k`` in that row, so
the row's true target is ``sum_k share_k * one_hot(label_k)`` and its true loss
``sum_k share_k * CE(out, label_k)``, read from the input the model saw, whatever the
algorithms did.
"""

from __future__ import annotations

import itertools
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import CutMix, LabelSmoothing, MixUp, RandomSubset, SelectiveBackprop
from composer_lab.core import Algorithm, Event

from algo_helpers import make_state

Trainer = pytest.importorskip("composer_lab.trainer").Trainer

ROWS, CLASSES, SIDE = 16, 4, 6


def label_of(k: torch.Tensor) -> torch.Tensor:
    """The class of the example in row ``k`` of a batch."""
    return (k * 3 + 1) % CLASSES


def row_identifying_loader(batches: int = 2) -> torch.utils.data.DataLoader:
    n = ROWS * batches
    position = torch.arange(n) % ROWS
    images = F.one_hot(position, ROWS).float()[:, :, None, None].expand(n, ROWS, SIDE, SIDE).contiguous()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, label_of(position)), batch_size=ROWS)


def shares(inputs: torch.Tensor) -> torch.Tensor:
    """(rows, ROWS): the share of each source example in each row."""
    return inputs.mean(dim=(2, 3))


def true_targets(inputs: torch.Tensor) -> torch.Tensor:
    return shares(inputs) @ F.one_hot(label_of(torch.arange(ROWS)), CLASSES).float()


def true_loss(inputs: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
    per_class = -outputs.log_softmax(1) @ F.one_hot(label_of(torch.arange(ROWS)), CLASSES).float().T
    return (shares(inputs) * per_class).sum(1).mean()


class PoolNet(nn.Module):
    """A 1x1 convolution and a global average pool: works on any image size (SB downsamples)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(ROWS, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean(dim=(2, 3))


class Recorder(Algorithm):
    """At BEFORE_BACKWARD, after everything else: the rows, targets, outputs and loss trained on."""

    events = frozenset({Event.BEFORE_BACKWARD})

    def __init__(self) -> None:
        self.seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def match(self, event, state) -> bool:
        return True

    def apply(self, event, state, logger) -> None:
        self.seen.append((state.batch[0].detach(), state.batch[1].detach(), state.outputs.detach(),
                          state.loss.detach()))


def selectors():
    return [SelectiveBackprop(start=0.0, end=1.0, keep=0.5, interrupt=0),
            RandomSubset(start=0.0, end=1.0, keep=0.5, interrupt=0)]


def run(algorithms: list, microbatch: Optional[int], ordered: bool = True) -> Recorder:
    """Train 2 batches with ``algorithms`` in exactly this order at every event (no passes)."""
    recorder = Recorder()
    torch.manual_seed(0)
    trainer = Trainer(PoolNet(), row_identifying_loader(), "2ba", loss_fn=F.cross_entropy, seed=1, progress_bar=False,
                      algorithms=[*algorithms, recorder], device_train_microbatch_size=microbatch)
    if ordered:
        trainer.engine.passes = []
    trainer.fit()
    return recorder


MIXERS = {"MixUp": lambda: [MixUp(alpha=1.0)], "CutMix": lambda: [CutMix(alpha=1.0)],
          "MixUp+CutMix": lambda: [MixUp(alpha=1.0), CutMix(alpha=1.0)]}


@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("selector", [0, 1], ids=["SelectiveBackprop", "RandomSubset"])
@pytest.mark.parametrize("mixers", MIXERS)
def test_every_order_of_mixing_and_selection_trains_each_row_on_its_own_targets(mixers, selector, microbatch):
    for order in itertools.permutations([*MIXERS[mixers](), selectors()[selector]]):
        recorder = run(list(order), microbatch)
        names = [type(a).__name__ for a in order]
        assert len(recorder.seen) == 2 * (2 if microbatch else 1), names
        for inputs, targets, outputs, loss in recorder.seen:
            assert inputs.shape[0] == (4 if microbatch else 8), names  # half of 16 kept
            assert torch.allclose(loss, true_loss(inputs, outputs), atol=1e-5), names
            assert torch.allclose(targets, true_targets(inputs), atol=1e-6), names
        assert any((shares(seen[0]).max(1).values < 1).any() for seen in recorder.seen), names  # rows were mixed


@pytest.mark.parametrize("microbatch", [None, 4])
@pytest.mark.parametrize("selector", [0, 1], ids=["SelectiveBackprop", "RandomSubset"])
@pytest.mark.parametrize("mixer", ["MixUp", "CutMix"])
def test_interpolated_loss_pairs_each_row_with_its_partner_in_every_order(mixer, selector, microbatch):
    mixing = {"MixUp": MixUp, "CutMix": CutMix}[mixer](alpha=1.0, interpolate_loss=True)
    for order in itertools.permutations([mixing, selectors()[selector]]):
        recorder = run(list(order), microbatch)
        assert any((shares(seen[0]).max(1).values < 1).any() for seen in recorder.seen)
        for inputs, targets, outputs, loss in recorder.seen:
            assert targets.dtype == torch.long  # the loss saw class indices
            assert torch.allclose(loss, true_loss(inputs, outputs), atol=1e-5)


@pytest.mark.parametrize("mixer", [MixUp, CutMix])
def test_evaluation_after_mixed_training_sees_class_targets(mixer):
    loader = row_identifying_loader()
    trainer = Trainer(PoolNet(), loader, "2ba", loss_fn=F.cross_entropy, eval_dataloader=loader,
                      algorithms=[mixer(alpha=1.0)], progress_bar=False)
    trainer.fit()
    evaluated = trainer.metrics.query("name == 'metrics/eval/Accuracy'")
    assert len(evaluated) == 1 and 0 <= evaluated.value.item() <= 1
    assert trainer.metrics.query("name == 'loss/eval'").value.item() > 0


def test_label_smoothing_after_mixing_smooths_the_mixed_targets():
    recorder = run([MixUp(alpha=1.0), RandomSubset(start=0.0, end=1.0, interrupt=0), LabelSmoothing(0.2)], None,
                   ordered=False)
    for inputs, targets, outputs, loss in recorder.seen:
        smoothed = true_targets(inputs) * 0.8 + 0.2 / CLASSES
        assert torch.allclose(loss, F.cross_entropy(outputs, smoothed), atol=1e-5)
        assert torch.allclose(targets, true_targets(inputs), atol=1e-6)  # restored after the loss


# -- the functional forms -------------------------------------------------------------------

def test_mixup_batch_weighs_the_permuted_examples_by_mixing_as_composer(images):
    x, y = images
    perm = torch.randperm(16)
    mixed, y_perm, mixing = cf.mixup_batch(x, y, mixing=0.3, indices=perm)
    assert torch.allclose(mixed, 0.7 * x + 0.3 * x[perm], atol=1e-6)
    assert torch.equal(y_perm, y[perm]) and mixing == 0.3


def test_mixup_draws_the_smaller_side_of_a_beta_draw(images):
    draws = [cf.mixup_batch(*images, alpha=0.2, generator=torch.Generator().manual_seed(s))[2] for s in range(200)]
    assert max(draws) <= 0.5  # min(z, 1 - z): each example stays the larger part of itself
    assert sum(d < 0.1 for d in draws) > 100  # Beta(0.2, 0.2) piles up near the edges
    again = [cf.mixup_batch(*images, alpha=0.2, generator=torch.Generator().manual_seed(s))[2] for s in range(200)]
    assert draws == again
    with pytest.raises(ValueError, match="alpha"):
        MixUp(alpha=0)
    with pytest.raises(TypeError, match="floating-point"):
        cf.mixup_batch(torch.ones(4, 2, dtype=torch.long), torch.zeros(4))


def test_cutmix_pastes_the_box_from_the_permuted_images(images):
    x, y = images
    perm = torch.randperm(16)
    mixed, y_perm, share, box = cf.cutmix_batch(x, y, bbox=(2, 6, 1, 5), indices=perm)
    assert box == (2, 6, 1, 5) and share == pytest.approx(1 - 16 / 64)
    assert torch.equal(mixed[:, :, 2:6, 1:5], x[perm][:, :, 2:6, 1:5])
    outside = torch.ones(8, 8, dtype=torch.bool)
    outside[2:6, 1:5] = False
    assert torch.equal(mixed[:, :, outside], x[:, :, outside])
    assert torch.equal(y_perm, y[perm])


def test_cutmix_share_matches_the_box_area(images):
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        _, _, share, (top, bottom, left, right) = cf.cutmix_batch(*images, generator=gen)
        assert share == pytest.approx(1 - (bottom - top) * (right - left) / 64)
    with pytest.raises(ValueError, match="N, C, H, W"):
        cf.cutmix_batch(torch.randn(4, 8), torch.zeros(4))


def test_functional_cutmix_of_the_seeds_returns_inputs_and_their_mixed_targets():
    x, y = row_identifying_loader(1).dataset.tensors
    data, target = cf.cutmix(x, y, alpha=1.0, num_classes=CLASSES, generator=torch.Generator().manual_seed(3))
    assert (shares(data).max(1).values < 1).any()
    assert torch.allclose(target, true_targets(data), atol=1e-6)
    with pytest.raises(ValueError, match="need num_classes"):
        cf.cutmix(x, y)
    soft = F.one_hot(y, CLASSES).float()  # per-class values need no num_classes
    data, target = cf.cutmix(x, soft, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(target, true_targets(data), atol=1e-6)


def test_cutmix_pastes_segmentation_targets_like_the_images():
    x = torch.arange(4.0)[:, None, None, None].expand(4, 1, 8, 8).contiguous()
    y = torch.arange(4)[:, None, None].expand(4, 8, 8).contiguous()  # a class per pixel
    data, target = cf.cutmix(x, y, generator=torch.Generator().manual_seed(0))
    assert torch.equal(target, data[:, 0].long())  # each pixel's class is the source of its pixel


# -- the algorithms, alone -----------------------------------------------------------------

def test_reading_the_class_count_from_the_model_changes_nothing():
    model = nn.Sequential(nn.Conv2d(ROWS, 8, 1), nn.BatchNorm2d(8), nn.Dropout(0.5), nn.Flatten(),
                          nn.Linear(8 * SIDE * SIDE, CLASSES))
    state, engine = make_state(model, row_identifying_loader(1).dataset.tensors, [MixUp(alpha=1.0)])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[1].shape == (ROWS, CLASSES)
    assert torch.allclose(state.batch[1], true_targets(state.batch[0]), atol=1e-6)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_model_whose_probe_forward_fails_asks_for_num_classes_and_is_left_as_it_was():
    class TrainingOnly(PoolNet):
        def forward(self, x):
            if not self.training:
                raise RuntimeError("this model runs in training mode only")
            return super().forward(x)

    batch = row_identifying_loader(1).dataset.tensors
    model = TrainingOnly()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state, engine = make_state(model, batch, [CutMix(alpha=1.0)])
    with pytest.raises(ValueError, match=r"CutMix could not read the number of classes .*RuntimeError: this model "
                                         r"runs in training mode only.*pass CutMix\(num_classes=...\)"):
        engine.run_event(Event.AFTER_DATALOADER)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    state, engine = make_state(TrainingOnly(), batch, [CutMix(alpha=1.0, num_classes=CLASSES)])
    engine.run_event(Event.AFTER_DATALOADER)
    assert torch.allclose(state.batch[1], true_targets(state.batch[0]), atol=1e-6)


def test_integer_one_hot_targets_are_mixed_as_values():
    x, y = row_identifying_loader(1).dataset.tensors
    state, engine = make_state(PoolNet(), (x, F.one_hot(y, CLASSES)), [MixUp(alpha=1.0)])
    engine.run_event(Event.AFTER_DATALOADER)
    assert torch.allclose(state.batch[1], true_targets(state.batch[0]), atol=1e-6)


def test_cutmix_algorithm_pastes_segmentation_targets():
    x = torch.arange(4.0)[:, None, None, None].expand(4, 1, 8, 8).contiguous()
    y = torch.arange(4)[:, None, None].expand(4, 8, 8).contiguous()
    state, engine = make_state(nn.Conv2d(1, 4, 1), (x, y), [CutMix(alpha=1.0)])
    engine.run_event(Event.AFTER_DATALOADER)
    assert torch.equal(state.batch[1], state.batch[0][:, 0].long())


def test_cutmix_refuses_to_interpolate_the_loss_of_segmentation_targets():
    x, y = torch.rand(4, 1, 8, 8), torch.zeros(4, 8, 8, dtype=torch.long)
    state, engine = make_state(nn.Conv2d(1, 4, 1), (x, y), [CutMix(interpolate_loss=True)])
    with pytest.raises(ValueError, match="use CutMix\\(interpolate_loss=False\\), which pastes the box"):
        engine.run_event(Event.BEFORE_FORWARD)


def test_interpolate_loss_is_composers_argument_off_by_default():
    for cls in (MixUp, CutMix):
        assert cls().interpolate_loss is False and cls(interpolate_loss=True).interpolate_loss is True
        assert cls.mixes_examples is True
        assert cls().events == {Event.AFTER_DATALOADER}
        assert cls(interpolate_loss=True).events == {Event.BEFORE_FORWARD, Event.BEFORE_BACKWARD}
    with pytest.raises(TypeError, match="interpolate_loss must be True or False"):
        MixUp(interpolate_loss="yes")
    switched = MixUp()
    switched.interpolate_loss = True  # as the lab's hyperparameter widget does
    assert switched.events == {Event.BEFORE_FORWARD, Event.BEFORE_BACKWARD}


def test_interpolated_loss_equals_the_soft_target_loss_for_cross_entropy():
    """Composer's test: for cross-entropy, interpolating the loss and the targets agree."""
    losses = []
    for interpolate in (False, True):
        recorder = run([MixUp(alpha=1.0, interpolate_loss=interpolate)], None)
        losses.append(torch.stack([loss for *_, loss in recorder.seen]))
    assert torch.allclose(*losses, atol=1e-6)


def test_interpolated_loss_calls_a_models_own_loss_with_the_partner_targets():
    class OwnLoss(PoolNet):  # Composer's form: forward(batch) and loss(outputs, batch)
        def forward(self, batch):
            return super().forward(batch[0])

        def loss(self, outputs, batch, reduction="mean"):
            assert batch[1].dtype == torch.long  # class indices, the form this loss takes
            return F.cross_entropy(outputs, batch[1], reduction=reduction)

    recorder = Recorder()
    torch.manual_seed(0)
    trainer = Trainer(OwnLoss(), row_identifying_loader(), "2ba", seed=1, progress_bar=False,
                      algorithms=[CutMix(alpha=1.0, interpolate_loss=True), recorder])
    trainer.fit()
    assert any((shares(seen[0]).max(1).values < 1).any() for seen in recorder.seen)
    for inputs, targets, outputs, loss in recorder.seen:
        assert torch.allclose(loss, true_loss(inputs, outputs), atol=1e-5)
        assert torch.equal(targets, label_of(torch.arange(ROWS)))  # the batch's own targets are back
