"""Experiment identity: a sweep folder is refused, with what differs in words, when an algorithm's
code, a value the factory reads (through a helper, a closure, a factory object's field) or the
factory's code changed; resume=False starts over."""

from __future__ import annotations

import itertools
import json
import linecache
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.cli import SweepExperiment
from composer_lab.explore import InlineExecutor, Sweep
from composer_lab.explore.identity import differences, experiment_identity, is_user_code
from composer_lab.explore.results import SweepFolderTaken
from tests.explore import factories

CELL = """
import torch
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from tests.explore.factories import make_trainer as _make

EPOCHS = '6ba'

def duration():
    return EPOCHS

def make_trainer(algorithms, seed):
    return _make(algorithms, seed, batches=duration())

class GaussianNoise(Algorithm):
    events = frozenset({Event.AFTER_DATALOADER})

    def __init__(self, std=0.1):
        self.std = std

    def apply(self, event, state, logger):
        inputs = state.batch_get_item(0)
        state.batch_set_item(0, inputs + self.std * torch.randn_like(inputs))
"""
_cells = itertools.count()


def notebook_cell(source: str = CELL) -> dict:
    """Run ``source`` as a notebook cell runs: in ``__main__``, its lines where inspect finds them."""
    filename = f"<cell-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def sweep(cell: dict, folder, **kwargs) -> Sweep:
    return Sweep(cell["make_trainer"], [cell["GaussianNoise"](), CutOut()], seeds=[0], orders=[(0, 1)],
                 executor=InlineExecutor(), folder=folder, **kwargs)


def test_the_identity_is_readable_in_sweep_json(tmp_path):
    sweep(notebook_cell(), tmp_path)
    experiment = json.loads((tmp_path / "sweep.json").read_text())["experiment"]
    assert experiment["values"]["EPOCHS"] == "'6ba'" and experiment["values"]["GaussianNoise.std"] == "0.1"
    assert "return EPOCHS" in experiment["code"]["duration"]["source"]  # reached through the factory's call
    assert "torch.randn_like" in experiment["code"]["GaussianNoise.apply"]["source"]
    assert experiment["algorithms"] == [{"name": "GaussianNoise", "class": "__main__.GaussianNoise"},
                                        {"name": "CutOut", "class": "composer_lab.algorithms.cutout.CutOut"}]
    assert experiment["metric"] == "metrics/eval/Accuracy" and experiment["composer_lab"]


def test_an_algorithm_whose_code_changed_is_refused_though_its_repr_is_the_same(tmp_path):
    before = notebook_cell()
    sweep(before, tmp_path)
    after = notebook_cell(CELL.replace("inputs + self.std", "inputs - self.std"))
    assert repr(after["GaussianNoise"]()) == repr(before["GaussianNoise"]())
    with pytest.raises(ValueError, match=r"holds results of another experiment: GaussianNoise.apply: source "
                                         r"changed \(the lines below\)\. Results of different experiments are not "
                                         r"mixed: choose a new folder, or pass resume=False") as refused:
        sweep(after, tmp_path)
    diff = str(refused.value).split("start over\n", 1)[1].splitlines()
    assert diff[:2] == ["--- GaussianNoise.apply (the folder's runs)", "+++ GaussianNoise.apply (now)"]
    assert [line for line in diff if line[:1] in "-+" and line[:3] not in ("---", "+++")] == [
        "-    state.batch_set_item(0, inputs + self.std * torch.randn_like(inputs))",
        "+    state.batch_set_item(0, inputs - self.std * torch.randn_like(inputs))"]
    sweep(before, tmp_path)  # the same experiment: resumed
    sweep(notebook_cell(CELL.replace("def duration():", "def duration():  # the length")), tmp_path)  # a comment


def test_a_global_read_by_a_helper_of_the_factory_is_part_of_the_experiment(tmp_path):
    cell = notebook_cell()
    sweep(cell, tmp_path)
    cell["EPOCHS"] = "12ba"  # the cell that sets it, run again
    with pytest.raises(ValueError, match=r"another experiment: EPOCHS: '6ba' -> '12ba'\. Results"):
        sweep(cell, tmp_path)


def test_closure_variables_and_factory_fields_are_part_of_the_experiment(tmp_path):
    def factory(batches):
        def make(algorithms, seed):
            return factories.make_trainer(algorithms, seed, batches)
        return make

    Sweep(factory("6ba"), [CutOut(), MixUp()], folder=tmp_path / "closure")
    with pytest.raises(ValueError, match=r"factory.<locals>.make closure batches: '6ba' -> '4ba'"):
        Sweep(factory("4ba"), [CutOut(), MixUp()], folder=tmp_path / "closure")
    Sweep(SweepExperiment(epochs=3), [CutOut(), MixUp()], folder=tmp_path / "cli")
    with pytest.raises(SweepFolderTaken, match=r"another experiment: SweepExperiment.epochs: 3 -> 12\. Results") \
            as taken:
        Sweep(SweepExperiment(epochs=12), [CutOut(), MixUp()], folder=tmp_path / "cli")
    worded = taken.value.worded("add --restart", {"SweepExperiment.epochs": "--epochs"})  # (the command line's terms)
    assert "another experiment: --epochs: 3 -> 12. Results" in worded and "or add --restart to delete" in worded
    assert "resume=False" not in worded and "SweepExperiment" not in worded


def test_resume_false_starts_over_and_trains_again(tmp_path):
    cell = notebook_cell()
    first = sweep(cell, tmp_path)
    first.run()
    assert list(first.results["samples"]) == [48]
    (tmp_path / "notes.txt").write_text("mine")
    cell["EPOCHS"] = "4ba"
    again = sweep(cell, tmp_path, resume=False)
    assert again.folder.rows() == {} and len(again.pending()) == 1
    assert list(again.run()["samples"]) == [32]  # 4 batches of 8: trained with the new value
    assert (tmp_path / "notes.txt").read_text() == "mine"  # what the sweep did not write stays


def test_a_factory_without_source_is_told_apart_by_its_compiled_code(tmp_path):
    cells = [{"factories": factories, "__name__": "__main__"} for _ in range(2)]
    for cell, batches in zip(cells, ("6ba", "7ba")):
        exec(f"def make_trainer(algorithms, seed):\n    return factories.make_trainer(algorithms, seed, {batches!r})",
             cell)
    Sweep(cells[0]["make_trainer"], [CutOut(), MixUp()], folder=tmp_path)
    with pytest.raises(ValueError, match=r"another experiment: make_trainer: source changed\. Results"):
        Sweep(cells[1]["make_trainer"], [CutOut(), MixUp()], folder=tmp_path)


def test_values_are_read_whole_and_once():
    cell = notebook_cell(CELL.replace("EPOCHS = '6ba'", "EPOCHS = '6ba'\nTABLE = pd.DataFrame({'x': range(100)})\n"
                                      "class Config:\n    pass\nconfig = Config()\nconfig.me = config\n"
                                      "MODEL = torch.nn.Linear(2, 2)\n")
                         .replace("return EPOCHS", "return EPOCHS if len(TABLE) and config.me and MODEL else None")
                         .replace("import torch", "import torch\nimport pandas as pd"))
    before = experiment_identity(cell["make_trainer"], [], [], "m")
    cell["TABLE"].loc[50, "x"] = -1  # a row a DataFrame's repr does not show
    changed = differences(before, experiment_identity(cell["make_trainer"], [], [], "m"))
    assert len(changed) == 1 and changed[0].startswith("TABLE: ")
    with torch.no_grad():
        cell["MODEL"].weight[0, 0] += 1  # a model's repr shows its layers, not its weights
    changed = differences(before, experiment_identity(cell["make_trainer"], [], [], "m"))
    assert [line.split(":")[0] for line in changed] == ["MODEL", "TABLE"]
    assert before["values"]["config.me"] == "__main__.Config (recorded above)"  # a cycle, walked once


def test_the_identity_is_the_same_in_another_process(tmp_path):
    # Sets (an algorithm's events) are ordered by string hashes, which differ from one process to the next.
    (tmp_path / "lab_algorithms.py").write_text(
        "from composer_lab.core.algorithm import Algorithm\nfrom composer_lab.core.event import Event\n\n"
        "class Twice(Algorithm):\n    events = frozenset({Event.BEFORE_LOSS, Event.AFTER_LOSS, Event.FIT_START})\n\n"
        "    def __init__(self):\n        self.tags = {'a', 'b', 'c', 'd'}\n\n"
        "    def apply(self, event, state, logger):\n        return None\n")
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); from lab_algorithms import Twice; "
              "from composer_lab.explore.identity import experiment_identity; "
              "from tests.explore.factories import make_trainer; "
              "print(json.dumps(experiment_identity(make_trainer, [Twice()], ['Twice'], 'm')))")
    root = Path(__file__).resolve().parents[2]
    identities = [json.loads(subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=root, check=True,
                                            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
                             .stdout) for seed in ("1", "2")]
    assert identities[0]["values"]["Twice.tags"] == "{'a', 'b', 'c', 'd'}"
    assert differences(*identities) == []


def test_what_is_user_code():
    cell = notebook_cell()
    assert is_user_code(cell["make_trainer"]) and is_user_code(factories.make_trainer)
    assert not any(map(is_user_code, (CutOut, json.dumps, pytest.raises, SweepExperiment)))


def test_differences_read_as_words():
    old = experiment_identity(factories.make_trainer, [CutOut()], ["CutOut"], "m")
    new = {**old, "metric": "n", "algorithms": [{"name": "MixUp", "class": "x.MixUp"}],
           "code": {**old["code"], "helper": "def helper(): ..."}}
    assert differences(old, new) == [
        "metric: 'm' -> 'n'",
        "algorithms: [CutOut (composer_lab.algorithms.cutout.CutOut)] -> [MixUp (x.MixUp)]",
        "helper: newly reached"]
    assert differences(old, old) == []
