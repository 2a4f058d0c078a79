"""docs/errors.md, the catalogue of rejected inputs, run as tests: each row's input must raise
the documented exception with the documented message, where '…' stands for any text."""

from __future__ import annotations

import ast
import builtins
import functools
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import composer_lab.functional as cf
from composer_lab import algorithms, core, data, explore, lab, models, tracking
from composer_lab import trainer as trainer_layer
from composer_lab.algorithms import LabelSmoothing
from composer_lab.cli import SweepExperiment, execute, parse_algorithms
from composer_lab.core import Engine, State
from composer_lab.lab import Control
from composer_lab.trainer import Trainer, distributed
from composer_lab.trainer.checkpoint import CheckpointNotFoundError, save_checkpoint

CATALOGUE = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
LAYERS = ("core", "trainer", "algorithms", "explore", "lab", "data and command line")
MIN_ROWS = 30
HEADER = ("input", "exception", "message")

IMPORTS: dict[str, Any] = {
    "torch": torch, "F": F, "pd": pd, "cf": cf, "parse_algorithms": parse_algorithms, "distributed": distributed,
    "CheckpointNotFoundError": CheckpointNotFoundError, "execute": execute, "SweepExperiment": SweepExperiment,
    **{name: getattr(module, name) for module in (core, trainer_layer, tracking, algorithms, explore, lab, data, models)
       for name in module.__all__},
}
"""What the inputs may use besides the fixtures: the public names of every layer."""


class Fixtures:
    """The small objects the inputs name (described in docs/errors.md), built on first use."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        return torch.nn.Linear(4, 2)

    @functools.cached_property
    def loader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)

    @functools.cached_property
    def trainer(self) -> Trainer:
        return Trainer(self.model, self.loader, "2ba", loss_fn=F.cross_entropy, algorithms=[LabelSmoothing(0.1)],
                       progress_bar=False, run_name="demo")

    @functools.cached_property
    def fitted(self) -> Trainer:
        self.trainer.fit()
        return self.trainer

    @functools.cached_property
    def state(self) -> State:
        return State(self.model, "1ep")

    @functools.cached_property
    def engine(self) -> Engine:
        return Engine(self.state)

    @functools.cached_property
    def control(self) -> Control:
        return Control(self.trainer)

    @functools.cached_property
    def images(self) -> torch.Tensor:
        return torch.rand(4, 3, 8, 8)

    @functools.cached_property
    def labels(self) -> torch.Tensor:
        return torch.randint(0, 10, (4,))

    @functools.cached_property
    def folder(self) -> Path:
        path = self.tmp / "empty"
        path.mkdir()
        return path

    @functools.cached_property
    def text_file(self) -> Path:
        path = self.tmp / "notes.txt"
        path.write_text("not a checkpoint")
        return path

    @functools.cached_property
    def checkpoint(self) -> Path:
        return save_checkpoint(self.trainer.checkpoint_payload(), self.tmp / "ep0-ba0.pt")

    @functools.cached_property
    def orphan_checkpoint(self) -> Path:
        """A checkpoint copied out of its save_folder, which is then removed (its metric chunks with it)."""
        saved, alone = self.tmp / "saved", self.tmp / "alone"
        Trainer(self.model, self.loader, "1ba", loss_fn=F.cross_entropy, save_folder=saved, save_interval="1ba",
                progress_bar=False).fit()
        alone.mkdir()
        copy = Path(shutil.copy(saved / "ep0-ba1.pt", alone))
        shutil.rmtree(saved)
        return copy


FIXTURES = frozenset(name for name, value in vars(Fixtures).items() if isinstance(value, functools.cached_property))


@dataclass(frozen=True)
class Row:
    """One row of the catalogue: the layer's section, the input, the exception's name, the message."""

    layer: str
    input: str
    exception: str
    message: str

    def __str__(self) -> str:
        return f"{self.layer}: {self.input}"


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row; ``\\|`` is a literal pipe."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def _code(cell: str) -> str:
    """The text of a cell holding one code span (```` `x` ```` or ```` `` x ` y `` ````)."""
    found = re.fullmatch(r"(`+) ?(.*?) ?\1", cell)
    if found is None:
        raise ValueError(f"catalogue cell {cell!r} is not a single `code span`")
    return found.group(2)


def parse_catalogue(text: str) -> list[Row]:
    """The rows of every ``| input | exception | message |`` table, each with the '## ' heading above it."""
    rows, layer, in_table = [], "", False
    for line in text.splitlines():
        if line.startswith("## "):
            layer = line[3:].strip().lower()
        if not line.startswith("|"):
            in_table = False
        elif _cells(line) == list(HEADER):
            in_table = True
        elif in_table and not re.fullmatch(r"\|[\s:|-]+\|", line.strip()):
            rows.append(Row(layer, *map(_code, _cells(line))))
    return rows


TEXT = CATALOGUE.read_text(encoding="utf-8")
ROWS = parse_catalogue(TEXT)


def free_names(source: str) -> set[str]:
    """The names ``source`` reads without binding them itself (lambda arguments are bound)."""
    nodes = list(ast.walk(ast.parse(source)))
    loaded = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.arg for n in nodes if isinstance(n, ast.arg)}
    bound |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return loaded - bound


def namespace(source: str, tmp: Path) -> dict[str, Any]:
    """The imports and the fixtures ``source`` names."""
    fixtures = Fixtures(tmp)
    return {**IMPORTS, **{name: getattr(fixtures, name) for name in free_names(source) & FIXTURES}}


def exception_class(name: str) -> type:
    """The exception class a row names: a builtin, or one of the imports."""
    cls = IMPORTS.get(name, getattr(builtins, name, None))
    assert isinstance(cls, type) and issubclass(cls, BaseException), f"{name!r} is not an exception class"
    return cls


def message_pattern(documented: str) -> re.Pattern:
    """The documented message as a regular expression, '…' matching any text."""
    return re.compile(".*".join(re.escape(part) for part in documented.split("…")), re.DOTALL)


def message_of(err: BaseException) -> str:
    """The message an exception was raised with (KeyError's ``str`` adds quotes)."""
    return str(err.args[0]) if len(err.args) == 1 else str(err)


def test_catalogue_has_enough_rows_in_every_layer():
    assert len(ROWS) >= MIN_ROWS
    assert sorted({row.layer for row in ROWS}) == sorted(LAYERS)


def test_every_fixture_is_described():
    legend = TEXT[:TEXT.index("\n## ")]
    assert not [name for name in sorted(FIXTURES) if f"`{name}`: " not in legend], "describe them above the tables"


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_every_row_is_backed_by_a_runnable_case(row):
    compile(row.input, "<catalogue>", "exec")
    unknown = free_names(row.input) - FIXTURES - set(IMPORTS) - set(dir(builtins))
    assert not unknown, f"{row}: no fixture or import for {sorted(unknown)}; add one to this file"
    exception_class(row.exception)
    assert row.message, f"{row}: no message documented"


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_row_raises_the_documented_error(row, tmp_path):
    expected = exception_class(row.exception)
    scope = namespace(row.input, tmp_path)
    with pytest.raises(Exception) as info:
        exec(compile(row.input, "<catalogue>", "exec"), scope)
    assert type(info.value) is expected, f"{row}: raised {type(info.value).__name__}: {info.value}"
    actual = message_of(info.value)
    assert message_pattern(row.message).fullmatch(actual), (
        f"{row}:\n documented {row.message!r}\n actual     {actual!r}")
