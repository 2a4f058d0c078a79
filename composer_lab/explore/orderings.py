"""Distinct orderings: the permutations of a list of algorithms that actually run differently.

The engine orders each event's algorithms with its passes (FILO on after-events, Selective
Backprop pinned first, ...), and an event only orders the algorithms that listen to it. So many
permutations of a list run every event in the same order: :func:`orderings` keeps one of each
kind. Given a commutation table (:func:`~composer_lab.explore.commutation.commutation`), it also
merges orders that differ only by swapping list neighbours that commute, so a sweep trains only
the orders that can differ.

An order is named by what runs (:func:`run_label`): the engine's order at each event where two or
more of the algorithms listen and the passes leave their order free, e.g.
``after_dataloader: SelectiveBackprop > MixUp > CutOut``. The list order that produced it is kept
beside it. What the question leaves out (an algorithm a pass pins, or one that never meets
another) is said in a table of its own (:func:`out_of_question`), not silently dropped.
"""

from __future__ import annotations

import itertools
import math
import random
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import pandas as pd
import torch

from composer_lab.algorithms import ALGORITHMS, name_hint
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.checks import check_positive_int
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.passes import pass_name
from composer_lab.core.state import State
from composer_lab.core.trace import Trace

__all__ = ["orderings", "algorithm_names", "order_label", "run_label", "run_labels", "out_of_question", "Question",
           "check_algorithms", "commuting_pairs", "MAX_ALGORITHMS", "NO_SHARED_EVENT"]

MAX_ALGORITHMS = 8
"""The most algorithms whose permutations are all enumerated (8! = 40,320)."""

Order = tuple[int, ...]
NO_SHARED_EVENT = "each algorithm runs alone at its events"
"""The label of the one order of algorithms that never meet at an event."""
OUT_OF_QUESTION_COLUMNS = ["algorithm", "reason"]
_EVENT_SAMPLE = 2000  # permutations of one event's listeners examined past MAX_ALGORITHMS of them
_WHY_SAMPLE = 720  # permutations examined (past 6 listeners) to find the pass that pins an algorithm


def check_algorithms(algorithms: Sequence[Any]) -> list[Algorithm]:
    """``algorithms`` as a list of distinct Algorithm instances, else TypeError / ValueError."""
    if isinstance(algorithms, Algorithm) or not isinstance(algorithms, (list, tuple)):
        raise TypeError(f"algorithms must be a list of Algorithm instances, got {type(algorithms).__name__} "
                        f"{algorithms!r}; e.g. [CutOut(), LabelSmoothing(0.1)]")
    algorithms = list(algorithms)
    for i, algorithm in enumerate(algorithms):
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"algorithms[{i}] is {type(algorithm).__name__} {algorithm!r}; each entry must be an "
                            f"Algorithm instance, e.g. LabelSmoothing(0.1){_by_name(algorithm)}")
        first = next(j for j, other in enumerate(algorithms) if other is algorithm)
        if first != i:
            name = type(algorithm).__name__
            raise ValueError(f"algorithms[{i}] is the same {name} instance as algorithms[{first}]; an instance keeps "
                             f"the state of its run, so give each place its own instance, e.g. [{name}(...), "
                             f"{name}(...)]")
    return algorithms


def _by_name(name: Any) -> str:
    """For an algorithm given by its name: the instance to give instead, or the closest names."""
    if not isinstance(name, str):
        return ""
    if name in ALGORITHMS:
        return f" (for the name {name!r}: ALGORITHMS[{name!r}]() or {ALGORITHMS[name].__name__}())"
    return name_hint(name) or f" (no algorithm is named {name!r}: composer_lab.algorithms.ALGORITHMS lists the names)"


def algorithm_names(algorithms: Sequence[Algorithm]) -> list[str]:
    """Names unique per instance, as the trace gives them: 'LabelSmoothing', 'LabelSmoothing#2'."""
    trace = Trace("off")
    return [trace.label(a) for a in algorithms]


def order_label(names: Sequence[str]) -> str:
    """A list order as text: 'CutOut > LabelSmoothing > SelectiveBackprop'."""
    return " > ".join(names)


def run_label(plans: Mapping[Union[Event, str], Sequence[str]]) -> str:
    """What runs, as text: each event's order, events in loop order, joined with '; ', e.g.
    'after_dataloader: SelectiveBackprop > MixUp > CutOut'. ``plans`` maps events to the names
    the engine runs there, in order; no event at all reads :data:`NO_SHARED_EVENT`."""
    loop = list(Event)
    events = sorted((Event(e) for e in plans), key=loop.index)
    parts = [f"{event.value}: {order_label(plans[event] if event in plans else plans[event.value])}"
             for event in events]
    return "; ".join(parts) or NO_SHARED_EVENT


@dataclass(frozen=True)
class Question:
    """What the passes leave to decide about the order of ``algorithms``.

    ``shared``: the events where two or more of them listen (loop order); ``free``: those where
    the passes run them in more than one order; ``out``: the algorithms out of the question, with
    why (:func:`out_of_question`); ``passes``: the names of the passes assumed."""

    algorithms: list[Algorithm]
    names: list[str]
    shared: dict[Event, list[int]]
    free: list[Event]
    out: pd.DataFrame
    passes: list[str]
    engine: Engine

    def plans(self, positions: Sequence[int], events: Optional[Sequence[Event]] = None) -> dict[str, list[str]]:
        """The names the engine runs at each of ``events`` (default: the free ones, else the
        shared ones) when the list is ``positions``."""
        events = (self.free or list(self.shared)) if events is None else events
        return {event.value: [self.names[i] for i in _plan(self.engine, event, self.algorithms, positions,
                                                             self.shared[event])]
                for event in events}

    def label(self, positions: Sequence[int]) -> str:
        """:func:`run_label` of the order ``positions`` runs."""
        return run_label(self.plans(positions))


def question(algorithms: Sequence[Algorithm], passes: Optional[Sequence[Any]] = None) -> Question:
    """The :class:`Question` of ``algorithms`` under ``passes`` (default: the engine's)."""
    algorithms = check_algorithms(algorithms)
    engine = _engine(passes)
    shared = {event: listening for event in Event
              if len(listening := [i for i, a in enumerate(algorithms) if a.listens(event)]) > 1}
    plans = {event: _event_plans(engine, event, algorithms, listening) for event, listening in shared.items()}
    free = [event for event in shared if len(plans[event]) > 1]
    names = algorithm_names(algorithms)
    out = _out_of_question(algorithms, names, engine, shared, plans)
    return Question(algorithms, names, shared, free, out, [pass_name(p) for p in engine.passes], engine)


def out_of_question(algorithms: Sequence[Algorithm], passes: Optional[Sequence[Any]] = None) -> pd.DataFrame:
    """The algorithms whose place no order changes, one row each with the reason: pinned by a
    pass at every event it shares (e.g. 'pinned first at after_dataloader by
    sort_selective_backprop_first'), or never sharing an event with another algorithm."""
    return question(algorithms, passes).out


def run_labels(algorithms: Sequence[Algorithm], orders: Sequence[Sequence[int]],
               passes: Optional[Sequence[Any]] = None) -> list[str]:
    """The :func:`run_label` of each order (positions into ``algorithms``) under ``passes``."""
    asked = question(algorithms, passes)
    return [asked.label(tuple(order)) for order in orders]


def _engine(passes: Optional[Sequence[Any]]) -> Engine:
    engine = Engine(State(torch.nn.Identity()), trace="off")
    if passes is not None:
        engine.passes = passes
    return engine


def _plan(engine: Engine, event: Event, algorithms: list[Algorithm], positions: Sequence[int],
          listening: Sequence[int]) -> Order:
    """The positions the engine runs at ``event``, in order, when the list is ``positions`` and
    ``listening`` listen there (all assumed to match)."""
    index = {id(a): i for i, a in enumerate(algorithms)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the passes' warnings (two loss interpolators) say nothing about order
        ran = engine.plan(event, [algorithms[i] for i in positions if i in listening], assume_matched=True)
    return tuple(index[id(a)] for a in ran)


def _event_plans(engine: Engine, event: Event, algorithms: list[Algorithm], listening: list[int],
                 sample: Optional[int] = None) -> set[Order]:
    """Every order the engine runs ``listening`` in at ``event``, over the permutations of them
    (``sample`` of them drawn at random, the list first; default: all up to
    :data:`MAX_ALGORITHMS` listeners)."""
    if sample is None and len(listening) > MAX_ALGORITHMS:
        sample = _EVENT_SAMPLE
    perms = _permutations(len(listening), sample, 0)
    return {_plan(engine, event, algorithms, [listening[i] for i in perm], listening) for perm in perms}


def _out_of_question(algorithms: list[Algorithm], names: list[str], engine: Engine, shared: dict[Event, list[int]],
                     plans: dict[Event, set[Order]]) -> pd.DataFrame:
    """One row per algorithm that has the same place in every order, with why."""
    rows = []
    for i, name in enumerate(names):
        events = [event for event, listening in shared.items() if i in listening]
        if not events:
            rows.append((name, "never shares an event with another algorithm"))
        elif all(_pinned(i, plans[event]) for event in events):
            rows.append((name, "; ".join(_why_pinned(i, event, algorithms, names, engine, shared[event], plans[event])
                                         for event in events)))
    return pd.DataFrame(rows, columns=OUT_OF_QUESTION_COLUMNS)


def _pinned(i: int, plans: set[Order]) -> bool:
    """Whether ``i`` has the same algorithms before it in every plan (a pass that leaves it out
    counts as a place of its own)."""
    return len({frozenset(plan[:plan.index(i)]) if i in plan else None for plan in plans}) == 1


def _why_pinned(i: int, event: Event, algorithms: list[Algorithm], names: list[str], engine: Engine,
                listening: list[int], plans: set[Order]) -> str:
    """'pinned first at after_dataloader by sort_selective_backprop_first': where, and the
    passes without which it would move."""
    plan = next(iter(plans))
    place = plan.index(i) if i in plan else None
    where = "left out" if place is None else "pinned first" if place == 0 else \
        "pinned last" if place == len(plan) - 1 else f"pinned after {', '.join(names[j] for j in plan[:place])}"
    passes = engine.passes
    movers = [pass_name(p) for k, p in enumerate(passes)
              if not _pinned(i, _event_plans(_engine(passes[:k] + passes[k + 1:]), event, algorithms, listening,
                                             _WHY_SAMPLE))]
    return f"{where} at {event.value} by {' and '.join(movers) if movers else 'the passes together'}"


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

    Columns: ``order`` (what runs: :func:`run_label` of the engine's order at each event where
    the passes leave it free), ``list_order`` (the list that runs so, the first permutation of its
    kind, as a label), ``positions`` (that list as indices into ``algorithms``), ``plans`` (the
    engine's order at every event where two or more of them listen: FILO reverses after-events),
    ``permutations`` (the list labels of all permutations that collapse into it) and
    ``n_permutations``. The first row is the list as given. ``attrs``: ``out_of_question`` (the
    algorithms no order moves, and why: :func:`out_of_question`), ``free_events`` and ``passes``
    (their names).
    """
    asked = question(algorithms, passes)
    perms = _permutations(len(asked.algorithms), max_orders, seed)
    events = list(asked.shared)
    signatures = {perm: tuple(_plan(asked.engine, event, asked.algorithms, perm, asked.shared[event])
                              for event in events) for perm in perms}
    rows = [_order_row(asked, events, signatures[group[0]], group)
            for group in _groups(perms, signatures, asked.names, commutation)]
    table = pd.DataFrame(rows, columns=["order", "list_order", "positions", "plans", "permutations",
                                        "n_permutations"])
    table.attrs.update(out_of_question=asked.out, free_events=[e.value for e in asked.free], passes=asked.passes)
    return table


def _groups(perms: list[Order], signatures: Mapping[Order, tuple], names: list[str],
            commutation: Optional[pd.DataFrame]) -> list[list[Order]]:
    """The permutations that run alike (one signature; with ``commutation``, also those that
    differ by swapping commuting neighbours), each group in the order first seen."""
    groups = _UnionFind(perms)
    first_of: dict[tuple, Order] = {}
    for perm in perms:
        groups.union(first_of.setdefault(signatures[perm], perm), perm)
    if commutation is not None:
        _merge_commuting_swaps(groups, perms, names, commuting_pairs(commutation))
    members: dict[Order, list[Order]] = {}
    for perm in perms:
        members.setdefault(groups.find(perm), []).append(perm)
    return list(members.values())


def _order_row(asked: "Question", events: list[Event], signature: tuple, group: list[Order]) -> dict[str, Any]:
    """The :func:`orderings` row of one group of permutations, named by its first."""
    names = asked.names
    return {"order": asked.label(group[0]), "list_order": order_label([names[i] for i in group[0]]),
            "positions": group[0],
            "plans": {event.value: order_label([names[i] for i in plan]) for event, plan in zip(events, signature)},
            "permutations": [order_label([names[i] for i in p]) for p in group], "n_permutations": len(group)}


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
    check_positive_int("max_orders", max_orders, "is how many orders to draw, a positive int")
    if max_orders >= total:
        return list(itertools.permutations(range(n)))
    rng, drawn = random.Random(seed), {tuple(range(n)): None}
    while len(drawn) < max_orders:
        drawn[tuple(rng.sample(range(n), n))] = None
    return list(drawn)


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
