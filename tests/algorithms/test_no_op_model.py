"""NoOpModel: the model is replaced by a no-op whose one parameter the optimizer then holds; its
outputs have the original's shape (or Composer's targets-times-weight for a whole batch), and
the data still flows through the loop: every batch is read and counted."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from composer_lab.algorithms import NoOpModel
from composer_lab.algorithms.no_op_model import NoOpModelClass
from composer_lab.functional import apply_no_op_model
from composer_lab.trainer import Trainer

from surgery_models import loader, one_thread, wide_cnn  # noqa: F401 (one_thread: an autouse fixture)


def test_the_no_op_gives_the_originals_output_shape_without_drawing_randomness():
    model = torch.nn.Sequential(wide_cnn(), torch.nn.Dropout(0.5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    no_op = apply_no_op_model(model, opt)
    assert opt.param_groups[0]["params"] == [no_op.weights]
    x = torch.rand(5, 3, 8, 8)
    rng = torch.get_rng_state()
    out = no_op(x)
    assert out.shape == (5, 4) and torch.equal(out, torch.full((5, 4), 1.5))
    assert torch.equal(torch.get_rng_state(), rng)
    targets = torch.tensor([0.0, 2.0])
    assert torch.equal(no_op((torch.rand(2, 3), targets)), targets * 1.5)  # a whole batch: Composer's
    assert torch.isclose(no_op.loss(targets * 1.5, (None, targets)), F.mse_loss(targets * 1.5, targets))


def test_data_still_flows_and_only_the_no_op_trains():
    batches = []

    class Counting(torch.utils.data.Dataset):
        def __init__(self):
            self.data = loader().dataset

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            batches.append(i)
            return self.data[i]

    model = wide_cnn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(model, torch.utils.data.DataLoader(Counting(), batch_size=4), "3ba",
                      loss_fn=lambda outputs, y: F.mse_loss(outputs, F.one_hot(y, 4).float()),
                      algorithms=[NoOpModel()], progress_bar=False)
    assert isinstance(trainer.state.model, NoOpModelClass)
    trainer.fit()
    assert sorted(batches) == list(range(12)) and trainer.state.timestamp.sample == 12
    assert trainer.state.model.weights.item() != 1.5  # the no-op trained (MSE toward the original's output)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the original never ran a step
