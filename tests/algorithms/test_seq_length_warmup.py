"""SeqLengthWarmup (Composer's method card): the sequence length follows its schedule over the
warm-up, truncation keeps each row's first tokens (or its end of sequence), reshaping keeps the
batch's tokens in order, and targets, masks and labels stay aligned with the inputs."""

from __future__ import annotations

import re

import pytest
import torch

from composer_lab.algorithms import Alibi, SeqLengthWarmup
from composer_lab.algorithms.seq_length_warmup import seq_length_schedule, set_batch_sequence_length
from composer_lab.core import Callback
from composer_lab.models import HuggingFaceModel, TinyGPT, language_model_loss
from composer_lab.trainer import Trainer


def windows(n: int = 12, length: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token windows of consecutive ids: every target is its input + 1."""
    tokens = torch.arange(n * length + 1) % 1000
    inputs = torch.stack([tokens[i * length:(i + 1) * length] for i in range(n)])
    return inputs, inputs + 1


class Shapes(Callback):
    """The shape of every batch entry as the model gets it."""

    def __init__(self) -> None:
        self.seen: list = []

    def before_forward(self, state, logger) -> None:
        batch = state.batch
        entries = batch.items() if isinstance(batch, dict) else enumerate(batch)
        self.seen.append({key: tuple(value.shape) for key, value in entries})


def test_schedule_grows_by_steps_over_the_warmup_then_stays_at_the_maximum():
    lengths = [seq_length_schedule(b, 10, duration=0.5, min_seq_length=4, max_seq_length=12, step_size=4)
               for b in range(10)]
    assert lengths == [4, 4, 8, 8, 12, 12, 12, 12, 12, 12]
    # Composer's own case: 2 batches, duration 0.5, 8 -> 16
    assert [seq_length_schedule(b, 2, 0.5, 8, 16, 8) for b in range(2)] == [8, 16]
    # a warm-up shorter than its steps steps every batch and ends at the maximum
    assert [seq_length_schedule(b, 4, 0.5, 8, 1024, 8) for b in range(4)] == [8, 16, 1024, 1024]
    assert seq_length_schedule(0, 10, duration=0.0) == 1024


def test_trainer_cuts_each_batch_to_the_scheduled_length_and_logs_it():
    inputs, targets = windows()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs % 32, targets % 32), batch_size=4)
    shapes = Shapes()
    torch.manual_seed(0)
    trainer = Trainer(TinyGPT(vocab_size=32, max_sequence_length=16, d_model=8, n_layers=1, n_heads=2), loader,
                      "2ep", loss_fn=language_model_loss, progress_bar=False, callbacks=[shapes],
                      algorithms=[SeqLengthWarmup(duration=0.5, min_seq_length=4, max_seq_length=16, step_size=4)])
    trainer.fit()
    expected = [seq_length_schedule(b, 6, 0.5, 4, 16, 4) for b in range(6)]
    assert expected == [4, 8, 12, 16, 16, 16]
    assert [s[0] for s in shapes.seen] == [(4, n) for n in expected]
    assert [s[1] for s in shapes.seen] == [(4, n) for n in expected]
    logged = trainer.metrics.query("name == 'seq_length_warmup/curr_seq_len'").value.tolist()
    assert logged == expected


@pytest.mark.parametrize("truncate", [True, False])
def test_targets_stay_the_token_after_their_input(truncate):
    inputs, targets = windows(n=3, length=10)
    cut_inputs, cut_targets = set_batch_sequence_length((inputs, targets), 4, truncate=truncate)
    assert cut_inputs.shape[1] == 4 and torch.equal(cut_targets, cut_inputs + 1)
    if truncate:
        assert torch.equal(cut_inputs, inputs[:, :4])
    else:  # the batch's tokens in order, fewer than 4 dropped at its end
        assert torch.equal(cut_inputs.flatten(), inputs.flatten()[:cut_inputs.numel()])
        assert cut_inputs.numel() > inputs.numel() - 4 and cut_inputs.shape == (7, 4)


def test_a_dict_batch_is_cut_alike_and_not_changed_in_place():
    ids = torch.arange(24).view(2, 12)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    cut = set_batch_sequence_length(batch, 5)
    assert {k: tuple(v.shape) for k, v in cut.items()} == {k: (2, 5) for k in batch}
    assert torch.equal(cut["labels"], cut["input_ids"]) and batch["input_ids"] is ids and ids.shape == (2, 12)
    assert set_batch_sequence_length(batch, 12) is batch  # no longer than the length: as it is


def test_preserve_end_of_sequence_keeps_each_rows_last_real_token():
    ids = torch.tensor([[10, 11, 12, 13, 14, 15], [20, 21, 22, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    cut = set_batch_sequence_length({"input_ids": ids, "attention_mask": mask}, 3, preserve_end_of_sequence=True)
    assert cut["input_ids"].tolist() == [[10, 11, 15], [20, 21, 22]]  # Composer's example, and a short row kept
    assert cut["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 1]]


@pytest.mark.parametrize("batch, length, kwargs, message", [
    ((torch.rand(4, 3, 8, 8), torch.zeros(4)), 2, {}, "needs token ids (N, T), got (4, 3, 8, 8)"),
    ((torch.zeros(4, 8, dtype=torch.long), torch.zeros(4)), 2, {}, "entry 1 is (4,), not (N, T, ...)"),
    ({"input_ids": torch.zeros(2, 8, dtype=torch.long), "labels": torch.zeros(2, dtype=torch.long)}, 4, {},
     "entry 'labels' is (2,)"),
    ((torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long)), 4,
     {"preserve_end_of_sequence": True}, "has none; pass preserve_end_of_sequence=False"),
    ({"input_ids": torch.zeros(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 4)}, 3,
     {"truncate": False}, "entry 'attention_mask' is (2, 4); pass truncate=True"),
])
def test_batches_it_cannot_cut_alike_are_refused_with_the_fix(batch, length, kwargs, message):
    with pytest.raises(ValueError, match=f"SeqLengthWarmup.*{re.escape(message)}"):
        set_batch_sequence_length(batch, length, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(duration=1.5), dict(min_seq_length=0), dict(min_seq_length=16,
                                                                                      max_seq_length=8),
                                    dict(step_size=2.5), dict(truncate="yes")])
def test_bad_hyperparameters_are_refused(kwargs):
    with pytest.raises((ValueError, TypeError)):
        SeqLengthWarmup(**kwargs)


def test_image_inputs_are_refused_before_any_weight_update():
    data = torch.utils.data.TensorDataset(torch.rand(8, 3, 4, 4), torch.randint(0, 2, (8,)))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 2))
    start = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, torch.utils.data.DataLoader(data, batch_size=4), "2ba",
                      loss_fn=torch.nn.functional.cross_entropy, progress_bar=False, algorithms=[SeqLengthWarmup()])
    with pytest.raises(ValueError, match="SeqLengthWarmup cuts batches of token ids .N, T., got inputs "
                                         r"\(4, 3, 4, 4\) torch.float32; leave SeqLengthWarmup out"):
        trainer.fit()
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters()))


def test_with_alibi_on_the_gpt_workload_both_cut_and_it_trains():
    inputs, targets = windows()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs % 32, targets % 32), batch_size=4)
    shapes = Shapes()
    torch.manual_seed(0)
    trainer = Trainer(TinyGPT(vocab_size=32, max_sequence_length=16, d_model=8, n_layers=1, n_heads=2), loader,
                      "3ba", loss_fn=language_model_loss, progress_bar=False, callbacks=[shapes],
                      algorithms=[SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=16, step_size=8),
                                  Alibi(max_sequence_length=16, train_sequence_length_scaling=0.5)])
    trainer.fit()
    # AFTER_DATALOADER closes BEFORE_DATALOADER, so the list runs in reverse there: Alibi first cuts
    # each row of 16 into two of 8, then SeqLengthWarmup's 8 and 16 leave those as they are
    assert [s[0] for s in shapes.seen] == [(8, 8)] * 3
    logged = trainer.metrics.query("name.str.startswith('seq_length_warmup/')")
    assert logged.query("name == 'seq_length_warmup/curr_seq_len'").value.tolist() == [8, 16, 16]
    assert logged.query("name == 'seq_length_warmup/curr_bs'").value.tolist() == [8, 8, 8]
    assert trainer.metrics.query("name == 'loss/train'").value.notna().all()


def test_a_hugging_face_gpt2_trains_on_its_dict_batches_cut_alike():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    ids = torch.randint(0, 32, (12, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": i} for i in ids]
    shapes = Shapes()
    torch.manual_seed(0)
    trainer = Trainer(HuggingFaceModel(transformers.GPT2LMHeadModel(config)),
                      torch.utils.data.DataLoader(data, batch_size=4), "3ba", progress_bar=False, callbacks=[shapes],
                      algorithms=[SeqLengthWarmup(duration=1.0, min_seq_length=4, max_seq_length=16, step_size=4,
                                                  truncate=False)])
    trainer.fit()
    assert [s["input_ids"] for s in shapes.seen] == [(16, 4), (8, 8), (5, 12)]  # 64 tokens in rows of 4, 8, 12
    assert all(len(set(s.values())) == 1 for s in shapes.seen)  # labels and mask cut like the ids
    assert trainer.metrics.query("name == 'loss/train'").value.notna().all()


def test_applied_at_init_as_composers_own_tests_do_it_changes_nothing():
    from composer_lab.core import Event, Logger, State

    state = State(torch.nn.Linear(2, 2), "1ep")
    assert SeqLengthWarmup().apply(Event.INIT, state, Logger(state)) is None and state.batch is None
