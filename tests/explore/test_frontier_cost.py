"""A run's costs: FLOPs counted by torch's counter against a hand count, the loop's time, samples."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from composer_lab.algorithms import ProgressiveResizing, SelectiveBackprop
from composer_lab.explore.cost import CostMeter
from composer_lab.trainer import Trainer


def _fit(model: torch.nn.Module, data: TensorDataset, duration: str, algorithms: list, every=None) -> CostMeter:
    trainer = Trainer(model, DataLoader(data, batch_size=4), duration, loss_fn=F.cross_entropy,
                      algorithms=algorithms, progress_bar=False, seed=0)
    meter = CostMeter.attach(trainer, every)
    trainer.fit()
    return meter


def test_selective_backprop_flops_match_a_hand_count():
    """Linear(8, 4), batches of 4: a plain batch is 2*4*8*4 forward + the same for the weights'
    gradient; a selective one scores all 4 (forward only), then trains the kept rows."""
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    algorithms = [SelectiveBackprop(start=0.5, end=1.0, keep=0.25, scale_factor=1.0, interrupt=0)]
    exact = _fit(torch.nn.Linear(8, 4), data, "8ba", algorithms, every=1)
    per_row = 2 * 8 * 4
    rows = [size // 8 for size in exact.sizes]
    hand = sum(2 * 4 * per_row if kept == 4 else 4 * per_row + 2 * kept * per_row for kept in rows)
    assert rows == [4, 4, 4, 4, 1, 1, 1, 1]  # the second half selective, one row kept of four
    assert exact.flops() == hand
    sampled = _fit(torch.nn.Linear(8, 4), data, "8ba",
                   [SelectiveBackprop(start=0.5, end=1.0, keep=0.25, scale_factor=1.0, interrupt=0)])
    assert sampled.flops() == hand  # each kind counted once stands for the others
    assert sampled.row()["flops_counted"] < 8


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.head = torch.nn.Linear(2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)))


def test_progressive_resizing_flops_match_a_hand_count():
    """A 3x3 convolution (1 -> 2 channels) on HxW images and a Linear(2, 4): the convolution's
    forward 2*N*2*H*W*9 and its weights' gradient as much (its input needs none); the linear
    layer's forward, weight gradient and input gradient 2*N*2*4 each; and ProgressiveResizing's
    check that the model takes the smaller images, once (work performed, so counted)."""
    data = TensorDataset(torch.randn(32, 1, 16, 16), torch.randint(0, 4, (32,)))
    pr = ProgressiveResizing(initial_scale=0.5, delay_fraction=0.25, finetune_fraction=0.25, size_increment=4)
    meter = _fit(_Conv(), data, "8ba", [pr], every=1)
    sides = [kind[0][0][2] for kind in meter.kinds]  # the trained images' height, batch by batch
    hand = sum(2 * (2 * 4 * 2 * side * side * 9) + 3 * (2 * 4 * 2 * 4) for side in sides)
    hand += 2 * 1 * 2 * 8 * 8 * 9 + 2 * 1 * 2 * 4  # its probe: one example forward at the first smaller size
    assert len(set(sides)) >= 2 and min(sides) == 8 and sides[-1] == 16  # the images did shrink
    assert meter.flops() == hand
    pr = ProgressiveResizing(initial_scale=0.5, delay_fraction=0.25, finetune_fraction=0.25, size_increment=4)
    sampled = _fit(_Conv(), data, "8ba", [pr])  # a kind met once is scaled from its neighbour by its pixels
    assert sampled.row()["flops_counted"] < 8
    assert abs(sampled.flops() - hand) <= 0.05 * hand


def test_time_leaves_out_the_first_and_the_counted_batches():
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    meter = _fit(torch.nn.Linear(8, 4), data, "6ba", [])
    row = meter.row()
    assert row["batches"] == 6 and row["flops_counted"] == 1  # one kind of batch: counted once
    steady = sorted(meter.seconds[1:])
    assert row["time"] == sum(meter.seconds[1:]) + steady[len(steady) // 2]  # the first at the others' median


def test_an_epochs_short_last_batch_is_counted_at_the_next_epochs_end_not_chased():
    """10 examples in batches of 4: each epoch ends with a batch of 2. Counting the batch after it
    would find a full one, so that kind is not chased; it is counted at the next epoch's end, once."""
    data = TensorDataset(torch.randn(10, 8), torch.randint(0, 4, (10,)))
    exact = _fit(torch.nn.Linear(8, 4), data, "3ep", [], every=1)
    sampled = _fit(torch.nn.Linear(8, 4), data, "3ep", [])
    assert [size // 8 for size in sampled.sizes] == [4, 4, 2] * 3
    assert sorted(sampled.counted) == [0, 5]  # the first batch, and the second epoch's last
    assert sampled.flops() == exact.flops()

def test_selective_backprop_with_short_last_batches_is_counted_exactly():
    """10 examples in batches of 4, Selective Backprop on every other batch of the epoch: three
    kinds (a selective step, a plain one, the short last batch, selective), each counted, so the
    sampled count is exact."""
    data = TensorDataset(torch.randn(10, 8), torch.randint(0, 4, (10,)))

    def sb():
        return [SelectiveBackprop(start=0.0, end=1.0, keep=0.5, scale_factor=1.0, interrupt=2)]

    exact = _fit(torch.nn.Linear(8, 4), data, "3ep", sb(), every=1)
    sampled = _fit(torch.nn.Linear(8, 4), data, "3ep", sb())
    assert [size // 8 for size in sampled.sizes] == [2, 4, 1] * 3
    assert sampled.row()["flops_counted"] < 9 and sampled.flops() == exact.flops()


def test_the_lean_count_equals_torchs_flop_counter():
    """FlopCount applies torch's formulas without FlopCounterMode's bookkeeping: the same total for
    a training step of a CNN with batch norm, pooling, a linear head and an attention product."""
    from torch.utils.flop_counter import FlopCounterMode

    from composer_lab.explore.flops import FlopCount
    from composer_lab.models import SmallCNN

    model, x = SmallCNN(in_channels=1, num_classes=4, width=4), torch.randn(6, 1, 8, 8)
    q = torch.randn(2, 3, 5, 4, requires_grad=True)

    def step() -> None:
        loss = F.cross_entropy(model(x), torch.arange(6) % 4)
        (loss + F.scaled_dot_product_attention(q, q, q).sum() + torch.einsum("bij,bjk->bik", q[0], q[1].mT).sum()
         ).backward()

    with FlopCounterMode(display=False) as reference:
        step()
    with FlopCount() as lean:
        step()
    assert lean.get_total_flops() == reference.get_total_flops() > 0
