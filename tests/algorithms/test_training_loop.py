"""GradientClipping, EMA, LayerFreezing, ProgressiveResizing, RandAugment."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import composer_lab.functional as cf
from composer_lab.algorithms import EMA, GradientClipping, LayerFreezing, ProgressiveResizing, RandAugment
from composer_lab.algorithms.progressive_resizing import scale_schedule
from composer_lab.algorithms.randaugment import RandAugmentTransform
from composer_lab.core import Event, State, Engine

from algo_helpers import TinyCNN, at_batch, make_state

Trainer = pytest.importorskip("composer_lab.trainer").Trainer


def model_with_grads(scale: float = 100.0) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    (model(torch.randn(16, 4)).sum() * scale).backward()
    return model


def test_norm_clipping_bounds_the_global_norm():
    model = model_with_grads()
    cf.apply_gradient_clipping(model, "norm", 0.5)
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert norm == pytest.approx(0.5, rel=1e-4)


def test_value_clipping_bounds_each_element():
    model = model_with_grads()
    cf.apply_gradient_clipping(model, "value", 0.01)
    assert max(p.grad.abs().max().item() for p in model.parameters()) == pytest.approx(0.01)


def test_adaptive_clipping_bounds_each_unit_relative_to_its_weights():
    model = model_with_grads()
    cf.apply_gradient_clipping(model, "adaptive", 0.01)
    w = model[0].weight
    ratio = w.grad.norm(dim=1) / w.detach().norm(dim=1).clamp_min(1e-3)
    assert (ratio <= 0.01 + 1e-6).all() and ratio.max() == pytest.approx(0.01, rel=1e-4)


def test_gradient_clipping_algorithm_and_errors():
    model = model_with_grads()
    state, engine = make_state(model, None, [GradientClipping("norm", 1.0)])
    engine.run_event(Event.AFTER_TRAIN_BATCH)
    assert torch.cat([p.grad.flatten() for p in model.parameters()]).norm() == pytest.approx(1.0, rel=1e-4)
    with pytest.raises(ValueError, match="clipping_type"):
        GradientClipping("l1")
    with pytest.raises(ValueError, match="clipping_threshold"):
        GradientClipping("norm", 0)


def test_ema_averages_and_swaps_for_evaluation():
    model = nn.Linear(2, 1, bias=False)
    ema = EMA(half_life=None, smoothing=0.5)
    state, engine = make_state(model, None, [ema])
    engine.run_event(Event.FIT_START)
    start = model.weight.detach().clone()
    param = model.weight
    with torch.no_grad():
        model.weight.add_(2.0)
    engine.run_event(Event.BATCH_END)
    assert torch.allclose(ema.averages[0], start + 1.0)
    engine.run_event(Event.EVAL_BEFORE_ALL)
    assert torch.allclose(model.weight, start + 1.0) and model.weight is param
    engine.run_event(Event.EVAL_AFTER_ALL)
    assert torch.allclose(model.weight, start + 2.0)


def test_ema_swaps_are_seen_by_the_trace_as_model_changes():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8),
                                                                        torch.randint(0, 4, (8,))), batch_size=4)
    model, ema = TinyCNN(), EMA(half_life=None, smoothing=0.5)
    trainer = Trainer(model, loader, "2ba", loss_fn=nn.functional.cross_entropy, eval_dataloader=loader,
                      algorithms=[ema], progress_bar=False)
    trainer.fit()
    calls = trainer.trace.invocations.query("cls == 'EMA' and matched")
    swaps = calls[calls.event.isin(["eval_before_all", "eval_after_all"])]
    assert len(swaps) == 2 and all("model" in changed for changed in swaps.changed)
    assert not torch.equal(model.fc.weight, ema.averages[4])  # the training weights are back after the eval


def test_ema_half_life_gives_the_decay_and_errors():
    ema = EMA(half_life="10ba")
    state, engine = make_state(nn.Linear(2, 1), None, [ema])
    engine.run_event(Event.FIT_START)
    assert ema._decay ** 10 == pytest.approx(0.5)
    with pytest.raises(ValueError, match="exactly one"):
        EMA(half_life="10ba", smoothing=0.9)
    with pytest.raises(ValueError, match="smoothing"):
        EMA(half_life=None, smoothing=1.5)


def test_compute_ema_functional():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    expected = 0.9 * b.weight.detach() + 0.1 * a.weight.detach()
    cf.compute_ema(a, b, 0.9)
    assert torch.allclose(b.weight, expected)
    with pytest.raises(ValueError, match="architecture"):
        cf.compute_ema(a, nn.Linear(2, 2, bias=False), 0.9)


def test_layer_freezing_freezes_the_first_layers_progressively():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2))
    assert cf.freeze_layers(model, 0.4) == (0, 0.0)
    count, fraction = cf.freeze_layers(model, 0.75)
    assert (count, fraction) == (2, 0.5)
    assert [p.requires_grad for p in model.parameters()] == [False] * 4 + [True] * 4
    with pytest.raises(ValueError, match="freeze_start"):
        LayerFreezing(freeze_start=2)


def test_layer_freezing_algorithm_at_epoch_end():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    algo = LayerFreezing(freeze_start=0.0, freeze_level=1.0)
    state, engine = make_state(model, None, [algo], max_duration="2ba")
    at_batch(state, 2)
    engine.run_event(Event.EPOCH_END)
    assert not any(p.requires_grad for p in model.parameters()) and algo.find_unused_parameters


def test_progressive_resizing_schedule_and_batches(images):
    assert scale_schedule(0.2) == 0.5 and scale_schedule(0.65) == pytest.approx(0.75) and scale_schedule(0.85) == 1
    x, y = images
    small, same_y = cf.resize_batch(x, y, 0.5)
    assert small.shape == (16, 3, 4, 4) and same_y is y
    crop, _ = cf.resize_batch(x, y, 0.5, mode="crop", generator=torch.Generator().manual_seed(0))
    assert crop.shape == (16, 3, 4, 4)
    assert any(torch.equal(crop, x[..., i:i + 4, j:j + 4]) for i in range(5) for j in range(5))
    with pytest.raises(ValueError, match="at most 1"):
        ProgressiveResizing(delay_fraction=0.7, finetune_fraction=0.5)


def test_progressive_resizing_algorithm_follows_the_schedule(images):
    state, engine = make_state(TinyCNN(), images, [ProgressiveResizing(size_increment=2)], max_duration="10ba")
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[0].shape[-2:] == (4, 4)
    state.batch = images
    at_batch(state, 9)
    engine.run_event(Event.AFTER_DATALOADER)
    assert state.batch[0].shape[-2:] == (8, 8)


def coordinate_images(n: int = 3, side: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Images whose pixel (y, x) holds ``100 y + x``, and masks at twice their resolution whose
    pixel (Y, X) holds the image pixel it covers, ``100 (Y // 2) + X // 2``."""
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    image = (100 * ys + xs).float().expand(n, 1, side, side).contiguous()
    mask = image[:, 0].long().repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
    return image, mask


@pytest.mark.parametrize("seed", range(5))
def test_progressive_resizing_crops_targets_at_their_own_resolution(seed):
    image, mask = coordinate_images()
    crop, mask_crop = cf.resize_batch(image, mask, 0.5, mode="crop", resize_targets=True,
                                      generator=torch.Generator().manual_seed(seed))
    assert crop.shape[-2:] == (8, 8) and mask_crop.shape[-2:] == (16, 16)
    assert torch.equal(mask_crop[:, ::2, ::2], crop[:, 0].long())  # the same part of the picture
    assert torch.equal(mask_crop[:, 1::2, 1::2], crop[:, 0].long())


def test_progressive_resizing_resizes_targets_by_the_inputs_factor():
    image, mask = coordinate_images()
    small, mask_small = cf.resize_batch(image, mask, 0.5, resize_targets=True)
    assert small.shape[-2:] == (8, 8) and mask_small.shape[-2:] == (16, 16)
    assert mask_small.dtype == torch.long and torch.equal(mask_small, mask[:, ::2, ::2])
    per_class = torch.nn.functional.one_hot(mask % 7, 7).permute(0, 3, 1, 2).float()  # (N, C, 32, 32)
    _, values_small = cf.resize_batch(image, per_class, 0.5, resize_targets=True)
    assert values_small.shape == (3, 7, 16, 16)


def test_progressive_resizing_algorithm_crops_masks_with_the_images():
    image, mask = coordinate_images()
    state, engine = make_state(nn.Conv2d(1, 2, 1), (image, mask),
                               [ProgressiveResizing(mode="crop", size_increment=2, resize_targets=True)],
                               max_duration="10ba")
    engine.run_event(Event.AFTER_DATALOADER)
    crop, mask_crop = state.batch
    assert crop.shape[-2:] == (8, 8) and torch.equal(mask_crop[:, ::2, ::2], crop[:, 0].long())


def test_randaugment_changes_images_and_keeps_shape():
    gen = torch.Generator().manual_seed(0)
    img = torch.rand(3, 16, 16)
    outs = [cf.randaugment_image(img, severity=9, depth=2, generator=gen) for _ in range(10)]
    assert all(o.shape == img.shape for o in outs)
    assert sum(not torch.allclose(o, img) for o in outs) >= 5
    assert cf.randaugment()(torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8)).dtype == torch.uint8
    with pytest.raises(ValueError, match="severity"):
        RandAugment(severity=11)
    with pytest.raises(ValueError, match="augmentation_set"):
        cf.randaugment(augmentation_set="most")


def test_randaugment_defaults_are_composers():
    """Composer's RandAugment, RandAugmentTransform and randaugment_image apply 2 augmentations of severity 9."""
    assert (RandAugment().severity, RandAugment().depth) == (9, 2)
    assert (cf.randaugment().severity, cf.randaugment().depth) == (9, 2)
    assert inspect.signature(cf.randaugment_image).parameters["depth"].default == 2


def test_randaugment_algorithm_inserts_its_transform_at_fit_start_once():
    class DS(torch.utils.data.Dataset):
        transform = None

        def __len__(self):
            return 2

        def __getitem__(self, i):
            return self.transform(torch.rand(3, 8, 8)), 0

    dataset = DS()
    loader = torch.utils.data.DataLoader(dataset, batch_size=2)
    algorithm = RandAugment()
    assert algorithm.events == frozenset({Event.FIT_START}) and algorithm.writes == frozenset()
    state = State(nn.Linear(2, 2), "1ep", dataloader=loader, algorithms=[algorithm])
    engine = Engine(state)
    engine.run_event(Event.INIT)
    assert dataset.transform is None, "nothing is inserted before FIT_START"
    engine.run_event(Event.FIT_START)
    assert isinstance(dataset.transform, RandAugmentTransform)
    engine.run_event(Event.FIT_START)
    assert isinstance(dataset.transform, RandAugmentTransform), "a second fit inserts nothing more"
    assert algorithm.inserted() == [f"{dataset.transform!r} at position 0 of DS.transform"]
    assert next(iter(loader))[0].shape == (2, 3, 8, 8)
    plain = State(nn.Linear(2, 2), "1ep", dataloader=torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.rand(2, 3))), algorithms=[RandAugment()])
    with pytest.raises(TypeError, match="RandAugment adds RandAugmentTransform .* at FIT_START"):
        Engine(plain).run_event(Event.FIT_START)
