"""The bundled data, models and the `composer-lab run` command line."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from composer_lab import Run
from composer_lab.cli import main, parse_algorithms
from composer_lab.data import CIFAR10, digits_datasets, synthetic_images
from composer_lab.models import MLP, CifarResNet, SmallCNN


def test_digits_split_is_fixed_and_disjoint():
    train, held = digits_datasets(eval_fraction=0.2, seed=0)
    assert len(train) + len(held) == 1797 and len(held) == 359
    x, y = train[0]
    assert x.shape == (1, 8, 8) and 0 <= x.min() and x.max() <= 1 and y.dtype == torch.int64
    again, _ = digits_datasets(eval_fraction=0.2, seed=0)
    assert torch.equal(train.tensors[0], again.tensors[0])
    with pytest.raises(ValueError, match="eval_fraction"):
        digits_datasets(eval_fraction=1.5)


def test_synthetic_images_are_repeatable_and_checked():
    a, b = synthetic_images(16, image_size=12, seed=3), synthetic_images(16, image_size=12, seed=3)
    assert a.tensors[0].shape == (16, 3, 12, 12) and torch.equal(a.tensors[0], b.tensors[0])
    with pytest.raises(ValueError, match="image_size must be a positive integer"):
        synthetic_images(8, image_size=0)


def _write_cifar_batch(path, n, seed):
    rng = np.random.default_rng(seed)
    entry = {b"batch_label": b"tiny", b"labels": rng.integers(0, 10, n).tolist(),
             b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * n}
    with open(path, "wb") as f:
        pickle.dump(entry, f)
    return entry


def test_cifar10_reads_the_python_pickle_format(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    first = _write_cifar_batch(folder / "data_batch_1", 5, 0)
    _write_cifar_batch(folder / "data_batch_2", 3, 1)
    test = _write_cifar_batch(folder / "test_batch", 4, 2)
    train = CIFAR10(tmp_path, train=True)
    assert len(train) == 8 and len(CIFAR10(folder, train=False)) == 4
    image, label = train[0]
    assert image.shape == (3, 32, 32) and label.item() == first[b"labels"][0]
    red = first[b"data"][0, :1024].reshape(32, 32) / 255.0
    torch.testing.assert_close(image[0], torch.tensor((red - 0.4914) / 0.2470, dtype=torch.float32))
    assert CIFAR10(tmp_path, train=False).labels.tolist() == test[b"labels"]


def test_cifar10_refuses_pickles_that_would_run_code(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()

    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": [1]}, f)
    with pytest.raises(ValueError, match="not a CIFAR-10 python batch"):
        CIFAR10(tmp_path, train=False)


def test_cifar10_missing_folder_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="unpack cifar-10-python.tar.gz"):
        CIFAR10(tmp_path)


@pytest.mark.parametrize("model,shape", [(MLP(64, 10), (2, 1, 8, 8)), (SmallCNN(1, 10), (2, 1, 8, 8)),
                                         (SmallCNN(3, 10), (2, 3, 32, 32)), (SmallCNN(3, 10), (2, 3, 16, 16)),
                                         (CifarResNet(3, 10, depth=8, width=8), (2, 3, 32, 32))])
def test_models_give_class_scores(model, shape):
    assert model(torch.randn(shape)).shape == (2, 10)


def test_resnet_depth_is_checked():
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(depth=10)


def test_parse_algorithms():
    from composer_lab.algorithms import LabelSmoothing, SelectiveBackprop

    algos = parse_algorithms("selective_backprop, label_smoothing")
    assert [type(a) for a in algos] == [SelectiveBackprop, LabelSmoothing]
    assert parse_algorithms("none") == []
    assert parse_algorithms("selective_backprop", fixed_input_size=True)[0].scale_factor == 1.0
    with pytest.raises(ValueError, match="unknown algorithm\\(s\\) warp_drive; choose from"):
        parse_algorithms("warp_drive")


def test_algorithms_may_be_written_as_the_readme_writes_the_classes_and_a_typo_gets_a_guess():
    from composer_lab.algorithms import CutOut, LabelSmoothing

    assert [type(a) for a in parse_algorithms("CutOut, LabelSmoothing,label-smoothing")] == [CutOut, LabelSmoothing,
                                                                                             LabelSmoothing]
    with pytest.raises(ValueError, match=r"unknown algorithm\(s\) label_smothing \(did you mean label_smoothing\?\), "
                                         r"warp_drive; choose from"):
        parse_algorithms("label_smothing,warp_drive")
    with pytest.raises(ValueError, match=r"SelectivBackprop \(did you mean selective_backprop\?\)"):
        parse_algorithms("SelectivBackprop")


def test_cli_run_writes_a_run_folder(tmp_path, capsys):
    code = main(["run", "--epochs", "1", "--model", "mlp", "--runs-dir", str(tmp_path), "--name", "t",
                 "--no-progress", "--algorithms", "selective_backprop,label_smoothing"])
    out = capsys.readouterr().out
    assert code == 0
    folder = tmp_path / "t"
    assert {p.name for p in folder.iterdir()} >= {"config.json", "metrics.parquet", "trace", "loss.png",
                                                  "timeline.png"}
    run = Run.load(folder)
    assert run.config["algorithms"][0]["class"] == "SelectiveBackprop"
    assert "eval accuracy:" in out and "LabelSmoothing:" in out and "before_loss x" in out
    assert json.loads((folder / "config.json").read_text())["name"] == "t"
    assert isinstance(run.metrics, pd.DataFrame) and (run.metrics["name"] == "loss/train").any()


def test_cli_bad_input_is_an_error_message(tmp_path, capsys):
    code = main(["run", "--algorithms", "warp_drive", "--runs-dir", str(tmp_path)])
    assert code == 2 and "unknown algorithm" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--microbatch-size", "--threads", "--epochs", "--batch-size"])
def test_cli_counts_are_checked_before_any_work_in_the_command_line_terms(tmp_path, capsys, option):
    with pytest.raises(SystemExit) as exit_:
        main(["run", option, "0", "--runs-dir", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"composer-lab run: error: argument {option}: must be a whole number >= 1, got '0'" in err
    assert not any(tmp_path.iterdir()), "nothing ran"


def test_cli_run_trains_on_one_thread_unless_told(tmp_path, monkeypatch):
    """One thread by default, as the README recommends for the small default models."""
    threads = []

    def trainer(*args, **kwargs):  # the threads the trainer would train on; then stop
        threads.append(torch.get_num_threads())
        raise ValueError("stopped before training")

    monkeypatch.setattr("composer_lab.trainer.Trainer", trainer)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        args = ["run", "--runs-dir", str(tmp_path), "--epochs", "1", "--no-progress"]
        assert main(args) == 2 and main([*args, "--threads", "3"]) == 2
    finally:
        torch.set_num_threads(before)
    assert threads == [1, 3]


def test_cli_refuses_to_overwrite_another_run(tmp_path, capsys):
    args = ["run", "--epochs", "1", "--model", "mlp", "--runs-dir", str(tmp_path), "--no-progress", "--no-plots",
            "--algorithms", "none", "--name", "same"]
    assert main(args) == 0
    (tmp_path / "same" / "config.json").write_text(json.dumps({"format": "composer_lab.run/1", "name": "other"}))
    assert main(args) == 2 and "another --name, or pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


@pytest.mark.slow
def test_python_dash_m_runs_the_default_experiment(tmp_path):
    """The README's first command, as a user runs it (the whole default experiment)."""
    result = subprocess.run([sys.executable, "-m", "composer_lab", "run", "--runs-dir", str(tmp_path), "--name", "d",
                             "--no-progress"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    accuracy = float(result.stdout.split("eval accuracy:")[1].split()[0])
    assert accuracy > 0.9
    assert "SelectiveBackprop" in result.stdout
    metrics = Run.load(tmp_path / "d").metrics
    keep = metrics[metrics["name"].astype(str).str.startswith("sb/")]
    assert len(keep) > 0
