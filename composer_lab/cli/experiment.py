"""What the commands train: the model a name stands for, and the ``sweep`` command's factory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["build_model", "SweepExperiment"]


def build_model(name: str, example: torch.Tensor, num_classes: int) -> torch.nn.Module:
    """The model ``--model name`` stands for, sized for ``example`` inputs and ``num_classes``."""
    from composer_lab.models import MODELS

    if name == "mlp":
        return MODELS[name](in_features=example.numel(), num_classes=num_classes)
    if name == "gpt":
        return MODELS[name](vocab_size=num_classes, max_sequence_length=example.shape[0])
    return MODELS[name](in_channels=example.shape[0], num_classes=num_classes)


@dataclass(frozen=True)
class SweepExperiment:
    """The ``sweep`` command's factory ``(algorithms, seed) -> Trainer``: a module-level class, so
    worker processes import it by name. Its fields are the command's ``--data``, ``--model``,
    ``--epochs``, ``--batch-size`` and ``--lr``."""

    data: str = "digits"
    model: str = "cnn"
    epochs: int = 3
    batch_size: int = 64
    lr: float = 0.05

    def __call__(self, algorithms: list, seed: int) -> Any:
        from composer_lab.data import DATASETS
        from composer_lab.trainer import Trainer
        from composer_lab.trainer.rng import seed_all

        seed_all(seed)
        train, evaluation = DATASETS[self.data](batch_size=self.batch_size)
        model = build_model(self.model, train.dataset[0][0], int(train.dataset.tensors[1].max()) + 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9, weight_decay=5e-4)
        return Trainer(model, train, f"{self.epochs}ep", loss_fn=torch.nn.functional.cross_entropy,
                       optimizers=optimizer, eval_dataloader=evaluation, algorithms=algorithms, seed=seed,
                       progress_bar=False, run_name=f"seed{seed}")
