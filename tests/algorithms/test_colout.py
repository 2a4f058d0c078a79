"""ColOut (Composer's method card): the output size, the same rows and columns dropped from an
image and its mask, per batch (one draw for the batch, from the run's generator) or per sample
(a dataset transform inserted at FIT_START)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

import composer_lab.functional as cf
from composer_lab.algorithms import ColOut
from composer_lab.algorithms.colout import ColOutTransform
from composer_lab.core import Callback, Event
from composer_lab.trainer import Trainer

from algo_helpers import TinyCNN


def coordinates(n: int = 2, height: int = 10, width: int = 12) -> torch.Tensor:
    """(n, 1, H, W) images whose pixel (r, c) holds 100 * r + c."""
    grid = 100 * torch.arange(height)[:, None] + torch.arange(width)[None, :]
    return grid.float().expand(n, 1, height, width).clone()


@pytest.mark.parametrize("p_row, p_col", [(0.15, 0.15), (0.0, 0.0), (0.5, 0.25)])
def test_output_size_drops_the_fractions_of_rows_and_columns(p_row, p_col):
    images = torch.rand(4, 3, 32, 48)
    expected = (int((1 - p_row) * 32), int((1 - p_col) * 48))
    assert cf.colout_batch(images, p_row, p_col).shape == (4, 3, *expected)
    assert cf.colout_batch(images[0], p_row, p_col).shape == (3, *expected)
    pil = Image.new("RGB", (48, 32))
    out = cf.colout_batch(pil, p_row, p_col)
    assert isinstance(out, Image.Image) and out.size == expected[::-1] and out.mode == "RGB"


def test_the_same_rows_and_columns_leave_every_image_and_the_mask_in_order():
    images = coordinates()
    masks = images[:, 0].long()
    out_images, out_masks = cf.colout_batch((images, masks), 0.3, 0.25, generator=torch.Generator().manual_seed(1))
    assert out_images.shape == (2, 1, 7, 9) and torch.equal(out_masks, out_images[:, 0].long())
    assert torch.equal(out_images[0], out_images[1])  # one draw for the whole batch
    rows, cols = out_images[0, 0, :, 0] // 100, out_images[0, 0, 0, :] % 100
    assert (rows.diff() > 0).all() and (cols.diff() > 0).all()  # kept rows and columns in their order
    assert torch.equal(out_images[0, 0], 100 * rows[:, None] + cols[None, :])  # whole rows and columns


def test_auto_leaves_class_targets_alone_and_false_leaves_masks_alone():
    images, labels = torch.rand(4, 3, 8, 8), torch.arange(4)
    assert cf.colout_batch((images, labels)).shape == (4, 3, 6, 6)  # only the input comes back
    assert cf.colout_batch((images, torch.zeros(4, 8, 8)), resize_target=False).shape == (4, 3, 6, 6)


class Seen(Callback):
    def __init__(self) -> None:
        self.batches: list = []

    def before_forward(self, state, logger) -> None:
        self.batches.append(state.batch)


class Images(torch.utils.data.Dataset):
    """Eight copies of one (1, 10, 12) coordinate image, with a transform slot."""

    transform = None

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        image = coordinates(1)[0]
        return (image if self.transform is None else self.transform(image)), i % 2


def fit(algorithm: ColOut, dataset=None, seed: int = 0) -> tuple[Trainer, Seen]:
    seen = Seen()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 2))
    trainer = Trainer(model, torch.utils.data.DataLoader(dataset or Images(), batch_size=4), "2ba",
                      loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, algorithms=[algorithm],
                      callbacks=[seen], seed=seed)
    trainer.fit()
    return trainer, seen


def test_per_batch_one_draw_per_batch_from_the_runs_generator():
    _, seen = fit(ColOut(p_row=0.3, p_col=0.25))
    first, second = (inputs for inputs, _ in seen.batches)
    assert first.shape == (4, 1, 7, 9) and all(torch.equal(first[0], image) for image in first)
    assert not torch.equal(first, second)  # a new draw each batch
    _, again = fit(ColOut(p_row=0.3, p_col=0.25))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(seen.batches, again.batches))  # the run's seed decides
    _, other = fit(ColOut(p_row=0.3, p_col=0.25), seed=1)
    assert not torch.equal(seen.batches[0][0], other.batches[0][0])


def test_per_sample_a_transform_inserted_once_at_fit_start_draws_per_image():
    dataset, algorithm = Images(), ColOut(p_row=0.3, p_col=0.25, batch=False)
    assert algorithm.events == frozenset({Event.FIT_START})
    trainer, seen = fit(algorithm, dataset)
    assert isinstance(dataset.transform, ColOutTransform)
    inputs = seen.batches[0][0]
    assert inputs.shape == (4, 1, 7, 9) and not all(torch.equal(inputs[0], image) for image in inputs)
    trainer.fit("1ba")  # a second fit of the same dataset does not add it twice
    assert isinstance(dataset.transform, ColOutTransform)
    assert algorithm.inserted() == ["ColOutTransform(p_row=0.3, p_col=0.25, resize_target='auto') at position 0 "
                                    "of Images.transform"]


def test_a_dataset_without_a_transform_slot_is_refused_with_the_fix():
    data = torch.utils.data.TensorDataset(torch.rand(8, 1, 10, 12), torch.randint(0, 2, (8,)))
    with pytest.raises(TypeError, match="ColOut adds ColOutTransform to the training dataset's 'transform' at "
                                        "FIT_START, but TensorDataset has none; give a DataLoader over a dataset"):
        fit(ColOut(batch=False), data)


def test_a_model_of_one_input_size_is_refused_before_any_weight_update():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    start = [p.detach().clone() for p in model.parameters()]
    data = torch.utils.data.TensorDataset(torch.rand(8, 3, 8, 8), torch.randint(0, 4, (8,)))
    trainer = Trainer(model, torch.utils.data.DataLoader(data, batch_size=4), "2ba",
                      loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, algorithms=[ColOut()])
    with pytest.raises(ValueError, match="ColOut.p_row=0.15, p_col=0.15. makes inputs of 6x6, which this model "
                                         "refuses: pass p_row=0 and p_col=0, or leave ColOut out"):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters()))


def test_token_inputs_are_refused_with_the_fix():
    data = torch.utils.data.TensorDataset(torch.randint(0, 8, (8, 16)), torch.randint(0, 4, (8,)))
    trainer = Trainer(TinyCNN(), torch.utils.data.DataLoader(data, batch_size=4), "1ba",
                      loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, algorithms=[ColOut()])
    with pytest.raises(ValueError, match=r"got \(4, 16\) torch.int64; leave ColOut out for other inputs"):
        trainer.fit()


@pytest.mark.parametrize("kwargs, error", [(dict(p_row=1.0), ValueError), (dict(p_col=-0.1), ValueError),
                                           (dict(resize_target="yes"), ValueError),
                                           (dict(batch=False, resize_target=True), ValueError),
                                           (dict(batch=1), TypeError)])
def test_bad_hyperparameters_are_refused(kwargs, error):
    with pytest.raises(error):
        ColOut(**kwargs)


def test_the_ordering_explorer_orders_colout_with_cutout_per_batch_only():
    from composer_lab.algorithms import CutOut
    from composer_lab.explore import commutation, orderings

    per_batch = orderings([ColOut(), CutOut()])
    assert per_batch["order"].tolist() == ["after_dataloader: CutOut > ColOut", "after_dataloader: ColOut > CutOut"]
    as_transform = orderings([ColOut(batch=False), CutOut()])
    assert len(as_transform) == 1 and set(as_transform.attrs["out_of_question"]["algorithm"]) == {"ColOut", "CutOut"}

    def make_trainer(algorithms, seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(4, 2))
        return Trainer(model, torch.utils.data.DataLoader(Images(), batch_size=4), "2ba", progress_bar=False,
                       loss_fn=torch.nn.functional.cross_entropy, algorithms=algorithms, seed=seed)

    table = commutation(make_trainer, [ColOut(), CutOut()], batches=2).set_index("field")
    assert not table.loc["inputs", "commutes"] and table.loc["inputs", "points"] == 2  # holes land elsewhere


@pytest.mark.parametrize("batch", [False, True], ids=["sample", "batch"])
def test_a_run_resumed_mid_epoch_is_exact(tmp_path, batch):
    """Per sample the transform draws from torch's generator as the DataLoader reads; per batch
    from the run's generator: a run resumed at its third batch trains as the uninterrupted one."""
    from tests.trainer.every_algorithm import Cnn, NoisyImages

    def build(**kwargs) -> Trainer:
        torch.manual_seed(0)
        loader = torch.utils.data.DataLoader(NoisyImages(16), batch_size=4, shuffle=True)
        return Trainer(Cnn(), loader, "4ba", loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, seed=3,
                       algorithms=[ColOut(batch=batch)], **kwargs)

    full = build(save_folder=tmp_path, save_interval="1ba")
    full.fit()
    resumed = build(load_path=tmp_path / "ep0-ba2.pt")
    resumed.fit()
    for (name, a), b in zip(full.state.model.state_dict().items(), resumed.state.model.state_dict().values()):
        assert torch.equal(a, b), name
