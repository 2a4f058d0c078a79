"""Every algorithm in a short Trainer.fit; Selective Backprop's batch sizes in a real run."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from composer_lab import algorithms as algos
from composer_lab.core import Callback
from composer_lab.models import TinyGPT, language_model_loss

from algo_helpers import TinyCNN

Trainer = pytest.importorskip("composer_lab.trainer").Trainer


def loader(n: int = 40, batch_size: int = 8) -> torch.utils.data.DataLoader:
    gen = torch.Generator().manual_seed(0)
    images, labels = torch.randn(n, 3, 8, 8, generator=gen), torch.randint(0, 4, (n,), generator=gen)
    data = torch.utils.data.TensorDataset(images, labels)
    return torch.utils.data.DataLoader(data, batch_size=batch_size)


class BatchSizes(Callback):
    def __init__(self) -> None:
        self.sizes: list[tuple[int, int]] = []

    def before_forward(self, state, logger) -> None:
        self.sizes.append((state.timestamp.batch_in_epoch, state.batch[0].shape[0]))


def test_selective_backprop_batch_sizes_at_before_forward():
    sizes = BatchSizes()
    trainer = Trainer(TinyCNN(), loader(), "4ep", loss_fn=nn.functional.cross_entropy, progress_bar=False,
                      algorithms=[algos.SelectiveBackprop(keep=0.5, scale_factor=0.5)], callbacks=[sizes])
    trainer.fit()
    per_epoch = 5
    expected = []
    for step in range(20):
        duration, idx = step / 20, step % per_epoch
        expected.append((idx, 4 if 0.5 <= duration < 0.9 and (idx + 1) % 2 != 0 else 8))
    assert sizes.sizes == expected
    ratios = trainer.metrics.query("name == 'sb/keep_ratio'").value.tolist()
    assert ratios == [s / 8 for _, s in expected]


def test_selective_backprop_runs_repeat_exactly():
    weights = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyCNN()
        Trainer(model, loader(), "2ep", loss_fn=nn.CrossEntropyLoss(), progress_bar=False, seed=3,
                algorithms=[algos.SelectiveBackprop(start=0.0, interrupt=0)]).fit()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(*weights)


def transformer_classifier() -> nn.Module:
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
            self.norm = nn.LayerNorm(8)
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            return self.head(self.norm(self.layer(x.reshape(x.shape[0], -1, 8))).mean(1))

    return Net()


def token_loader(n: int = 16, length: int = 16) -> torch.utils.data.DataLoader:
    """Next-token (input, target) windows of random tokens, for language-model algorithms (Alibi)."""
    tokens = torch.randint(0, 32, (n, length + 1), generator=torch.Generator().manual_seed(0))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=8)


@pytest.mark.parametrize("name", sorted(algos.ALGORITHMS))
def test_each_algorithm_runs_in_a_short_fit(name):
    cls = algos.ALGORITHMS[name]
    kwargs = {"selective_backprop": dict(start=0.0), "random_subset": dict(start=0.0),
              "layer_freezing": dict(freeze_start=0.0), "progressive_resizing": dict(size_increment=2),
              "blurpool": dict(min_channels=1),
              "seq_length_warmup": dict(duration=0.5, min_seq_length=4, max_seq_length=16, step_size=4)}.get(name, {})
    model = transformer_classifier() if name in ("gated_linear_units", "fused_layernorm") else TinyCNN()
    if name == "blurpool":
        model.conv.stride = (2, 2)
    train = loader()
    if name in ("randaugment", "augmix"):
        class Images(torch.utils.data.Dataset):
            transform = None

            def __len__(self):
                return 16

            def __getitem__(self, i):
                return self.transform(torch.rand(3, 8, 8)), i % 4
        train = torch.utils.data.DataLoader(Images(), batch_size=8)
    loss_fn, evaluation = nn.functional.cross_entropy, loader(16)
    if name in ("alibi", "seq_length_warmup"):  # language-model methods: a tiny GPT on token windows
        model = TinyGPT(vocab_size=32, max_sequence_length=16, d_model=16, n_layers=1, n_heads=2)
        train, evaluation, loss_fn = token_loader(), token_loader(8, 32 if name == "alibi" else 16), language_model_loss
    algorithm = cls(**kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FusedLayerNorm warns without Apex
        trainer = Trainer(model, train, "2ep", loss_fn=loss_fn, progress_bar=False,
                          algorithms=[algorithm], eval_dataloader=evaluation)
        trainer.fit()
    ran = trainer.trace.invocations.query("kind == 'algorithm' and matched")
    assert len(ran) > 0 and ran.error.isna().all()
    assert trainer.metrics.query("name == 'loss/train'").value.notna().all()
