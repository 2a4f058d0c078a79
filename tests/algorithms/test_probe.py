"""The probe forward and the checks built on it: Selective Backprop and ProgressiveResizing refuse,
at the first batch and before any weight update, smaller inputs a model of one input size would
refuse, naming the argument to change; a model that refuses its own inputs too is not blamed on them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from composer_lab.algorithms import Alibi, ProgressiveResizing, SelectiveBackprop
from composer_lab.algorithms.alibi import scale_batch_sequence_length
from composer_lab.algorithms.probe import check_accepts, eval_mode, probe_outputs
from composer_lab.core import Event

from algo_helpers import make_state


class FixedSize(nn.Module):
    """Takes 8x8 images only (a flatten into a linear layer), with BatchNorm and dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(3 * 8 * 8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.bn(x).flatten(1)))


def batch(side: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(4, 3, side, side), torch.randint(0, 4, (4,))


def test_the_probe_changes_nothing_and_restores_each_modules_own_mode():
    model = FixedSize()
    model.drop.eval()  # the user's choice survives the probe
    state, _ = make_state(model, batch())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    assert probe_outputs(state, state.batch[0]).shape == (1, 4)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats unchanged
    assert torch.equal(torch.get_rng_state(), rng)
    assert [m.training for m in model.modules()] == [True, True, False, True]
    with pytest.raises(RuntimeError), eval_mode(model):
        assert not model.training
        raise RuntimeError("a failure inside")
    assert [m.training for m in model.modules()] == [True, True, False, True]


@pytest.mark.parametrize("algorithm, message", [
    (SelectiveBackprop(), r"SelectiveBackprop\(scale_factor=0.5\) scores on inputs resized to 4x4, which this model "
                          r"refuses: pass scale_factor=1.0 \(the model raised RuntimeError: .*mat1 and mat2"),
    (ProgressiveResizing(), r"ProgressiveResizing\(initial_scale=0.5\) resizes inputs to 4x4, which this model "
                            r"refuses: pass a larger initial_scale \(1.0 resizes nothing\), or leave "
                            r"ProgressiveResizing out for a model of one input size"),
])
def test_a_model_of_one_input_size_is_refused_at_the_first_batch(algorithm, message):
    model = FixedSize()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state, engine = make_state(model, batch(), [algorithm])
    with pytest.raises(ValueError, match=message):
        engine.run_event(Event.AFTER_DATALOADER)  # batch 0: SB's interval starts at half the run
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_models_that_take_the_smaller_inputs_are_checked_once_per_input_shape():
    calls = []
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model.register_forward_hook(lambda module, args, output: calls.append(args[0].shape))
    state, engine = make_state(model, batch(), [SelectiveBackprop()])
    engine.run_event(Event.AFTER_DATALOADER)
    engine.run_event(Event.AFTER_DATALOADER)
    assert calls == [(1, 3, 4, 4)]  # one probe of one example at half size, then none


def test_a_model_that_refuses_its_own_inputs_is_not_blamed_on_the_algorithm():
    state, _ = make_state(FixedSize(), batch(side=6))  # 6x6: the model's own error, not SB's
    check_accepts(state, torch.rand(1, 3, 3, 3), "never raised")


def test_alibi_cuts_every_per_token_entry_of_a_dict_batch():
    ids = torch.arange(2 * 8).view(2, 8)
    cut = scale_batch_sequence_length({"input_ids": ids, "attention_mask": torch.ones(2, 8), "labels": ids,
                                       "doc": torch.tensor([7, 9])}, ids, 0.5)
    assert cut["input_ids"].shape == cut["attention_mask"].shape == cut["labels"].shape == (4, 4)
    assert cut["input_ids"][1].tolist() == [4, 5, 6, 7] and cut["doc"].tolist() == [7, 9]
    assert Alibi().train_sequence_length_scaling == 0.25
