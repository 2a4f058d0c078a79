"""The language-model workload: the bundled stdlib text, TinyGPT, and `composer-lab run --data text --model gpt`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from composer_lab import Run
from composer_lab.cli import main
from composer_lab.data import DATASETS, text_dataloaders, text_datasets
from composer_lab.data.text import STDLIB_MODULES, TextSequences, decode, encode, stdlib_text
from composer_lab.models import TinyGPT, language_model_loss


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
