"""Every rank's trace in one place: on rank 0 of a torchrun launch, what
:func:`~composer_lab.trainer.distributed.gather_traces` brought from the ranks, and in a run folder.

Each rank's trace is kept as a saved trace (:meth:`Trace.save`) in ``<folder>/rank<r>``: the
chunk files it received (immutable, so a gather sends only those the folder lacks), its rows in
memory at the last gather as one more chunk, its notes and ``trace.json``. Memory does not grow
with the run: the frames with a ``rank`` column are built when read, and :meth:`RankTraces.query`
asks each rank's trace a bounded question (:meth:`Trace.query`). What rank 0 gathered stays in
the folder (a trainer's ``save_folder``/``rank_traces``) if a rank, or rank 0, fails later.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

import pandas as pd

from composer_lab.core.trace import Trace
from composer_lab.core.trace.storage import temporary_folder

__all__ = ["RankTraces", "TRACE_FRAMES", "RANK_TRACES"]

TRACE_FRAMES = ("events", "invocations", "notes")
RANK_TRACES = "rank_traces"
"""In a trainer's save_folder: what rank 0 gathered of every rank's trace (:meth:`RankTraces.load` reads it)."""


class RankTraces(Mapping[str, pd.DataFrame]):
    """Every rank's :class:`Trace`, by rank (:attr:`traces`). As a Mapping: ``'events'``,
    ``'invocations'`` and ``'notes'``, the ranks' frames one after the other with a leading
    ``rank`` column, built when first read and kept until a gather brings new rows.

    ``folder`` holds the gathered ranks' files (default: a temporary folder, removed with this
    object); a RankTraces made of live traces (:meth:`of`) writes nothing. A gather replaces the
    traces in :attr:`traces`: keep the RankTraces, not one of them."""

    def __init__(self, traces: Optional[Mapping[int, Trace]] = None,
                 folder: Union[str, os.PathLike, None] = None) -> None:
        self.traces = dict(sorted((traces or {}).items()))
        self.folder = Path(folder) if folder is not None else None
        self._frames: dict[str, pd.DataFrame] = {}

    @classmethod
    def of(cls, trace: Trace, rank: int) -> "RankTraces":
        """One process's own ``trace`` as rank ``rank``'s (read as it is when first read)."""
        return cls({rank: trace})

    # -- reading --------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in TRACE_FRAMES:
            raise KeyError(f"{name!r}: rank traces hold the frames {TRACE_FRAMES}")
        if name not in self._frames:
            self._frames[name] = _joined({rank: trace.notes if name == "notes" else trace.query(name)
                                          for rank, trace in self.traces.items()})
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(TRACE_FRAMES)

    def __len__(self) -> int:
        return len(TRACE_FRAMES)

    def query(self, table: str = "invocations", rank: Union[int, Sequence[int], None] = None,
              **filters: Any) -> pd.DataFrame:
        """The rows of ``table`` ('events' or 'invocations') of ``rank`` (one, a list, or None:
        every rank) that :meth:`Trace.query` gives for ``filters`` (``batches=(lo, hi)``,
        ``seqs``, ``epoch``, ``event``, ``name``, ``matched``), with a leading ``rank`` column.
        Reads only the chunks the question needs, without building the whole frames."""
        if table not in ("events", "invocations"):
            raise ValueError(f"query reads 'events' or 'invocations', not {table!r}; the notes are "
                             f"small: filter rank_traces['notes'] in pandas")
        ranks = self.traces if rank is None else [rank] if isinstance(rank, int) else list(rank)
        unknown = [r for r in ranks if r not in self.traces]
        if unknown:
            raise ValueError(f"no trace of rank {unknown}: these rank traces hold ranks {list(self.traces)}")
        return _joined({r: self.traces[r].query(table, **filters) for r in ranks})

    def __repr__(self) -> str:
        return f"RankTraces({', '.join(f'{rank}: {trace!r}' for rank, trace in self.traces.items())})"

    # -- gathering (rank 0; driven by distributed.gather_traces) ---------------------------------
    def lacks(self, rank: int, files: Iterable[str]) -> list[str]:
        """Which of rank ``rank``'s chunk ``files`` its folder does not hold yet."""
        folder = self._folder(rank)
        return [name for name in files if not (folder / name).is_file()]

    def receive(self, rank: int, file: str, data: bytes) -> None:
        """Keep rank ``rank``'s chunk ``file`` (its parquet bytes), written whole or not at all."""
        target = self._folder(rank) / file
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{file}.{uuid.uuid4().hex[:8]}")
        partial.write_bytes(data)
        os.replace(partial, target)

    def update(self, rank: int, snapshot: Mapping[str, Any]) -> None:
        """Take rank ``rank``'s trace as :meth:`Trace.checkpoint` gave it, its chunks in
        ``snapshot['folder']`` (None: received into this folder): save it into the rank's folder,
        where only its chunks stay, and read it from there."""
        folder = self._folder(rank)
        snapshot = {**snapshot, "folder": snapshot["folder"] or str(folder)}
        before = set(folder.glob("*.parquet"))
        Trace.from_checkpoint(snapshot).save(folder)
        kept = {folder / chunk["file"] for chunk in snapshot["chunks"]} | (set(folder.glob("*.parquet")) - before)
        for stale in before - kept - {folder / "notes.parquet"}:  # the rows in memory at the last gather
            stale.unlink()
        self.traces = dict(sorted({**self.traces, rank: Trace.load(folder)}.items()))
        self._frames.clear()

    def _folder(self, rank: int) -> Path:
        """Rank ``rank``'s folder, in a temporary folder made at the first use when none was given."""
        if self.folder is None:
            self.folder = temporary_folder(self, "composer_lab-ranks-")
        return self.folder / f"rank{rank}"

    # -- persistence ----------------------------------------------------------------------------
    def save(self, folder: Union[str, os.PathLike]) -> Path:
        """Write every rank's trace into ``folder/rank<r>`` (:meth:`Trace.save`: the chunk files
        linked, not copied), replacing what ``folder`` held; written beside it first, so rank
        traces read from ``folder`` can be saved over it. :meth:`load` reads it."""
        folder = Path(folder)
        staged = folder.with_name(f"{folder.name}.saving")
        shutil.rmtree(staged, ignore_errors=True)
        for rank, trace in self.traces.items():
            trace.save(staged / f"rank{rank}")
        shutil.rmtree(folder, ignore_errors=True)
        staged.mkdir(parents=True, exist_ok=True)
        staged.rename(folder)
        return folder

    @classmethod
    def load(cls, folder: Union[str, os.PathLike]) -> "RankTraces":
        """The rank traces :meth:`save` wrote to ``folder`` (or a gather left in a trainer's
        ``save_folder``/``rank_traces``), each read as :meth:`Trace.load` reads it: a long one
        when asked, so keep the folder."""
        folder = Path(folder)
        ranks = {int(path.parent.name[4:]): path.parent for path in folder.glob("rank*/trace.json")
                 if path.parent.name[4:].isdigit()}
        if not ranks:
            raise FileNotFoundError(f"{folder} holds no rank traces (rank<r>/trace.json); write them with "
                                    f"RankTraces.save or Run.save of a run trained under torchrun")
        return cls({rank: Trace.load(path) for rank, path in ranks.items()}, folder)


def _joined(frames: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """The ranks' ``frames`` one after the other, each with a leading ``rank`` column; categorical
    columns stay categorical when the ranks' categories differ (e.g. callbacks only rank 0 runs)."""
    parts = []
    for rank, frame in frames.items():
        frame = frame.copy(deep=False)  # (a trace's cached notes stay as they are)
        frame.insert(0, "rank", pd.Series(rank, index=frame.index, dtype="int64"))
        parts.append(frame)
    out = pd.concat(parts, ignore_index=True)
    for column, dtype in parts[0].dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype) and not isinstance(out[column].dtype, pd.CategoricalDtype):
            categories = dict.fromkeys(c for part in parts for c in part[column].cat.categories)
            out[column] = out[column].astype(pd.CategoricalDtype(list(categories), ordered=dtype.ordered))
    return out
