"""The data a sweep's runs read is part of its identity: data rewritten on disk (the factory's code
and values unchanged) is noticed before finished runs are reused; data that cannot be fingerprinted
is said, at run time, to be left out of the identity."""

from __future__ import annotations

import functools

import pytest
import torch

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import InlineExecutor, Sweep
from composer_lab.explore.results import SweepFolderTaken
from tests.explore import factories


def sweep(factory, folder) -> Sweep:
    return Sweep(factory, [CutOut(), MixUp()], seeds=[0], executor=InlineExecutor(), folder=folder)


def test_data_rewritten_on_disk_is_noticed_before_runs_are_reused(tmp_path):
    data = tmp_path / "images.pt"
    first = factories.images(32)
    torch.save(first.tensors, data)
    factory = functools.partial(factories.from_file, str(data))
    sweep(factory, tmp_path / "sweep").run()
    sweep(factory, tmp_path / "sweep").run()  # the same data: the finished runs are reused
    x, y = first.tensors
    torch.save((x.flip(0), y.flip(0)), data)  # the file rewritten: same size, other order
    with pytest.raises(SweepFolderTaken, match=r"holds results of another experiment: train data: TensorDataset of "
                                               r"32, sha256 \w+ -> TensorDataset of 32, sha256 \w+\. Results"):
        sweep(factory, tmp_path / "sweep").run()


def test_data_that_cannot_be_fingerprinted_is_said_to_be_left_out(tmp_path):
    with pytest.warns(UserWarning, match=r"the data this sweep's runs read is not part of its identity \(train: "
                                         r"not part of the identity: Stream cannot be read by index"):
        sweep(factories.streaming, tmp_path).run()
