"""Checkpoints: one ``.pt`` file of tensors and plain values, read with ``weights_only=True``
(loading a checkpoint never runs code), and the callback that writes them when due."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pandas as pd
import torch

from composer_lab.core.callback import Callback
from composer_lab.trainer.distributed import barrier
from composer_lab.trainer.interval import Interval

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "CheckpointNotFoundError", "CheckpointSaver",
           "save_checkpoint", "load_checkpoint", "frame_to_bytes", "frame_from_bytes"]

CHECKPOINT_FORMAT = "composer_lab.checkpoint/1"
OWNER_FILE = "run.json"
"""In a save_folder: which run its checkpoints belong to."""
_REQUIRED = ("format", "model", "optimizers", "schedulers", "timestamp", "rng", "algorithms",
             "metrics", "trace")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: corrupt, not ours, or not matching the trainer."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """``load_path`` names no file."""


def frame_to_bytes(frame: pd.DataFrame) -> bytes:
    """A DataFrame as parquet bytes (a type ``weights_only`` loading accepts)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def frame_from_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(data))


def save_checkpoint(payload: dict[str, Any], path: Union[str, os.PathLike]) -> Path:
    """Write ``payload`` to ``path`` atomically: into a temporary file, flushed to disk, then
    renamed over ``path``. A failure midway removes the temporary file and leaves whatever
    was at ``path`` (the last good checkpoint) as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _reason(err: BaseException) -> str:
    """The error's type and first sentence: torch's weights-only failures go on to advise
    ``weights_only=False``, which a checkpoint never needs and which can run code."""
    first = str(err).strip().split(". ")[0].splitlines()
    return f"{type(err).__name__}: {first[0]}" if first else type(err).__name__


def load_checkpoint(path: Union[str, os.PathLike], map_location: Any = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, safely (``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointNotFoundError(f"load_path {str(path)!r}: no such checkpoint file; give the path of "
                                      f"a .pt file written by Trainer(save_folder=...), e.g. "
                                      f"'{Path('checkpoints') / 'ep1-ba10.pt'}'")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, OSError) as err:
        raise CheckpointError(f"load_path {str(path)!r} cannot be read as a composer_lab checkpoint "
                              f"({_reason(err)}); "
                              f"it is corrupt or not a checkpoint: pick another file from the save_folder "
                              f"or train without load_path") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"load_path {str(path)!r} is a torch file but not a composer_lab checkpoint "
                              f"(expected format {CHECKPOINT_FORMAT!r}); give a file written by "
                              f"Trainer(save_folder=...)")
    missing = [k for k in _REQUIRED if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {str(path)!r} lacks {missing}; it is damaged, pick another one")
    return payload


class CheckpointSaver(Callback):
    """Writes ``folder/ep{E}-ba{B}.pt`` at BATCH_CHECKPOINT / EPOCH_CHECKPOINT when
    ``interval`` is due; ``payload()`` gives what to write, or None where this process does not
    write: under torchrun rank 0 writes, and every rank waits at a barrier until the file is
    there. ``saved`` lists the paths this process wrote.

    A folder belongs to one run: the first checkpoint writes ``run.json`` (the run's id and
    name), and :meth:`claim` refuses a folder that holds another run's checkpoints, so a new
    run never overwrites them (a resumed run keeps its id and may go on writing there)."""

    def __init__(self, folder: Union[str, os.PathLike], interval: Interval,
                 payload: Callable[[], Optional[dict[str, Any]]]) -> None:
        self.folder = Path(folder)
        self.interval = interval
        self.payload = payload
        self.saved: list[Path] = []
        self.owner: Optional[dict[str, str]] = None

    def claim(self, run_id: str, run_name: str) -> None:
        """Take the folder for the run ``run_id``; raise if it holds another run's checkpoints."""
        marker = self.folder / OWNER_FILE
        owner = json.loads(marker.read_text()) if marker.is_file() else None
        if owner is None and any(self.folder.glob("ep*-ba*.pt")):
            owner = {"run_id": None, "run_name": "of unknown origin"}
        if owner is not None and owner.get("run_id") != run_id:
            raise ValueError(f"save_folder {str(self.folder)!r} holds the checkpoints of another run "
                             f"({owner.get('run_name')!r}); a new run would overwrite them. Choose another "
                             f"save_folder, or continue that run with load_path= one of its checkpoints")
        self.owner = {"run_id": run_id, "run_name": run_name}

    def batch_checkpoint(self, state: Any, logger: Any) -> None:
        if self.interval.due_after_batch(state.timestamp):
            self._save(state)

    def epoch_checkpoint(self, state: Any, logger: Any) -> None:
        if self.interval.due_after_epoch(state.timestamp):
            self._save(state)

    def _save(self, state: Any) -> None:
        ts = state.timestamp
        payload = self.payload()
        if payload is not None:
            if self.owner is not None and not self.saved:
                self.folder.mkdir(parents=True, exist_ok=True)
                (self.folder / OWNER_FILE).write_text(json.dumps(self.owner))
            self.saved.append(save_checkpoint(payload, self.folder / f"ep{ts.epoch}-ba{ts.batch}.pt"))
        barrier()
