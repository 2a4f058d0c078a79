"""The compatibility matrix (issue 28): every algorithm of the collection on the architectures
people train: torchvision's resnet18, mobilenet_v3_small, efficientnet_b0 and a small
VisionTransformer, models with aliased submodules and with tied weights, timm models, and
Hugging Face's GPT-2 and BERT from small configs with dict batches (nothing is downloaded).

Each cell trains a copy of the model for a few batches on CPU and must end in one of three ways:
- **trains**: the model is sound afterwards (finite, on its device, a forward still works);
- **refused**: a ValueError or TypeError raised by composer_lab (never from inside torch,
  torchvision, timm or transformers), naming the algorithm, before any weight update;
- **n/a**: the algorithm warned ``NoEffectWarning`` (a surgery found nothing to change) and the
  model trained as it was.

The last test writes the table into docs/compatibility.md between its
``compatibility-matrix`` markers when ``COMPOSER_LAB_WRITE_MATRIX=1``, and otherwise fails when
they differ from this run's results.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Dataset

import composer_lab
from composer_lab.algorithms import ALGORITHMS, Alibi
from composer_lab.algorithms.warnings import NoEffectWarning
from composer_lab.models import HuggingFaceModel
from composer_lab.trainer import Trainer

from algo_helpers import Aliased, Tied

BATCH, STEPS, SIDE, CLASSES, VOCAB, LENGTH, LABELS = 4, 3, 32, 10, 64, 16, 3
PACKAGE = Path(composer_lab.__file__).resolve().parent
ROOT = PACKAGE.parent
REGENERATE = "COMPOSER_LAB_WRITE_MATRIX=1 python -m pytest tests/algorithms/test_compatibility.py -p no:cacheprovider"


# -- data ----------------------------------------------------------------------------------------

class Images(Dataset):
    """Random float images in [0, 1] with a torchvision-style ``transform`` (RandAugment adds itself there)."""

    def __init__(self, n: int = BATCH * STEPS) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, SIDE, SIDE, generator=g)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.transform: Optional[Callable[[Any], Any]] = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[i]
        return (image if self.transform is None else self.transform(image)), self.labels[i]


class Tokens(Dataset):
    """Dict examples as a Hugging Face collator gives them: ``input_ids``, ``attention_mask``,
    ``labels`` (the inputs for a causal language model, a class for sequence classification)."""

    def __init__(self, causal: bool, n: int = BATCH * STEPS) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, LENGTH), generator=g)
        self.labels = self.ids if causal else torch.randint(0, LABELS, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": self.labels[i]}


# -- models --------------------------------------------------------------------------------------

def _timm(name: str, **kwargs: Any) -> nn.Module:
    timm = pytest.importorskip("timm", reason="timm is not installed (pip install -e '.[timm]')")
    return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    return HuggingFaceModel(transformers.GPT2LMHeadModel(config))


def _bert() -> nn.Module:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=LENGTH, num_labels=LABELS)
    return HuggingFaceModel(transformers.BertForSequenceClassification(config))


@dataclass(frozen=True)
class Workload:
    """A model builder, its data, and the loss (None: the model's own, for dict batches)."""

    build: Callable[[], nn.Module]
    data: Callable[[], Dataset]
    loss_fn: Optional[Callable[..., torch.Tensor]] = F.cross_entropy


WORKLOADS = {
    "resnet18": Workload(lambda: torchvision.models.resnet18(num_classes=CLASSES), Images),
    "mobilenet_v3_small": Workload(lambda: torchvision.models.mobilenet_v3_small(num_classes=CLASSES), Images),
    "efficientnet_b0": Workload(lambda: torchvision.models.efficientnet_b0(num_classes=CLASSES), Images),
    "ViT": Workload(lambda: torchvision.models.VisionTransformer(
        image_size=SIDE, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=CLASSES),
        Images),
    "aliased": Workload(lambda: Aliased(CLASSES), Images),
    "tied": Workload(lambda: Tied(CLASSES), Images),
    "timm resnet10t": Workload(lambda: _timm("resnet10t"), Images),
    "timm ViT": Workload(lambda: _timm("vit_tiny_patch16_224", img_size=SIDE, patch_size=8, embed_dim=32, depth=2,
                                       num_heads=2), Images),
    "GPT-2": Workload(_gpt2, functools.partial(Tokens, causal=True), None),
    "BERT": Workload(_bert, functools.partial(Tokens, causal=False), None),
}


@functools.cache
def built(model_name: str) -> nn.Module:
    """Each model built once per session (seeded); every cell trains a deep copy."""
    torch.manual_seed(0)
    return WORKLOADS[model_name].build()


def configured(algorithm_name: str, model_name: str) -> Any:
    """The algorithm as a user would configure it for the model: its defaults, except Alibi on
    GPT-2, given the GPT-2 functions, StochasticDepth on resnet18, given its block class
    (``'ResNetBasicBlock'``; the default is ResNet-50's ``'ResNetBottleneck'``), and
    GhostBatchNorm, given ghost batches of 2 (the default 32 exceeds the batches of 4)
    (documented in docs/compatibility.md)."""
    if algorithm_name == "stochastic_depth" and model_name == "resnet18":
        return ALGORITHMS[algorithm_name](target_layer_name="ResNetBasicBlock")
    if algorithm_name == "ghost_batchnorm":
        return ALGORITHMS[algorithm_name](ghost_batch_size=2)
    if algorithm_name == "alibi" and model_name == "GPT-2":
        from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

        from composer_lab.algorithms.alibi import gpt2_alibi_attention, gpt2_alibi_mask
        return Alibi(max_sequence_length=LENGTH, position_embedding_attribute="model.transformer.wpe",
                     attention_module=GPT2Attention, attr_to_replace="_upcast_and_reordered_attn",
                     alibi_attention=gpt2_alibi_attention, mask_replacement_function=gpt2_alibi_mask)
    return ALGORITHMS[algorithm_name]()


AUTOCAST_ONLY = ("low_precision_layernorm", "low_precision_groupnorm")
"""Algorithms that act only under autocast: their cells train with precision='amp_bf16' (CPU)."""


# -- one cell ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    kind: str  # 'trains', 'refused' or 'n/a'
    detail: str = ""


RESULTS: dict[tuple[str, str], Outcome] = {}


def _raised_by_composer_lab(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback is composer_lab's own code."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(PACKAGE)


def _normalised(text: str) -> str:
    return re.sub(r"[\s_]", "", text).lower()


def assert_sound(model: nn.Module, batch: Any, loss_fn: Any) -> None:
    """Finite parameters and buffers on the CPU, and a forward that still gives finite outputs."""
    for name, tensor in model.state_dict().items():
        assert tensor.device.type == "cpu", f"{name} is on {tensor.device}"
        if tensor.is_floating_point():
            assert tensor.isfinite().all(), f"{name} holds non-finite values"
    with torch.no_grad():
        outputs = model(batch[0] if loss_fn is not None else batch)
    assert outputs.isfinite().all()


def run_cell(algorithm_name: str, model_name: str) -> Outcome:
    workload = WORKLOADS[model_name]
    model = copy.deepcopy(built(model_name))
    start = [p.detach().clone() for p in model.parameters()]
    loader = DataLoader(workload.data(), batch_size=BATCH)
    algorithm = configured(algorithm_name, model_name)
    trainer = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer = Trainer(model, loader, f"{STEPS}ba", loss_fn=workload.loss_fn, algorithms=[algorithm],
                              progress_bar=False, seed=0,
                              precision="amp_bf16" if algorithm_name in AUTOCAST_ONLY else "fp32")
            trainer.fit()
        except (ValueError, TypeError) as err:
            if not _raised_by_composer_lab(err):
                raise
            message = str(err)
            assert _normalised(type(algorithm).__name__) in _normalised(message), (
                f"the refusal does not name {type(algorithm).__name__}: {message}")
            assert trainer is None or trainer.state.timestamp.batch == 0, "refused after training began"
            assert all(torch.equal(a, b) for a, b in zip(start, model.parameters())), "refused after a weight update"
            return Outcome("refused", message)
    assert_sound(trainer.state.model, next(iter(loader)), workload.loss_fn)
    no_effect = [w for w in caught if issubclass(w.category, NoEffectWarning)]
    return Outcome("n/a", str(no_effect[0].message)) if no_effect else Outcome("trains")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread for the matrix (the machine is shared), the caller's count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("algorithm_name", list(ALGORITHMS))
@pytest.mark.parametrize("model_name", list(WORKLOADS))
def test_cell_trains_is_refused_before_training_or_is_not_applicable(model_name, algorithm_name):
    RESULTS[algorithm_name, model_name] = run_cell(algorithm_name, model_name)


def test_only_composer_labs_own_errors_count_as_refusals():
    with pytest.raises(RuntimeError) as from_torch:
        torch.zeros(2, 3) @ torch.zeros(2, 3)
    with pytest.raises(ValueError) as from_lab:
        ALGORITHMS["mixup"](alpha=-1)
    assert not _raised_by_composer_lab(from_torch.value) and _raised_by_composer_lab(from_lab.value)


# -- the generated tables ------------------------------------------------------------------------

MARKERS = ("<!-- compatibility-matrix:start -->", "<!-- compatibility-matrix:end -->")
SYMBOL = {"trains": "✓", "refused": "refused", "n/a": "n/a"}


def matrix_table() -> str:
    """Algorithms (rows) x models (columns), each cell's outcome."""
    header = "| algorithm | " + " | ".join(WORKLOADS) + " |"
    rule = "| --- |" + " --- |" * len(WORKLOADS)
    rows = [f"| {cls.__name__} | " + " | ".join(SYMBOL[RESULTS[name, model].kind] for model in WORKLOADS) + " |"
            for name, cls in ALGORITHMS.items()]
    return "\n".join([header, rule, *rows])


def docs_block() -> str:
    """The table, then each refusal and n/a once per algorithm and message (the model's class
    name read as one word), with the models it was given on."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for name in ALGORITHMS:
        for model in WORKLOADS:
            outcome = RESULTS[name, model]
            if outcome.kind != "trains":
                detail = re.sub(r"0x[0-9a-f]+", "0x…", outcome.detail).replace("\n", " ")
                general = detail.replace(type(built(model)).__name__, "<model>")
                groups.setdefault((name, outcome.kind, general), [detail]).append(model)
    lines = [MARKERS[0], "", matrix_table(), "", "Why a cell is refused or not applicable (the message of the first "
             "model named):", ""]
    for (name, kind, _), (detail, *models) in groups.items():
        lines.append(f"- {ALGORITHMS[name].__name__}, {kind} on {', '.join(models)}: {detail}")
    return "\n".join([*lines, "", MARKERS[1]])


def replace_block(path: Path, block: str) -> str:
    text = path.read_text()
    start, end = text.index(MARKERS[0]), text.index(MARKERS[1]) + len(MARKERS[1])
    return text[:start] + block + text[end:]


def test_the_published_matrix_is_this_runs():
    path, block = "docs/compatibility.md", docs_block
    missing = [(a, m) for a in ALGORITHMS for m in WORKLOADS if (a, m) not in RESULTS]
    if missing:
        pytest.skip(f"{len(missing)} cells did not run (timm or transformers missing, or a -k selection); "
                    f"install '.[test]' and run the whole file")
    target = ROOT / path
    updated = replace_block(target, block())
    if os.environ.get("COMPOSER_LAB_WRITE_MATRIX") == "1":
        target.write_text(updated)
    assert updated == target.read_text(), f"{path}'s compatibility matrix is not this run's; regenerate: {REGENERATE}"
