"""No import side effects: change detection's PyTorch hooks exist only while a trainer runs."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules import module as module_hooks
from torch.optim import optimizer as optimizer_hooks
from torch.utils.data import DataLoader, TensorDataset

from composer_lab import Algorithm, Callback, Engine, Event, State, Trainer


def global_hooks() -> tuple[int, int, int]:
    return (len(module_hooks._global_module_registration_hooks), len(module_hooks._global_parameter_registration_hooks),
            len(optimizer_hooks._global_optimizer_post_hooks))


IMPORT_EVERYTHING = """
import json, torch
from torch.nn.modules import module as m
from torch.optim import optimizer as o
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
png = shell.display_formatter.formatters["image/png"]
before = (len(m._global_module_registration_hooks), len(m._global_parameter_registration_hooks),
          len(o._global_optimizer_post_hooks), len(m._global_forward_hooks), len(png.type_printers))
import composer_lab, composer_lab.lab, composer_lab.algorithms, composer_lab.trainer
after = (len(m._global_module_registration_hooks), len(m._global_parameter_registration_hooks),
         len(o._global_optimizer_post_hooks), len(m._global_forward_hooks), len(png.type_printers))
from composer_lab.lab.plots import plot_loss
print(json.dumps({"before": before, "after": after}))
"""


def test_importing_composer_lab_registers_no_hooks_or_formatters():
    out = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after"] == seen["before"]


def test_a_figure_displays_as_png_without_a_formatter():
    from composer_lab.lab.plots import LabFigure

    fig = LabFigure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    assert fig._repr_png_().startswith(b"\x89PNG")


class SeesHooks(Callback):
    def __init__(self):
        self.seen = []

    def batch_end(self, state, logger):
        self.seen.append(global_hooks())

    def eval_batch_end(self, state, logger):
        self.seen.append(global_hooks())


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)),
                      batch_size=8)


@pytest.mark.parametrize("check_writes", ["0", "1"])
def test_hooks_are_installed_during_fit_and_eval_and_removed_after(check_writes, monkeypatch):
    """The registration hooks while a loop runs (also under check_writes), no optimizer-step hook;
    none before or after."""
    monkeypatch.setenv("COMPOSER_LAB_CHECK_WRITES", check_writes)
    before = global_hooks()
    spy = SeesHooks()
    trainer = Trainer(torch.nn.Linear(4, 2), loader(), "1ep", loss_fn=F.cross_entropy, eval_dataloader=loader(),
                      callbacks=[spy], progress_bar=False)
    assert global_hooks() == before
    trainer.fit()
    trainer.eval()
    during = (before[0] + 1, before[1] + 1, before[2])
    assert spy.seen and all(seen == during for seen in spy.seen)
    assert global_hooks() == before


def test_a_users_modules_and_optimizers_outside_a_run_are_untouched():
    trainer = Trainer(torch.nn.Linear(4, 2), loader(), "1ep", loss_fn=F.cross_entropy, progress_bar=False)
    trainer.fit()
    hooks = trainer.engine.observer.registrations
    mine = torch.nn.Sequential(torch.nn.Linear(3, 3))
    mine.add_module("extra", torch.nn.ReLU())
    optimizer = torch.optim.SGD(mine.parameters(), lr=0.1)
    mine(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert trainer.engine.observer.registrations == hooks  # nothing of ours ran


class Surgery(Algorithm):
    """Replaces a module without writing any parameter: seen only by walking the model."""

    events = frozenset({Event.AFTER_LOSS})

    def apply(self, event, state, logger):
        state.model.extra = torch.nn.Identity()


def test_changes_are_detected_outside_a_run_too():
    """Without the hooks (an engine driven by hand) the watcher walks the model every call."""
    state = State(torch.nn.Sequential(torch.nn.Linear(4, 2)), "1ep")
    state.algorithms = [Surgery()]
    engine = Engine(state, trace="ran")
    engine.run_event(Event.BEFORE_LOSS)
    engine.run_event(Event.AFTER_LOSS)
    assert list(engine.trace.invocations.changed) == [("model",)]
    with engine.watching():
        state.model.add_module("other", torch.nn.ReLU())  # while no call runs: not blamed on the next one
        engine.run_event(Event.BEFORE_LOSS)
        engine.run_event(Event.AFTER_LOSS)
    assert list(engine.trace.invocations.changed) == [("model",), ("model",)]
