"""Distinct orderings: the permutations of a list of algorithms that actually run differently.

The engine orders each event's algorithms with its passes (FILO on after-events, Selective
Backprop pinned first, ...), and an event only orders the algorithms that listen to it. So many
permutations of a list run every event in the same order: :func:`orderings` keeps one of each
kind. Given a commutation table (:func:`~composer_lab.explore.commutation.commutation`), it also
merges orders that differ only by swapping list neighbours that commute, so a sweep trains only
the orders that can differ.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from typing import Any, Optional, Sequence

import pandas as pd
import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.state import State
from composer_lab.core.trace import Trace

__all__ = ["orderings", "algorithm_names", "order_label", "check_algorithms", "commuting_pairs", "MAX_ALGORITHMS"]

MAX_ALGORITHMS = 8
"""The most algorithms whose permutations are all enumerated (8! = 40,320)."""

Order = tuple[int, ...]


def check_algorithms(algorithms: Sequence[Any]) -> list[Algorithm]:
    """``algorithms`` as a list of distinct Algorithm instances, else TypeError / ValueError."""
    if isinstance(algorithms, Algorithm) or not isinstance(algorithms, (list, tuple)):
        raise TypeError(f"algorithms must be a list of Algorithm instances, got {type(algorithms).__name__} "
                        f"{algorithms!r}; e.g. [CutOut(), LabelSmoothing(0.1)]")
    algorithms = list(algorithms)
    for i, algorithm in enumerate(algorithms):
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"algorithms[{i}] is {type(algorithm).__name__} {algorithm!r}; each entry must be an "
                            f"Algorithm instance, e.g. LabelSmoothing(0.1)")
        first = next(j for j, other in enumerate(algorithms) if other is algorithm)
        if first != i:
            name = type(algorithm).__name__
            raise ValueError(f"algorithms[{i}] is the same {name} instance as algorithms[{first}]; an instance keeps "
                             f"the state of its run, so give each place its own instance, e.g. [{name}(...), "
                             f"{name}(...)]")
    return algorithms


def algorithm_names(algorithms: Sequence[Algorithm]) -> list[str]:
    """Names unique per instance, as the trace gives them: 'LabelSmoothing', 'LabelSmoothing#2'."""
    trace = Trace("off")
    return [trace.label(a) for a in algorithms]


def order_label(names: Sequence[str]) -> str:
    """An order as text: 'CutOut > LabelSmoothing > SelectiveBackprop'."""
    return " > ".join(names)


def orderings(algorithms: Sequence[Algorithm], passes: Optional[Sequence[Any]] = None,
              commutation: Optional[pd.DataFrame] = None, max_orders: Optional[int] = None,
              seed: int = 0) -> pd.DataFrame:
    """The distinct effective orders of ``algorithms``: one row per order.

    Two permutations of the list are one order when ``passes`` (default: the engine's) run the
    same algorithms in the same sequence at every event. With ``commutation`` (a table from
    :func:`~composer_lab.explore.commutation.commutation`), permutations that differ by swapping
    list neighbours that commute wherever both ran are one order too.

    More than :data:`MAX_ALGORITHMS` algorithms are refused unless ``max_orders`` is given: then
    that many permutations, drawn at random (``seed``; the list as given comes first), are
    examined instead of all of them.

    Columns: ``order`` (the list order, as a label), ``positions`` (indices into ``algorithms``,
    the first permutation of its kind), ``plans`` (for each event where two or more of them
    listen, the order the engine runs them in: FILO reverses after-events), ``permutations``
    (the labels of all permutations that collapse into it) and ``n_permutations``. The first
    row is the list as given.
    """
    algorithms = check_algorithms(algorithms)
    names = algorithm_names(algorithms)
    perms = _permutations(len(algorithms), max_orders, seed)
    events, signatures = _signatures(algorithms, perms, passes)
    groups = _UnionFind(perms)
    first_of: dict[tuple, Order] = {}
    for perm in perms:
        groups.union(first_of.setdefault(signatures[perm], perm), perm)
    if commutation is not None:
        _merge_commuting_swaps(groups, perms, names, commuting_pairs(commutation))
    members: dict[Order, list[Order]] = {}
    for perm in perms:
        members.setdefault(groups.find(perm), []).append(perm)
    rows = [{"order": order_label([names[i] for i in group[0]]), "positions": group[0],
             "plans": {event.value: order_label([names[i] for i in plan])
                       for event, plan in zip(events, signatures[group[0]])},
             "permutations": [order_label([names[i] for i in p]) for p in group], "n_permutations": len(group)}
            for group in members.values()]
    return pd.DataFrame(rows, columns=["order", "positions", "plans", "permutations", "n_permutations"])


def commuting_pairs(table: pd.DataFrame) -> set[frozenset]:
    """The pairs of algorithm names that commute at every event where the table compared them."""
    missing = {"first", "second", "commutes"} - set(getattr(table, "columns", ()))
    if missing:
        raise TypeError(f"commutation must be the table commutation() returns (columns event, first, second, "
                        f"field, max_abs_diff, commutes), got {type(table).__name__} missing {sorted(missing)}")
    pairs = table.groupby([table["first"].astype(str), table["second"].astype(str)])["commutes"].all()
    verdict: dict[frozenset, bool] = {}
    for (first, second), commutes in pairs.items():
        key = frozenset((first, second))
        verdict[key] = verdict.get(key, True) and bool(commutes)
    return {key for key, commutes in verdict.items() if commutes}


def _permutations(n: int, max_orders: Optional[int], seed: int) -> list[Order]:
    """All permutations of ``range(n)``, or ``max_orders`` distinct ones at random (identity first)."""
    total = math.factorial(n)
    if max_orders is None:
        if n > MAX_ALGORITHMS:
            raise ValueError(f"{n} algorithms have {total:,} orders; orderings() enumerates at most "
                             f"{MAX_ALGORITHMS} algorithms ({math.factorial(MAX_ALGORITHMS):,} orders): pass "
                             f"max_orders=N to examine N orders drawn at random, or try fewer algorithms")
        return list(itertools.permutations(range(n)))
    if isinstance(max_orders, bool) or not isinstance(max_orders, int) or max_orders < 1:
        raise ValueError(f"max_orders is how many orders to draw, a positive int, got {max_orders!r}")
    if max_orders >= total:
        return list(itertools.permutations(range(n)))
    rng, drawn = random.Random(seed), {tuple(range(n)): None}
    while len(drawn) < max_orders:
        drawn[tuple(rng.sample(range(n), n))] = None
    return list(drawn)


def _signatures(algorithms: list[Algorithm], perms: list[Order],
                passes: Optional[Sequence[Any]]) -> tuple[list[Event], dict[Order, tuple]]:
    """The events where two or more algorithms listen and, per permutation, the positions the
    engine would run at each of them (all assumed to match)."""
    engine = Engine(State(torch.nn.Identity()), trace="off")
    if passes is not None:
        engine.passes = passes
    index = {id(a): i for i, a in enumerate(algorithms)}
    listeners = {event: {i for i, a in enumerate(algorithms) if a.events is None or event in a.events}
                 for event in Event}
    listeners = {event: listening for event, listening in listeners.items() if len(listening) > 1}
    signatures = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the passes' warnings (two loss interpolators) say nothing about order
        for perm in perms:
            signatures[perm] = tuple(
                tuple(index[id(a)] for a in engine.plan(event, [algorithms[i] for i in perm if i in listening],
                                                        assume_matched=True))
                for event, listening in listeners.items())
    return list(listeners), signatures


def _merge_commuting_swaps(groups: "_UnionFind", perms: list[Order], names: list[str],
                           commuting: set[frozenset]) -> None:
    """Join each permutation with its neighbour-swaps whose swapped pair commutes."""
    known = set(perms)
    for perm in perms:
        for i in range(len(perm) - 1):
            if frozenset((names[perm[i]], names[perm[i + 1]])) in commuting:
                swapped = perm[:i] + (perm[i + 1], perm[i]) + perm[i + 2:]
                if swapped in known:
                    groups.union(perm, swapped)


class _UnionFind:
    """Disjoint sets whose representative is the member seen first."""

    def __init__(self, items: list) -> None:
        self._rank = {item: i for i, item in enumerate(items)}
        self._parent = {item: item for item in items}

    def find(self, item: Any) -> Any:
        while self._parent[item] != item:
            self._parent[item] = item = self._parent[self._parent[item]]
        return item

    def union(self, a: Any, b: Any) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            first, second = sorted((a, b), key=self._rank.__getitem__)
            self._parent[second] = first
