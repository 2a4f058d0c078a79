"""Diffing two runs' traces: which algorithm calls moved, appeared or vanished.

Calls are matched by event, batch, the how-many-th firing of that event at that batch (eval
and microbatch events fire several times per batch) and name. A call present in both runs
*moved* when its place among the calls both runs made at that firing differs, so one call
appearing does not make every later one look moved.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from composer_lab.core.callback import INTERNAL_PREFIX  # (the trace's label of a Callback._internal)
from composer_lab.explore.sources import run_data

__all__ = ["diff_runs", "DIFF_STATUSES", "INTERNAL_PREFIX", "without_internal"]

DIFF_STATUSES = ("same", "moved", "appeared", "vanished")
_FIRING = ["event", "batch", "firing"]


def without_internal(invocations: pd.DataFrame) -> pd.DataFrame:
    """The invocations less the calls of the lab's own callbacks (:data:`INTERNAL_PREFIX`)."""
    return invocations[~invocations["name"].astype(str).str.startswith(INTERNAL_PREFIX)]


def _calls(invocations: pd.DataFrame) -> pd.DataFrame:
    """The calls that ran, keyed by firing: the n-th event of a kind at a batch."""
    ran = invocations[invocations["matched"]].copy()
    ran["event"] = ran["event"].astype(str)
    ran["name"] = ran["name"].astype(str)
    ran["kind"] = ran["kind"].astype(str)
    ran["firing"] = ran.groupby(["event", "batch"])["seq"].rank(method="dense").astype("int64") - 1
    return ran[[*_FIRING, "name", "kind", "order"]]


def diff_runs(a: Any, b: Any, internal: bool = False) -> pd.DataFrame:
    """Compare the algorithm and callback calls of run ``a`` with run ``b``.

    ``a`` and ``b`` are anything :func:`run_data` reads. One row per call: ``event``,
    ``batch``, ``firing``, ``name``, ``kind``, ``order_a``, ``order_b`` and ``status``: 'same',
    'moved' (its place among the calls both runs made there changed), 'appeared' (only in
    ``b``) or 'vanished' (only in ``a``). The lab's own callbacks are left out unless ``internal``."""
    frames = [run_data(source).invocations for source in (a, b)]
    calls_a, calls_b = (_calls(frame if internal else without_internal(frame)) for frame in frames)
    merged = calls_a.merge(calls_b, on=[*_FIRING, "name", "kind"], how="outer", suffixes=("_a", "_b"),
                           indicator=True)
    both = merged["_merge"] == "both"
    rank = {side: merged[both].groupby([*_FIRING, "kind"])[f"order_{side}"].rank(method="first") for side in "ab"}
    merged["status"] = "same"
    merged.loc[rank["a"].index[rank["a"] != rank["b"]], "status"] = "moved"
    merged.loc[merged["_merge"] == "right_only", "status"] = "appeared"
    merged.loc[merged["_merge"] == "left_only", "status"] = "vanished"
    merged = merged.drop(columns="_merge").sort_values([*_FIRING, "order_b", "order_a"], ignore_index=True)
    merged["status"] = pd.Categorical(merged["status"], categories=DIFF_STATUSES)
    return merged[[*_FIRING, "name", "kind", "order_a", "order_b", "status"]]
