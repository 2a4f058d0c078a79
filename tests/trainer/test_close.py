"""Closing a trainer, as Composer does: each callback's close(state, logger), then post_close(),
no events after; at interpreter exit for a trainer still alive, without keeping any alive."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import pytest

from composer_lab import Callback

from tests.trainer.helpers import make_trainer


class Closing(Callback):
    """Records its lifecycle calls in ``calls`` (shared, to see the order across callbacks)."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def close(self, state, logger) -> None:
        self.calls.append((self.name, "close", state, logger))

    def post_close(self) -> None:
        self.calls.append((self.name, "post_close"))


def test_close_closes_every_callback_then_post_closes_and_refuses_to_train():
    calls: list = []
    trainer = make_trainer(callbacks=[Closing("a", calls), Closing("b", calls)], max_duration="1ba")
    trainer.fit()
    trainer.close()
    state, logger = trainer.state, trainer.logger
    assert calls == [("a", "close", state, logger), ("b", "close", state, logger), ("a", "post_close"),
                     ("b", "post_close")]
    trainer.close()  # a second close does nothing
    assert len(calls) == 4
    with pytest.raises(RuntimeError, match="closed"):
        trainer.fit("1ba")


def test_a_trainer_does_not_stay_alive_for_its_exit_hook():
    trainer = make_trainer()
    ref = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert ref() is None


_SCRIPT = """
import gc
import sys
sys.path.insert(0, {root!r})
from composer_lab import Callback
from tests.trainer.helpers import make_trainer

class Report(Callback):
    def __init__(self, name):
        self.name = name

    def close(self, state, logger):
        print(self.name, "close", flush=True)

    def post_close(self):
        print(self.name, "post_close", flush=True)

alive = make_trainer(callbacks=[Report("alive")])
closed = make_trainer(callbacks=[Report("closed")])
closed.close()
make_trainer(callbacks=[Report("collected")])  # dropped without close(): closed when collected (Composer's __del__)
gc.collect()
"""


def test_trainers_are_closed_when_collected_or_at_interpreter_exit(tmp_path):
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(root=root)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == ["closed close", "closed post_close", "collected close",
                                              "collected post_close", "alive close", "alive post_close"]
    assert "Traceback" not in result.stderr
