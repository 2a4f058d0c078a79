"""The language-model workload: the bundled stdlib text, TinyGPT, and `composer-lab run --data text --model gpt`;
Hugging Face's GPT-2 and BERT through HuggingFaceModel with the algorithms that apply to language models."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from composer_lab import Run
from composer_lab.cli import main
from composer_lab.data import DATASETS, text_dataloaders, text_datasets
from composer_lab.data.text import STDLIB_MODULES, TextSequences, decode, encode, stdlib_text
from composer_lab.algorithms import EMA, Alibi, GradientClipping, LabelSmoothing, LayerFreezing, SelectiveBackprop
from composer_lab.models import HuggingFaceModel, TinyGPT, language_model_loss
from composer_lab.trainer import Trainer


def test_the_corpus_is_the_stdlib_source_as_ascii_ids():
    text = stdlib_text(["string"])
    assert '"""A collection of string constants.' in text
    tokens = encode(text)
    assert tokens.dtype == torch.int64 and 0 <= int(tokens.min()) and int(tokens.max()) < 128
    assert decode(tokens[:200]) == text[:200]
    assert decode(encode("naïve")) == "na?ve"  # not ASCII: one "?" per character
    with pytest.raises(ValueError, match="'sys' has no Python source file"):
        stdlib_text(["sys"])


def test_windows_are_inputs_and_the_next_characters():
    windows = TextSequences(torch.arange(23), 5)
    assert len(windows) == 4  # 22 tokens have a successor: 4 whole windows
    x, y = windows[3]
    assert x.tolist() == [15, 16, 17, 18, 19] and y.tolist() == [16, 17, 18, 19, 20]
    with pytest.raises(IndexError):
        windows[4]
    with pytest.raises(ValueError, match="sequence_length must be a positive integer"):
        TextSequences(torch.arange(23), 0)


def test_loaders_yield_batches_of_the_chosen_lengths():
    train, held = text_dataloaders(batch_size=4, sequence_length=16, eval_sequence_length=64, modules=["string"])
    x, y = next(iter(train))
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    assert next(iter(held))[0].shape[1] == 64
    with pytest.raises(ValueError, match="sequence_length must be a positive integer, got 0"):
        text_datasets(16, eval_sequence_length=0, modules=["string"])
    full_train, full_held = text_datasets(128)
    assert len(full_train) > 2000 and len(full_held) > 200 and DATASETS["text"] is text_dataloaders
    assert len(stdlib_text(STDLIB_MODULES)) > 300_000


def test_tiny_gpt_defaults_and_causality():
    torch.manual_seed(0)
    model = TinyGPT()
    assert (model.vocab_size, model.n_heads, model.position_embedding.num_embeddings) == (128, 4, 256)
    tokens = torch.randint(0, 128, (2, 20))
    logits = model(tokens)
    assert logits.shape == (2, 20, 128)
    changed = tokens.clone()
    changed[:, 10:] = 0
    torch.testing.assert_close(model(changed)[:, :10], logits[:, :10])  # no position sees a later one
    with pytest.raises(ValueError, match="d_model \\(30\\) must be a multiple of n_heads \\(4\\)"):
        TinyGPT(d_model=30)


def test_language_model_loss_is_mean_next_token_cross_entropy():
    logits, targets = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    expected = torch.stack([F.cross_entropy(logits[i, t], targets[i, t], reduction="none")
                            for i in range(2) for t in range(3)]).mean()
    torch.testing.assert_close(language_model_loss(logits, targets), expected)


@pytest.fixture
def small_text(monkeypatch):
    """The command line's text data, from one small module so that a run takes a second."""
    monkeypatch.setitem(DATASETS, "text", lambda batch_size: text_dataloaders(batch_size, 32, modules=["string"]))


def test_cli_trains_gpt_on_text_with_alibi(tmp_path, capsys, small_text):
    code = main(["run", "--data", "text", "--model", "gpt", "--algorithms", "alibi", "--epochs", "1",
                 "--batch-size", "32", "--lr", "0.01", "--runs-dir", str(tmp_path), "--name", "lm", "--no-progress",
                 "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0
    assert "eval loss:" in out and "Alibi: " in out and "after_dataloader x" in out
    run = Run.load(tmp_path / "lm")
    assert "Alibi" in str(run.config["algorithms"][0])
    assert run.metrics.query("name == 'Alibi/num_replaced'").value.tolist() == [3.0]


def test_cli_refuses_text_with_an_image_model(tmp_path, capsys):
    assert main(["run", "--data", "text", "--model", "cnn", "--runs-dir", str(tmp_path)]) == 2
    assert "--data text --model cnn do not go together" in capsys.readouterr().err
    assert main(["run", "--model", "gpt", "--runs-dir", str(tmp_path)]) == 2
    assert "use --data text --model gpt" in capsys.readouterr().err


# -- Hugging Face models (issue 28) -----------------------------------------------------------------

VOCAB, LENGTH = 64, 16


def gpt2(dropout: float = 0.1):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout,
                                     attn_pdrop=dropout)
    return transformers.GPT2LMHeadModel(config)


def bert():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=LENGTH, num_labels=3)
    return transformers.BertForSequenceClassification(config)


def token_batches(count: int = 4, rows: int = 4, classes: int | None = None) -> list[dict]:
    """Dict batches as a collator gives them; labels are the inputs (causal LM) or a class each."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        ids = torch.randint(0, VOCAB, (rows, LENGTH), generator=g)
        labels = ids if classes is None else torch.randint(0, classes, (rows,), generator=g)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return batches


@pytest.mark.parametrize("build, classes", [(gpt2, None), (bert, 3)])
def test_hugging_face_model_loss_is_the_transformers_loss(build, classes):
    model = build().eval()
    wrapped = HuggingFaceModel(model)
    batch = token_batches(1, classes=classes)[0]
    outputs = wrapped(batch)
    assert wrapped.shift_labels == (classes is None)
    assert outputs.shape == ((4, VOCAB, LENGTH) if classes is None else (4, 3))  # the class dimension is 1
    torch.testing.assert_close(wrapped.loss(outputs, batch), model(**batch).loss)
    per_label = wrapped.loss(outputs, batch, reduction="none")
    assert per_label.shape == ((4, LENGTH - 1) if classes is None else (4,))


def test_hugging_face_model_refusals_name_the_fix():
    wrapped = HuggingFaceModel(gpt2())
    with pytest.raises(TypeError, match="HuggingFaceModel takes dict batches .*DataCollatorWithPadding"):
        wrapped((torch.zeros(2, 4, dtype=torch.long), None))
    with pytest.raises(KeyError, match=r"add the labels \(for a causal language model, labels = input_ids\)"):
        wrapped.loss(torch.zeros(2, VOCAB, 4), {"input_ids": torch.zeros(2, 4, dtype=torch.long)})


def gpt2_alibi() -> Alibi:
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    from composer_lab.algorithms.alibi import gpt2_alibi_attention, gpt2_alibi_mask
    return Alibi(max_sequence_length=LENGTH, position_embedding_attribute="model.transformer.wpe",
                 attention_module=GPT2Attention, attr_to_replace="_upcast_and_reordered_attn",
                 alibi_attention=gpt2_alibi_attention, mask_replacement_function=gpt2_alibi_mask)


def test_a_hugging_face_gpt2_trains_with_the_language_model_algorithms():
    """Label smoothing, gradient clipping, EMA, layer freezing, Alibi and Selective Backprop with a
    per-token loss, together, on GPT-2 with dict batches (attention masks cut with the sequences)."""
    model = HuggingFaceModel(gpt2())
    ema = EMA(half_life="2ba")
    algorithms = [LabelSmoothing(0.1), GradientClipping("norm", 1.0), ema, LayerFreezing(freeze_start=0.5),
                  gpt2_alibi(), SelectiveBackprop(start=0.0, end=1.0, keep=0.5, scale_factor=1.0, interrupt=0)]
    trainer = Trainer(model, token_batches(), "4ba", algorithms=algorithms, progress_bar=False)
    trainer.fit()
    metrics = trainer.metrics
    values = lambda name: metrics.query("name == @name").value.tolist()  # noqa: E731
    assert len(values("loss/train")) == 4 and all(math.isfinite(v) for v in values("loss/train"))
    assert values("sb/keep_ratio") == [0.5] * 4  # each step trained on the 2 of 4 sequences it picked
    assert values("Alibi/num_replaced") == [3.0] and not model.model.transformer.wpe.weight.any()
    assert values("layer_freezing/layers_frozen")[-1] > 0
    assert ema.averages is not None and all(a.isfinite().all() for a in ema.averages)
    assert model(token_batches(1)[0]).isfinite().all()


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_label_smoothing_on_gpt2_trains_towards_smoothed_tokens(smoothing):
    """The loss the trainer records is the cross-entropy against the smoothed next tokens."""
    model = HuggingFaceModel(gpt2(dropout=0.0))
    batch = token_batches(1)[0]
    with torch.no_grad():
        logits = model(batch)
    trainer = Trainer(model, [batch], "1ba", algorithms=[LabelSmoothing(smoothing)], progress_bar=False)
    trainer.fit()
    targets = F.one_hot(batch["labels"], VOCAB).movedim(-1, 1).float() * (1 - smoothing) + smoothing / VOCAB
    expected = F.cross_entropy(logits[..., :-1], targets[..., 1:])
    loss = trainer.metrics.query("name == 'loss/train'").value.iloc[0]
    assert loss == pytest.approx(float(expected), rel=1e-4)


def test_bert_trains_with_label_smoothing_and_selective_backprop():
    model = HuggingFaceModel(bert())
    trainer = Trainer(model, token_batches(classes=3), "4ba", progress_bar=False,
                      algorithms=[LabelSmoothing(0.1), SelectiveBackprop(start=0.0, end=1.0, scale_factor=1.0,
                                                                         interrupt=0)])
    trainer.fit()
    assert trainer.metrics.query("name == 'sb/keep_ratio'").value.tolist() == [0.5] * 4
    assert model(token_batches(1, classes=3)[0]).isfinite().all()
