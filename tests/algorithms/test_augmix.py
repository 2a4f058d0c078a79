"""AugMix (Composer's method card): output of the input's kind, shape and dtype; ``width`` chains
of ``depth`` operations at ``severity``; the chains mixed with Dirichlet weights and the mix with
the original by a Beta weight, both of concentration ``alpha``; inserted into the training
dataset at FIT_START, once per dataset."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from torchvision import transforms

import composer_lab.functional as cf
from composer_lab.algorithms import AugMix, augmix
from composer_lab.algorithms.augmix import AugmentAndMixTransform, mixing_weights
from composer_lab.algorithms.dataset_transform import add_vision_dataset_transform
from composer_lab.algorithms.randaugment import randaugment_image
from composer_lab.trainer import Trainer


def test_output_keeps_the_kind_shape_and_dtype():
    pil = Image.new("RGB", (12, 10), (40, 120, 200))
    out = cf.augmix_image(pil)
    assert isinstance(out, Image.Image) and out.size == (12, 10) and out.mode == "RGB"
    for image in (torch.rand(3, 10, 12), torch.randint(0, 256, (3, 10, 12), dtype=torch.uint8), torch.rand(2, 3, 8, 8)):
        out = cf.augmix_image(image, generator=torch.Generator().manual_seed(0))
        assert out.shape == image.shape and out.dtype == image.dtype


def test_the_output_is_the_original_and_the_chains_mixed_by_the_drawn_weights():
    image = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = cf.augmix_image(image, severity=5, depth=2, width=3, alpha=0.7, generator=torch.Generator().manual_seed(4))
    replay = torch.Generator().manual_seed(4)
    weights, share = mixing_weights(3, 0.7, replay)
    chains = [randaugment_image(image, 5, 2, "all", replay) for _ in range(3)]
    expected = (1 - share) * image + share * sum(w * c for w, c in zip(weights, chains))
    assert torch.allclose(out, expected) and not torch.allclose(out, image)


def test_mixing_weights_are_a_dirichlet_and_a_beta_draw_of_concentration_alpha():
    gen = torch.Generator().manual_seed(0)
    draws = [mixing_weights(4, 1.0, gen) for _ in range(50)]
    assert all(len(w) == 4 and abs(sum(w) - 1) < 1e-9 and min(w) >= 0 and 0 <= m <= 1 for w, m in draws)
    even = [mixing_weights(4, 1000.0, gen) for _ in range(20)]
    assert all(max(abs(x - 0.25) for x in w) < 0.05 and abs(m - 0.5) < 0.05 for w, m in even)
    peaked = [mixing_weights(4, 0.01, gen) for _ in range(20)]
    assert sum(max(w) > 0.9 and min(m, 1 - m) < 0.1 for w, m in peaked) >= 18  # nearly all at the extremes


def test_width_depth_and_severity_shape_the_chains(monkeypatch):
    calls = []

    def recording(img, severity, depth, augmentation_set, generator):
        calls.append((severity, depth, augmentation_set))
        return img

    monkeypatch.setattr(augmix, "randaugment_image", recording)
    cf.augmix_image(torch.rand(3, 8, 8), severity=7, depth=2, width=4, augmentation_set="safe")
    assert calls == [(7, 2, "safe")] * 4
    calls.clear()
    cf.augmix_image(torch.rand(3, 8, 8), depth=-1, width=30, generator=torch.Generator().manual_seed(0))
    assert {depth for _, depth, _ in calls} == {1, 2, 3}  # -1: 1 to 3 operations per chain


def test_chains_that_change_nothing_leave_the_image_as_it_was(monkeypatch):
    monkeypatch.setattr(augmix, "randaugment_image", lambda img, *args: img)
    image = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for seed in range(5):  # whatever the weights, up to rounding (a truncated 254.99999 would be 254)
        assert torch.equal(cf.augmix_image(image, width=2, generator=torch.Generator().manual_seed(seed)), image)


class Images(torch.utils.data.Dataset):
    """Eight (3, 8, 8) float images with a transform slot."""

    def __init__(self, transform=None) -> None:
        self.images = torch.rand(8, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        self.transform = transform

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return (self.images[i] if self.transform is None else self.transform(self.images[i])), i % 2


def fit(dataset, algorithm: AugMix, duration: str = "2ba") -> Trainer:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 2))
    trainer = Trainer(model, torch.utils.data.DataLoader(dataset, batch_size=4), duration,
                      loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, algorithms=[algorithm])
    trainer.fit()
    return trainer


def test_inserted_into_the_training_dataset_once_at_fit_start():
    dataset, algorithm = Images(), AugMix(width=2)
    trainer = fit(dataset, algorithm)
    assert isinstance(dataset.transform, AugmentAndMixTransform) and dataset.transform.width == 2
    assert not torch.equal(dataset[0][0], dataset.images[0])
    trainer.fit("1ba")
    assert isinstance(dataset.transform, AugmentAndMixTransform)  # not a second time
    assert algorithm.inserted() == ["AugmentAndMixTransform(severity=3, depth=-1, width=2, alpha=1.0, "
                                    "augmentation_set='all') at position 0 of Images.transform"]


def test_it_goes_before_the_to_tensor_step_of_a_compose_as_in_composer():
    to_tensor, flip = transforms.ToTensor(), transforms.RandomHorizontalFlip()
    dataset = Images(transforms.Compose([flip, to_tensor]))
    assert add_vision_dataset_transform(dataset, AugmentAndMixTransform()) == 1
    assert [type(t).__name__ for t in dataset.transform.transforms] == ["RandomHorizontalFlip",
                                                                         "AugmentAndMixTransform", "ToTensor"]
    single = Images(flip)
    assert add_vision_dataset_transform(single, AugmentAndMixTransform()) == 1
    assert [type(t).__name__ for t in single.transform.transforms] == ["RandomHorizontalFlip", "AugmentAndMixTransform"]


def test_a_dataset_without_a_transform_slot_is_refused_before_training():
    data = torch.utils.data.TensorDataset(torch.rand(8, 3, 8, 8), torch.randint(0, 2, (8,)))
    with pytest.raises(TypeError, match="AugMix adds AugmentAndMixTransform to the training dataset's 'transform' "
                                        "at FIT_START, but TensorDataset has none"):
        fit(data, AugMix())


@pytest.mark.parametrize("kwargs", [dict(severity=11), dict(width=0), dict(alpha=0), dict(depth=0),
                                    dict(augmentation_set="original")])
def test_bad_hyperparameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        AugMix(**kwargs)
    with pytest.raises(ValueError):
        AugmentAndMixTransform(**kwargs)
