"""Checkpoints: one ``.pt`` file of tensors and plain values, read with ``weights_only=True``
(loading a checkpoint never runs code), which refers to the trace's and the metrics' parquet
chunks in the save_folder beside it, and the callback that writes them when due."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pandas as pd
import pyarrow as pa
import torch

from composer_lab.core.callback import Callback
from composer_lab.core.logger import METRIC_COLUMNS
from composer_lab.core.time import Timestamp
from composer_lab.core.trace import Trace, read_parquet, write_parquet
from composer_lab.core.trace.storage import ChunkStore, to_table
from composer_lab.trainer import distributed
from composer_lab.trainer.distributed import barrier
from composer_lab.trainer.interval import Interval
from composer_lab.trainer.param_order import align_param_order, param_names
from composer_lab.trainer.required import add_required_algorithms, mark_required
from composer_lab.trainer.rng import rng_state

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "CheckpointNotFoundError", "CheckpointSaver",
           "save_checkpoint", "load_checkpoint", "frame_to_bytes", "frame_from_bytes", "training_payload", "resume"]

CHECKPOINT_FORMAT = "composer_lab.checkpoint/1"
OWNER_FILE = "run.json"
"""In a save_folder: which run its checkpoints belong to."""
TRACE_CHUNKS = "trace_chunks"
"""In a save_folder: the trace's spilled chunks, which its checkpoints refer to (never rewritten)."""
METRICS_CHUNKS = "metrics_chunks"
"""In a save_folder: the metrics, one chunk per checkpoint of the rows new since the last, which
its checkpoints refer to (never rewritten)."""
_METRIC_TYPES = {"batch": "int64", "epoch": "int64", "phase": "string", "name": "string", "value": "float64"}
_METRIC_KEYS = {"metrics": ("batch", "epoch")}
_REQUIRED = ("format", "model", "optimizers", "schedulers", "timestamp", "rng", "algorithms",
             "metrics", "trace")


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: corrupt, not ours, or not matching the trainer."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """``load_path`` names no file."""


def frame_to_bytes(frame: pd.DataFrame) -> bytes:
    """A DataFrame as parquet bytes (a type ``weights_only`` loading accepts)."""
    buffer = io.BytesIO()
    write_parquet(frame, buffer)
    return buffer.getvalue()


def frame_from_bytes(data: bytes) -> pd.DataFrame:
    return read_parquet(io.BytesIO(data))


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
    there. ``saved`` lists the paths this process wrote; ``metrics`` holds the metric chunks
    its checkpoints refer to (a resumed checkpoint's, then one per checkpoint).

    A folder belongs to one run: the first checkpoint writes ``run.json`` (the run's id and
    name), and :meth:`claim` refuses a folder that holds another run's checkpoints, so a new
    run never overwrites them (a resumed run keeps its id and may go on writing there)."""

    writes = frozenset()  # reads the State to save it

    def __init__(self, folder: Union[str, os.PathLike], interval: Interval,
                 payload: Callable[[], Optional[dict[str, Any]]]) -> None:
        self.folder = Path(folder)
        self.interval = interval
        self.payload = payload
        self.saved: list[Path] = []
        self.owner: Optional[dict[str, str]] = None
        self.metrics = ChunkStore(self.folder / METRICS_CHUNKS, _METRIC_KEYS)

    def claim(self, run_id: str, run_name: str, trace: Trace) -> None:
        """Take the folder for the run ``run_id``; raise if it holds another run's checkpoints.
        On the rank that writes, ``trace`` spills into it from now on and a resumed checkpoint's
        metric chunks are linked there, so each checkpoint refers to chunks beside it."""
        marker = self.folder / OWNER_FILE
        owner = json.loads(marker.read_text()) if marker.is_file() else None
        if owner is None and any(self.folder.glob("ep*-ba*.pt")):
            owner = {"run_id": None, "run_name": "of unknown origin"}
        if owner is not None and owner.get("run_id") != run_id:
            raise ValueError(f"save_folder {str(self.folder)!r} holds the checkpoints of another run "
                             f"({owner.get('run_name')!r}); a new run would overwrite them. Choose another "
                             f"save_folder, or continue that run with load_path= one of its checkpoints")
        self.owner = {"run_id": run_id, "run_name": run_name}
        if distributed.get_rank() == 0:
            trace.spill_to(self.folder / TRACE_CHUNKS)
            self.metrics.move_to(self.folder / METRICS_CHUNKS, link=True)

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


# -- what a checkpoint holds --------------------------------------------------------------------
def training_payload(trainer: Any) -> Optional[dict[str, Any]]:
    """Everything a resumed run of ``trainer`` needs, in types ``torch.load(weights_only=True)``
    reads. Under torchrun every rank calls it (it gathers each rank's random state) and rank 0,
    which writes the checkpoint, gets the payload; the other ranks get None."""
    state, trace, scaler = trainer.state, trainer.trace, trainer.scaler
    rank_rng = distributed.gather_object({"rng": rng_state(), "generators": state.generator_states()})
    if rank_rng is None:
        return None
    return {
        "run_name": state.run_name,
        "run_id": trainer.run_id,
        "seed": state.seed,
        "max_duration": str(state.max_duration),
        "model": state.model.state_dict(),
        "frozen": [name for name, p in state.model.named_parameters() if not p.requires_grad],
        "optimizer_params": param_names(state.optimizers, state.model),
        "optimizers": [o.state_dict() for o in state.optimizers],
        "schedulers": [s.state_dict() for s in state.schedulers],
        "scaler": scaler.state_dict() if scaler is not None else None,
        "timestamp": state.timestamp.state_dict(),
        "rng": rng_state(),
        "generators": state.generator_states(),
        "algorithms": mark_required(_named_states(state.algorithms, trace), state.algorithms),
        "callbacks": _named_states(state.callbacks, trace),
        "metrics": _metrics_payload(trainer),  # chunks by reference (no save_folder: the rows)
        "trace": trace.checkpoint(),  # its spilled chunks by reference and the rows in memory: bounded
        **({"rank_rng": rank_rng} if len(rank_rng) > 1 else {}),
    }


def _metrics_payload(trainer: Any) -> dict[str, Any]:
    """The metrics for a checkpoint. With a save_folder the rows logged since the last chunk go
    there as one more chunk and the checkpoint refers to all of them, so its size and the time
    to write it do not grow with the run; without one it carries the rows."""
    saver, metrics = trainer.checkpoint_saver, trainer.metrics
    if saver is None:
        return ChunkStore(None, _METRIC_KEYS).snapshot({"metrics": _metric_table(metrics)})
    # (the chunks hold the logger's first rows: written in order, and loaded first on a resume)
    saver.metrics.write({"metrics": _metric_table(metrics.iloc[saver.metrics.rows("metrics"):])})
    return saver.metrics.snapshot({})


def _metric_table(frame: pd.DataFrame) -> pa.Table:
    return to_table([frame[column] for column in METRIC_COLUMNS], _METRIC_TYPES)


def resume(trainer: Any, path: Union[str, os.PathLike]) -> None:
    """Resume ``trainer`` from the checkpoint at ``path``: its training state now, the metrics
    logged before it (once each), and its random state when the first batch is trained, where
    the saving run went on from it (``trainer.feed``)."""
    state = trainer.state
    ckpt = load_checkpoint(path, map_location=state.device)
    add_required_algorithms(trainer, ckpt["algorithms"], path)  # (surgery the checkpoint's model had)
    _restore_training(ckpt, path, state, trainer.trace, trainer.scaler)
    trainer.run_id = ckpt.get("run_id", trainer.run_id)
    trainer.feed.resume_random_state(distributed.rank_random_state(ckpt))
    _resume_metrics(trainer, _beside(ckpt["metrics"], Path(path), METRICS_CHUNKS), path)
    trainer.resumed_from = {"path": str(path), "trace": _saved_trace(ckpt["trace"], Path(path))}
    ts = state.timestamp
    trainer.trace.note("load", f"resumed from {path} at epoch {ts.epoch}, batch {ts.batch}", ts)


def _resume_metrics(trainer: Any, saved: dict[str, Any], path: Any) -> None:
    """Give the logger the checkpoint's metrics, then those it logged before the load (INIT's) at
    a (batch, epoch, phase, name) the checkpoint lacks, so each is kept once however often a
    run is resumed and the frame is the uninterrupted run's. Its chunks (exactly those up to
    the checkpoint) stay the first of the saver's, so the next checkpoint writes only the rows
    after them."""
    store = ChunkStore.restored(saved, _METRIC_KEYS)
    try:
        history = store.read("metrics", _METRIC_TYPES)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {str(path)!r} refers to metric chunks in {saved['folder']!r}, which "
                              f"are missing; keep the {METRICS_CHUNKS!r} folder of its save_folder beside it") from None
    rows = list(zip(*(history[column].to_pylist() for column in METRIC_COLUMNS)))
    logged = trainer.metrics[list(METRIC_COLUMNS)].astype(object).itertuples(index=False, name=None)
    seen = {row[:4] for row in rows}  # (batch, epoch, phase, name)
    trainer.logger.load_metrics(rows + [row for row in logged if row[:4] not in seen])
    store.tail = {}  # (the rows in the payload follow the chunks in the logger: the next chunk holds them)
    if trainer.checkpoint_saver is not None:
        trainer.checkpoint_saver.metrics = store


def _beside(saved: Any, path: Path, chunks: str) -> Any:
    """A checkpoint's chunk store as saved (``saved``), reading its chunks from the folder
    ``chunks`` beside the checkpoint at ``path`` when there is one (so a save_folder moved or
    copied elsewhere keeps them) or else where they were written. An older checkpoint's metrics
    (parquet bytes) read as a store of those rows alone."""
    if isinstance(saved, bytes):
        return {"folder": None, "chunks": [], "tail": {"metrics": saved}}
    beside = path.parent / chunks
    return {**saved, "folder": str(beside)} if beside.is_dir() else saved


def _saved_trace(saved: dict[str, Any], path: Path) -> Trace:
    """The trace the checkpoint at ``path`` holds: its chunks, read when asked, beside it or where
    they were written, and its rows in memory then (a checkpoint written before the trace
    spilled holds its whole frames)."""
    if "format" in saved:
        return Trace.from_checkpoint(_beside(saved, path, TRACE_CHUNKS))
    return Trace.from_frames(**{name: frame_from_bytes(data) for name, data in saved.items()})


def _restore_training(ckpt: dict[str, Any], path: Any, state: Any, trace: Any, scaler: Any) -> None:
    """Give ``state`` the checkpoint's weights (and frozen parameters), optimizers, schedulers,
    scaler, algorithm and callback state and timestamp; the random state is left to the
    trainer, which restores it where the saving run went on from it."""
    try:
        state.model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {str(path)!r} does not fit this model ({_state_dict_mismatch(err)}); "
                              f"build the same model, with the same surgery algorithms, as the run that "
                              f"wrote it") from None
    frozen = set(ckpt.get("frozen", ()))  # by an algorithm such as LayerFreezing
    for name, parameter in state.model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)
    align_param_order(state.optimizers, state.model, ckpt.get("optimizer_params"))  # (surgery may reorder them)
    _load_each(state.optimizers, ckpt["optimizers"], "optimizers", path)
    _load_each(state.schedulers, ckpt["schedulers"], "schedulers", path)
    if scaler is not None and ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    for algo, saved in _saved_states(state.algorithms, ckpt["algorithms"], trace):
        if saved is not None:
            algo.load_state_dict(saved)
        elif algo.required_on_load():
            raise CheckpointError(f"checkpoint {str(path)!r} has no state for {trace.label(algo)}, "
                                  f"which needs it to resume; resume with the algorithms the run used")
    for cb, saved in _saved_states(state.callbacks, ckpt.get("callbacks", []), trace):
        if saved is not None:
            cb.load_state_dict(saved)
    state.timestamp = Timestamp.from_state_dict(ckpt["timestamp"])


def _named_states(objs: Any, trace: Any) -> list[dict[str, Any]]:
    """The state of each algorithm or callback under its name in the trace ('LabelSmoothing',
    'LabelSmoothing#2'), so a resumed run matches states by name, not by position."""
    return [{"name": trace.label(obj), "cls": type(obj).__name__, "state": obj.state_dict()} for obj in objs]


def _saved_states(objs: Any, entries: list, trace: Any) -> list[tuple[Any, Optional[dict]]]:
    """Each of ``objs`` with the state :func:`_named_states` saved under its name, or None (the
    lists may differ: a resumed run without a progress bar, callbacks in another order).
    Entries of the older positional format, without names, match nothing."""
    saved = {entry["name"]: entry["state"] for entry in entries if "name" in entry and "state" in entry}
    return [(obj, saved.get(trace.label(obj))) for obj in objs]


def _load_each(objects: list, states: list, name: str, path: Any) -> None:
    if len(objects) != len(states):
        raise CheckpointError(f"checkpoint {str(path)!r} holds {len(states)} {name} but the trainer has "
                              f"{len(objects)}; pass the same {name} as the run that wrote it")
    for obj, obj_state in zip(objects, states):
        obj.load_state_dict(obj_state)


def _state_dict_mismatch(err: RuntimeError) -> str:
    """The first lines of ``load_state_dict``'s error that say what differs (missing or
    unexpected keys, shape mismatches), without its header."""
    lines = [line.strip().rstrip(".") for line in str(err).splitlines()[1:] if line.strip()]
    summary = "; ".join(lines[:3]) + ("; ..." if len(lines) > 3 else "")
    return summary if len(summary) < 600 else summary[:600] + " ..."
