"""The CIFAR-10 loader reads batch files pickled with bytes keys (the original) or str keys (pickled
again under Python 3), as torchvision does; a file that is really wrong is named with what was expected."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from composer_lab.data import CIFAR10


def _write(path, entry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(entry))


def _batch(n: int, seed: int, keys=str) -> dict:
    rng = np.random.default_rng(seed)
    return {keys("data"): rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            keys("labels"): rng.integers(0, 10, n).tolist()}


def test_batches_with_str_keys_read_as_those_with_bytes_keys(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write(folder / "test_batch", _batch(4, 2, keys=str))
    _write(tmp_path / "b" / "cifar-10-batches-py" / "test_batch", _batch(4, 2, keys=str.encode))
    as_str, as_bytes = CIFAR10(tmp_path, train=False), CIFAR10(tmp_path / "b", train=False)
    assert as_str.labels.tolist() == as_bytes.labels.tolist() == _batch(4, 2)["labels"]
    assert (as_str.images == as_bytes.images).all() and as_str.images.shape == (4, 3, 32, 32)


def test_a_pickle_without_the_batch_keys_is_named_with_what_was_expected(tmp_path):
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    _write(path, {"pixels": np.zeros((2, 3072), dtype=np.uint8)})
    with pytest.raises(ValueError, match=r"test_batch is a pickle but not a CIFAR-10 batch: expected a dict "
                                         r"with 'data'.*found \['pixels'\]"):
        CIFAR10(tmp_path, train=False)


def test_pixels_of_the_wrong_shape_are_named(tmp_path):
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    _write(path, {"data": np.zeros((2, 100), dtype=np.uint8), "labels": [0, 1]})
    with pytest.raises(ValueError, match=r"test_batch: 'data' is not N x 3072 uint8 pixels"):
        CIFAR10(tmp_path, train=False)
