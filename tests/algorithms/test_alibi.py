"""Alibi (Press et al., 2022): the slopes and biases against the paper's formula, the surgery on
TinyGPT (and on Hugging Face's GPT-2 when transformers is installed), the refusals, and a run."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import composer_lab.functional as cf
from composer_lab.algorithms import Alibi
from composer_lab.algorithms.alibi import alibi_attention, alibi_bias, alibi_slopes, scale_sequence_length
from composer_lab.core import Callback
from composer_lab.data.text import TextSequences, encode, stdlib_text
from composer_lab.models import TinyGPT, language_model_loss
from composer_lab.models.gpt import CausalSelfAttention
from composer_lab.trainer import Trainer


def tiny_gpt(max_sequence_length: int = 16) -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(max_sequence_length=max_sequence_length, d_model=16, n_layers=2, n_heads=4).eval()


def paper_bias(n_heads: int, length: int) -> torch.Tensor:
    """The paper's biases, written out: head h (1-based) of n, slope m = 2^(-8h/n), adds
    -m * (i - j) to query i's score for key j <= i; keys after i are masked."""
    bias = torch.full((n_heads, length, length), float("-inf"))
    for h in range(n_heads):
        m = 2.0 ** (-8.0 * (h + 1) / n_heads)
        for i in range(length):
            for j in range(i + 1):
                bias[h, i, j] = -m * (i - j)
    return bias


@pytest.mark.parametrize("n_heads", [1, 2, 8, 16])
def test_slopes_and_biases_follow_the_paper_for_powers_of_two(n_heads):
    paper = torch.tensor([2.0 ** (-8 * h / n_heads) for h in range(1, n_heads + 1)])
    assert torch.allclose(alibi_slopes(n_heads), paper)
    assert torch.equal(alibi_bias(alibi_slopes(n_heads), 6), paper_bias(n_heads, 6))


def test_slopes_for_other_head_counts_interleave_the_next_power_of_two():
    # the paper's code: the 4 slopes of 4 heads, then every other slope of 8 heads (1/2, 1/8)
    assert alibi_slopes(6).tolist() == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    assert len(alibi_slopes(12)) == 12 and len(set(alibi_slopes(12).tolist())) == 12


def test_bias_for_the_last_queries_of_longer_keys():
    full = alibi_bias(alibi_slopes(4), 7)
    assert torch.equal(alibi_bias(alibi_slopes(4), 3, 7), full[:, 4:, :])


def test_alibi_attention_is_softmax_of_scores_plus_bias():
    attn = CausalSelfAttention(16, 4)
    cf.apply_alibi(nn.ModuleDict({"attn": attn, "position_embedding": nn.Embedding(8, 16)}), 4, 8,
                   position_embedding_attribute="position_embedding")
    q, k, v = torch.randn(3, 2, 4, 6, 4).unbind(0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(4) + paper_bias(4, 6)
    torch.testing.assert_close(attn._attn(q, k, v), scores.softmax(-1) @ v)


def test_surgery_replaces_the_position_embedding_and_each_attention_and_nothing_else():
    model = tiny_gpt()
    before = {name: p for name, p in model.named_parameters()}
    replaced = cf.apply_alibi(model=model, heads_per_layer=4, max_sequence_length=64)
    assert replaced == ["position_embedding", "blocks.0.attn", "blocks.1.attn"]
    pos = model.position_embedding
    assert pos.num_embeddings == 64 and not pos.weight.requires_grad and not pos.weight.any()
    for block in model.blocks:
        assert block.attn._attn.__func__ is alibi_attention and block.attn._attn.__self__ is block.attn
        assert torch.equal(block.attn.alibi_slopes, alibi_slopes(4))
    assert type(model.blocks[0].attn)._attn is not alibi_attention  # the class keeps its own method
    after = dict(model.named_parameters())
    assert all(after[name] is p for name, p in before.items() if name != "position_embedding.weight")


def test_slopes_are_a_buffer_in_the_state_dict_that_moves_with_the_model():
    model = tiny_gpt()
    cf.apply_alibi(model=model, heads_per_layer=4, max_sequence_length=32)
    state = model.state_dict()
    assert [k for k in state if "alibi" in k] == ["blocks.0.attn.alibi_slopes", "blocks.1.attn.alibi_slopes"]
    assert model.to(torch.float64).blocks[1].attn.alibi_slopes.dtype == torch.float64
    twin = copy.deepcopy(model)
    assert twin.blocks[0].attn._attn.__self__ is twin.blocks[0].attn  # the copy uses its own buffer


def test_sequences_longer_than_the_training_length_work_after_alibi():
    model = tiny_gpt(max_sequence_length=16)
    long = torch.randint(0, 128, (2, 64))
    with pytest.raises(ValueError, match="position embedding has 16 rows"):
        model(long)
    cf.apply_alibi(model=model, heads_per_layer=4, max_sequence_length=64)
    logits = model(long)
    assert logits.shape == (2, 64, 128) and torch.isfinite(logits).all()
    torch.testing.assert_close(model(long[:, :16]), logits[:, :16])  # causal: later tokens change nothing before


def test_mask_replacement_function_sees_each_module_and_may_replace_it():
    class Wrapped(nn.Module):
        def __init__(self, attn: nn.Module, length: int) -> None:
            super().__init__()
            self.attn, self.length = attn, length

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x)

    model = tiny_gpt()
    cf.apply_alibi(model, 4, 32, mask_replacement_function=Wrapped)
    assert [type(b.attn).__name__ for b in model.blocks] == ["Wrapped", "Wrapped"]
    assert model.blocks[0].attn.length == 32 and model(torch.zeros(1, 32, dtype=torch.long)).shape == (1, 32, 128)


def test_heads_are_read_from_the_model_when_not_given():
    model = tiny_gpt()
    cf.apply_alibi(model, None, 32)
    assert len(model.blocks[0].attn.alibi_slopes) == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(position_embedding_attribute="wpe"),
     "looked for the position embedding 'wpe' .* its nn.Embedding modules are: position_embedding, token_embedding"),
    (dict(attention_module=nn.MultiheadAttention),
     "looked for MultiheadAttention modules .* found none; its module classes are: Block, CausalSelfAttention"),
    (dict(attr_to_replace="_attention"), "looked for the method '_attention' .* its methods are: _attn\\b"),
    (dict(heads_per_layer=3), "heads_per_layer=3 but blocks.0.attn \\(CausalSelfAttention\\) has 4 heads"),
])
def test_bad_input_names_what_it_looked_for_and_changes_nothing(kwargs, message):
    model = tiny_gpt()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        cf.apply_alibi(**{"model": model, "heads_per_layer": 4, "max_sequence_length": 32, **kwargs})
    assert model.position_embedding.num_embeddings == 16 and "_attn" not in vars(model.blocks[0].attn)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_scale_sequence_length_keeps_each_target_the_token_after_its_input():
    tokens = torch.arange(1, 2 * 10 + 2)
    x, y = torch.stack([tokens[:10], tokens[10:20]]), torch.stack([tokens[1:11], tokens[11:21]])
    xs, ys = scale_sequence_length(x, y, 0.3)
    assert xs.shape == ys.shape == (6, 3)  # pieces of 3 tokens; the last token of each row dropped
    assert torch.equal(ys, xs + 1) and xs[:3].flatten().tolist() == list(range(1, 10))


class InputShapes(Callback):
    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def before_forward(self, state, logger) -> None:
        self.shapes.append(tuple(state.batch[0].shape))


def test_alibi_trains_with_the_trainer_on_shortened_sequences():
    windows = TextSequences(encode(stdlib_text(["string"]))[:4000], 32)
    train, held = DataLoader(windows, batch_size=8), DataLoader(TextSequences(windows.tokens[:2000], 64), batch_size=8)
    model, shapes = tiny_gpt(max_sequence_length=32), InputShapes()
    alibi = Alibi(max_sequence_length=64)
    trainer = Trainer(model, train, "6ba", loss_fn=language_model_loss, eval_dataloader=held, eval_interval="6ba",
                      optimizers=torch.optim.AdamW(model.parameters(), lr=1e-2), algorithms=[alibi],
                      callbacks=[shapes], seed=0, progress_bar=False)
    trainer.fit()
    assert alibi.replaced == ["position_embedding", "blocks.0.attn", "blocks.1.attn"]
    assert shapes.shapes == [(32, 8)] * 6  # 8 windows of 32 tokens as 32 of 8 (train_sequence_length_scaling=0.25)
    calls = trainer.trace.invocations.query("name == 'Alibi' and matched")
    changed = calls.groupby("event", observed=True)["changed"].first()
    assert "model" in changed["init"] and "batch" in changed["after_dataloader"]
    losses = trainer.metrics.query("name == 'loss/train'").value
    assert losses.iloc[-1] < losses.iloc[0]
    eval_loss = trainer.metrics.query("name == 'loss/eval'").value  # evaluated on windows of 64 tokens
    assert len(eval_loss) == 1 and math.isfinite(eval_loss.iloc[0])
    assert not model.position_embedding.weight.any()  # frozen: still zero after training


def gpt2_with_alibi(max_sequence_length: int = 64):
    """A random 2-layer GPT-2 (no download) before and after apply_alibi, as in the seed's example."""
    pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    from composer_lab.algorithms.alibi import gpt2_alibi_attention, gpt2_alibi_mask

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    original = copy.deepcopy(model)
    replaced = cf.apply_alibi(model=model, heads_per_layer=4, max_sequence_length=max_sequence_length,
                              position_embedding_attribute="transformer.wpe", attention_module=GPT2Attention,
                              attr_to_replace="_upcast_and_reordered_attn", alibi_attention=gpt2_alibi_attention,
                              mask_replacement_function=gpt2_alibi_mask)
    return original, model, replaced


def test_gpt2_surgery_and_longer_sequences():
    original, model, replaced = gpt2_with_alibi()
    assert replaced == ["transformer.wpe", "transformer.h.0.attn", "transformer.h.1.attn"]
    assert "transformer.h.1.attn.alibi_slopes" in model.state_dict()
    with torch.no_grad():
        logits = model(torch.randint(0, 64, (2, 48))).logits  # n_positions is 16
    assert logits.shape == (2, 48, 64) and torch.isfinite(logits).all()


def test_gpt2_with_zero_slopes_is_gpt2_without_position_embeddings():
    original, model, _ = gpt2_with_alibi()
    with torch.no_grad():
        original.transformer.wpe.weight.zero_()
        for block in model.transformer.h:
            block.attn.alibi_slopes.zero_()
        tokens = torch.randint(0, 64, (2, 12))
        torch.testing.assert_close(model(tokens).logits, original(tokens).logits)


def test_gpt2_alibi_attention_is_softmax_of_scores_plus_bias():
    _, model, _ = gpt2_with_alibi()
    attn = model.transformer.h[0].attn
    q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)
    out, _ = attn._upcast_and_reordered_attn(q, k, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + paper_bias(4, 6)
    torch.testing.assert_close(out, (scores.softmax(-1) @ v).transpose(1, 2))
