"""Every library algorithm and every callback the trainer adds declares ``writes`` truthfully: with
full change detection forced (each declaration set aside), the fields a call changed are among the
declared ones. A lie would hide changes from the trace, since a declaration is trusted."""

import warnings

import pytest
import torch
from torch import nn

from composer_lab import Algorithm, Event
from composer_lab.algorithms import ALGORITHMS
from composer_lab.trainer.checkpoint import CheckpointSaver
from composer_lab.trainer.progress import ProgressBar

from tests.trainer.every_algorithm import LANGUAGE_MODEL_ALGORITHMS, NoisyImages, NoisyTokens, trainer_for
from tests.trainer.helpers import make_trainer


def undeclared_changes(monkeypatch, build) -> tuple[dict, dict]:
    """Train (and evaluate) the trainer ``build()`` gives with every ``writes`` set to None (watched fully); return
    each call's name to the fields its calls changed, and to its class's declaration."""
    declared = {}
    trainer = build()
    for obj in (*trainer.state.algorithms, *trainer.state.callbacks):
        cls = type(obj)
        declared[trainer.trace.label(obj)] = cls.writes
        monkeypatch.setattr(cls, "writes", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit()
        if trainer.eval_dataloader is not None:
            trainer.eval()  # (EMA swaps its weights in for evaluation)
    calls = trainer.trace.invocations
    changed = calls[calls.matched].groupby(["name", "event"], observed=True).changed.agg(
        lambda rows: set().union(*rows)).to_dict()
    return changed, declared


def declared_at(writes, event: str):
    """What ``writes`` declares at ``event`` (a dict: event by event; None: nothing, unknown)."""
    return writes.get(Event(event)) if isinstance(writes, dict) else writes


def lies(changed: dict, declared: dict) -> dict:
    """Each name to the fields its calls changed beyond what it declares at their events."""
    out = {}
    for (name, event), fields in changed.items():
        if extra := fields - (declared_at(declared[name], event) or frozenset()):
            out.setdefault(name, set()).update(extra)
    return out


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_library_algorithm_and_the_trainers_callbacks_change_only_what_they_declare(name, monkeypatch,
                                                                                         tmp_path):
    eval_set = NoisyTokens(16) if name in LANGUAGE_MODEL_ALGORITHMS else NoisyImages(16)
    eval_data = torch.utils.data.DataLoader(eval_set, batch_size=8)
    changed, declared = undeclared_changes(monkeypatch, lambda: trainer_for(
        name, progress_bar=True, save_folder=str(tmp_path), save_interval="1ba", eval_dataloader=eval_data))
    assert {ProgressBar.__name__, CheckpointSaver.__name__} <= {name for name, _ in changed}
    assert all(isinstance(declared_at(declared[n], e), frozenset) for n, e in changed), "every one of them declares"
    assert lies(changed, declared) == {}


@pytest.mark.parametrize("name", ["mixup", "cutmix"])
def test_mixing_with_an_interpolated_loss_changes_only_what_it_declares(name, monkeypatch):
    def build():
        trainer = trainer_for(name)
        trainer.state.algorithms = [ALGORITHMS[name](interpolate_loss=True)]  # (no work at INIT to miss)
        return trainer

    changed, declared = undeclared_changes(monkeypatch, build)
    assert any("loss" in fields for fields in changed.values()) and lies(changed, declared) == {}


class Liar(Algorithm):
    """Declares that it changes only the batch, yet writes a weight."""

    events = frozenset({Event.AFTER_LOSS})
    writes = frozenset({"batch"})

    def apply(self, event, state, logger):
        with torch.no_grad():
            next(state.model.parameters()).mul_(1.0)


def test_the_check_catches_a_false_declaration(monkeypatch):
    changed, declared = undeclared_changes(monkeypatch, lambda: make_trainer(algorithms=[Liar()],
                                                                             model=nn.Linear(6, 3)))
    assert lies(changed, declared) == {"Liar": {"model"}}
