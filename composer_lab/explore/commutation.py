"""The commutation check: does the order of two algorithms at one event change what they leave?

During a short real run, at every event where two or more algorithms match, each pair of them is
applied in both orders to two deep copies of the live :class:`State` (the algorithms copied with
it, the global random generators in the same state for both) and what each order leaves is
compared: batch inputs and targets, outputs, loss, model parameters and buffers (and its modules:
another class, name or setting in one order is an infinite difference), optimizer state; an error
only in the order the run does not take is a difference in every field (warned). The live run is
not touched: it goes on as if nothing had been checked.

INIT fires while the trainer is built, before the check can watch it, so INIT's pairs (model
surgery) are judged on the State INIT's algorithms find: that of a trainer the factory builds with
no algorithms (callbacks run first at INIT either way), built, copied and closed before the trainer
that trains (whose model the factory may share: it is still as given), the global generators then
put back; only when two or more of the algorithms listen at INIT. Its pairs are ordered by the
training trainer's engine, under its passes, as it ran INIT. BEFORE_LOAD and AFTER_LOAD, also fired
while the trainer is built, are not checked.

The pairs are those the factory's trainer runs, under its own passes, in the order it runs them.
On an after-event where the passes run a pair in the reverse of its order at the opening event
(AFTER_LOSS closing BEFORE_LOSS, as FILO does), the pair undoes its changes last-in-first-out:
swapping the two in the list swaps both events together, so the opening event's comparison is the
one that counts and the after-event is not compared on its own (from the state one list order
built, the other order's undo would restore the wrong originals, an order the engine never runs).
Those pairs are listed in the table's ``attrs['judged_at_opening']``. Where the passes keep a
pair's order at the after-event (FILO removed, a custom pass list), it is compared there too.
"""

from __future__ import annotations

import copy
import itertools
import re
import types
import warnings
from typing import Any, Callable, Optional, Sequence

import pandas as pd
import torch
from matplotlib.patches import Patch, Rectangle

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.checks import check_positive_int
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import pass_name
from composer_lab.core.state import State
from composer_lab.explore.orderings import algorithm_names, check_algorithms
from composer_lab.explore.trials import check_trainer
from composer_lab.figures import LabFigure
from composer_lab.trainer.rng import load_rng_state, preserved_rng, rng_state

__all__ = ["commutation", "plot_commutation", "FIELDS", "TOLERANCE"]

FIELDS = ("inputs", "targets", "outputs", "loss", "model", "optimizer")
"""What each order leaves that is compared."""
TOLERANCE = 1e-5
"""Largest absolute difference still counted as equal (float rounding of reordered arithmetic)."""
COLUMNS = ["event", "first", "second", "field", "max_abs_diff", "points", "commutes"]
JUDGED_COLUMNS = ["event", "first", "second", "opening_event"]
_GREEN, _RED = "#5cb85c", "#d9534f"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def commutation(make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm], seed: int = 0,
                batches: int = 8, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Check every pair of ``algorithms`` that match at one event, over ``batches`` real batches.

    ``make_trainer(algorithms, seed)`` builds the trainer (fresh copies of ``algorithms`` arrive);
    it trains ``batches`` batches as a run of that length (so schedules such as Selective
    Backprop's ``start``/``end`` fall inside it), from FIT_START on; INIT's pairs are judged once,
    on the state a trainer the factory builds with no algorithms holds (see the module's
    docstring). One row per event, pair (in the order the engine ran them) and field: the largest
    absolute difference over the points checked, how many points, and ``commutes``
    (``max_abs_diff <= tolerance``). A pair commutes at an event when every field does; shapes
    that differ, or models whose modules differ, count as an infinite difference.
    ``attrs``: ``tolerance``, ``passes`` (the names of the passes the trainer ran) and
    ``judged_at_opening`` (the pairs an after-event undid last-in-first-out, judged at the
    opening event: see the module's docstring).
    """
    algorithms = check_algorithms(algorithms)
    check_positive_int("batches", batches, "is how many batches to train while checking, a positive int")
    meet_at_init = sum(a.listens(Event.INIT) for a in algorithms) > 1  # else no pair at INIT: nothing to build
    # First, before the trainer that trains: a model the factory shares is still as given.
    at_init = state_at_init(make_trainer, algorithms, seed) if meet_at_init else None
    copies = copy.deepcopy(algorithms)
    trainer = check_trainer(make_trainer(copies, seed), make_trainer, copies)
    passes = [pass_name(p) for p in trainer.engine.passes]
    probe = _Probe(trainer.state, _names(copies))
    try:
        if at_init is not None:
            _judge_init(probe, trainer.engine, at_init)
        trainer.engine.register_pass(probe)  # last: it sees each event's final order, before anything is applied
        trainer.state.max_duration = f"{batches}ba"  # a run of that length: schedules fall inside it
        trainer.fit()
    finally:
        trainer.engine.passes = [p for p in trainer.engine.passes if p is not probe]
        trainer.close()
    table = probe.table(tolerance)
    table.attrs.update(tolerance=tolerance, passes=passes, judged_at_opening=probe.judged_at_opening())
    return table


def state_at_init(make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm], seed: int) -> State:
    """A copy of the State INIT's algorithms find, holding fresh copies of ``algorithms``: the state
    of a trainer ``make_trainer`` builds with no algorithms, copied, then closed; the global random
    generators are put back as they were, so the trainer built next starts as it would have."""
    with preserved_rng():
        bare = check_trainer(_without_algorithms(make_trainer, seed), make_trainer, [])
        try:
            state = twin_state(bare.state)[0]
        finally:
            bare.close()
    state.algorithms = copy.deepcopy(algorithms)
    return state


def _without_algorithms(make_trainer: Callable[[list, int], Any], seed: int) -> Any:
    try:
        return make_trainer([], seed)
    except Exception as error:
        error.add_note("(commutation() builds make_trainer([], seed) to copy the State INIT's algorithms find: "
                       "the factory must accept an empty list of algorithms)")
        raise


def _judge_init(probe: "_Probe", engine: Engine, at_init: State) -> None:
    """Have ``probe`` judge the pairs of ``at_init``'s algorithms that match INIT there, in the order
    ``engine``'s passes run them."""
    probe.names.update(_names(at_init.algorithms))
    matched = [a for a in at_init.algorithms if a.listens(Event.INIT) and a.match(Event.INIT, at_init)]
    probe.judge(at_init, engine.plan(Event.INIT, matched, assume_matched=True), Event.INIT)


def _names(algorithms: Sequence[Algorithm]) -> dict[int, str]:
    return dict(zip(map(id, algorithms), algorithm_names(algorithms)))


class _Probe:
    """An algorithm pass that changes nothing: it compares each pair of the event's algorithms in
    both orders on copies of the state, and records the differences."""

    __name__ = "commutation_probe"

    def __init__(self, state: State, names: dict[int, str]) -> None:
        self.state = state
        self.names = names
        self.diffs: dict[tuple[str, str, str, str], list[float]] = {}
        self.judged: dict[tuple[str, str, str, str], None] = {}  # (after-event, first, second, opening event)
        self._last: dict[Event, set[tuple[int, int]]] = {}  # the pairs (in order) at each event's last firing

    def __call__(self, algorithms: Sequence[Algorithm], event: Event) -> Sequence[Algorithm]:
        self.judge(self.state, algorithms, event)
        return algorithms

    def judge(self, state: State, algorithms: Sequence[Algorithm], event: Event) -> None:
        """Compare each pair of ``algorithms`` (in the order they run at ``event``) on copies of ``state``."""
        pairs = list(itertools.combinations(algorithms, 2))
        self._last[event] = {(id(a), id(b)) for a, b in pairs}
        opening = event.opening
        mirrored = self._last.get(opening, set()) if opening is not None else set()
        for a, b in [(a, b) for a, b in pairs if (id(b), id(a)) in mirrored]:
            self.judged[(event.value, self.names[id(a)], self.names[id(b)], opening.value)] = None
        for a, b in [(a, b) for a, b in pairs if (id(b), id(a)) not in mirrored]:
            for field, diff in compare_orders(state, event, a, b).items():
                self.diffs.setdefault((event.value, self.names[id(a)], self.names[id(b)], field), []).append(diff)

    def judged_at_opening(self) -> pd.DataFrame:
        """The pairs not compared at an after-event that undid them last-in-first-out."""
        return pd.DataFrame(list(self.judged), columns=JUDGED_COLUMNS)

    def table(self, tolerance: float) -> pd.DataFrame:
        rows = [(*key, max(diffs), len(diffs), max(diffs) <= tolerance) for key, diffs in self.diffs.items()]
        return pd.DataFrame(rows, columns=COLUMNS)


def compare_orders(state: State, event: Event, a: Algorithm, b: Algorithm) -> dict[str, float]:
    """Apply ``a`` then ``b`` (the run's order), and ``b`` then ``a``, at ``event`` to two copies of
    ``state``, both starting from the same random generators; the largest absolute difference of
    each field. An error in the run's order propagates (the run would meet it too); one only in
    the other order is a difference in every field (infinite), with a warning naming it."""
    saved = rng_state()
    try:
        left = _apply_in_order(state, event, (a, b))
        load_rng_state(saved)
        try:
            right = _apply_in_order(state, event, (b, a))
        except Exception as error:
            warnings.warn(f"{type(b).__name__} then {type(a).__name__} at {event.value} (the order the run does not "
                          f"take) raised on a copy of the State: {error!r}; counted as not commuting (every field "
                          f"an infinite difference)", stacklevel=2)
            return dict.fromkeys(FIELDS, float("inf"))
    finally:
        load_rng_state(saved)
    diffs = {field: _max_abs_diff(left[field], right[field]) for field in FIELDS}
    if left["modules"] != right["modules"]:
        diffs["model"] = float("inf")  # another module (a class, a name, a setting) in one order: another model
    return diffs


def _apply_in_order(state: State, event: Event, order: Sequence[Algorithm]) -> dict[str, Any]:
    twin, memo = twin_state(state)
    logger = Logger(twin)
    try:
        for algorithm in [memo[id(a)] for a in order]:
            algorithm.apply(event, twin, logger)
    except Exception as error:
        error.add_note(f"(raised while commutation() applied {' then '.join(type(a).__name__ for a in order)} at "
                       f"{event.value} to a copy of the State: the run's own model and state are untouched)")
        raise
    return _fields(twin)


def twin_state(state: State) -> tuple[State, dict[int, Any]]:
    """A deep copy of ``state`` with its algorithms, and the copy memo (original id -> copy).

    The dataloader and callbacks are shared, not copied (algorithms do not change them);
    tensors in the autograd graph (outputs, loss) are copied detached; functions an algorithm
    keeps that close over the state (a scoring forward) are rebuilt to close over the copy."""
    memo: dict[int, Any] = {id(state.dataloader): state.dataloader, id(state.callbacks): state.callbacks}
    for tensor in _tensors((state.batch, state.outputs, state.loss)) or []:
        if tensor.grad_fn is not None:
            memo[id(tensor)] = tensor.detach().clone().requires_grad_(True)
    cells = _closures(state.algorithms, memo)
    twin = copy.deepcopy(state, memo)
    for old, new in cells:
        new.cell_contents = copy.deepcopy(old.cell_contents, memo)
    return twin, memo


def _closures(algorithms: Sequence[Algorithm], memo: dict[int, Any]) -> list[tuple[Any, Any]]:
    """Put a copy of each function with a closure that an algorithm keeps into ``memo``, its
    cells empty; returns (old cell, new cell) pairs to fill once the state is copied."""
    cells = []
    for algorithm in algorithms:
        for value in vars(algorithm).values():
            if isinstance(value, types.FunctionType) and value.__closure__ and id(value) not in memo:
                new_cells = tuple(types.CellType() for _ in value.__closure__)
                memo[id(value)] = types.FunctionType(value.__code__, value.__globals__, value.__name__,
                                                     value.__defaults__, new_cells)
                cells.extend(zip(value.__closure__, new_cells))
    return cells


def _fields(state: State) -> dict[str, Any]:
    """The tensors of each compared field, and the model's modules (name, class, settings)."""
    return {
        "inputs": _batch_item(state, 0), "targets": _batch_item(state, 1),
        "outputs": _tensors(state.outputs), "loss": _tensors(state.loss),
        "model": list(state.model.state_dict().values()),
        "modules": _modules(state.model),
        "optimizer": _tensors([o.state_dict()["state"] for o in state.optimizers]),
    }


def _modules(model: torch.nn.Module) -> list[tuple[str, type, str]]:
    """Each module's name, class and settings (its ``extra_repr``, less object addresses: each copy has its own)."""
    return [(name, type(m), _ADDRESS.sub("", m.extra_repr())) for name, m in model.named_modules()]


def _batch_item(state: State, key: int) -> Optional[list[torch.Tensor]]:
    try:
        return _tensors(state.batch_get_item(key))
    except (KeyError, IndexError, TypeError):
        return None


def _tensors(value: Any) -> Optional[list[torch.Tensor]]:
    """The tensors in ``value`` (nested lists, tuples, dicts) in a fixed order; None if it holds none."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        found = [t for item in value for t in (_tensors(item) or [])]
        return found or None
    return None


def _max_abs_diff(left: Optional[list], right: Optional[list]) -> float:
    """The largest absolute difference of two lists of tensors; inf when their shapes differ."""
    if left is None or right is None:
        return 0.0 if left is right else float("inf")
    if len(left) != len(right) or any(x.shape != y.shape for x, y in zip(left, right)):
        return float("inf")
    diffs = [(x.detach().double() - y.detach().double()).abs().max().item() for x, y in zip(left, right) if x.numel()]
    return max(diffs, default=0.0)


def plot_commutation(table: pd.DataFrame) -> LabFigure:
    """A heatmap of the table: one row per pair, one column per event; green where the pair
    commutes, red where it does not, naming the first field that differs (inputs, targets,
    outputs, loss, model, optimizer: the later ones usually follow from it) and how many more:
    a size would mislead for class indices; blank where the pair never met there; a legend
    says so. With no pair (the algorithms never ran at one event) the figure says that."""
    if table.empty:
        fig = LabFigure(figsize=(6.5, 1.1))
        fig.text(0.5, 0.5, "These algorithms never ran at the same event: no pair to compare,\n"
                 "so their order cannot change the run.", ha="center", va="center")
        return fig
    differing = table[~table["commutes"]].assign(rank=lambda t: t["field"].map(FIELDS.index)).sort_values("rank")
    fields = differing.groupby(["first", "second", "event"], sort=False)["field"].agg(list)
    verdict = table.groupby(["first", "second", "event"], sort=False)["commutes"].all().reset_index()
    pairs = list(dict.fromkeys(f"{f} × {s}" for f, s in zip(verdict["first"], verdict["second"])))
    events = [e.value for e in Event if e.value in set(verdict["event"])]
    fig = LabFigure(figsize=(5.5 + 1.3 * len(events), 1.4 + 0.45 * len(pairs)))
    ax = fig.add_subplot()
    ax.set_xlim(-0.5, len(events) - 0.5)
    ax.set_ylim(len(pairs) - 0.5, -0.5)
    for first, second, event, commutes in verdict.itertuples(index=False):
        x, y = events.index(event), pairs.index(f"{first} × {second}")
        ax.add_patch(Rectangle((x - 0.48, y - 0.48), 0.96, 0.96, color=_GREEN if commutes else _RED))
        differ = [] if commutes else fields[(first, second, event)]
        text = "commutes" if commutes else f"≠ {differ[0]}" + (f" +{len(differ) - 1}" if len(differ) > 1 else "")
        ax.text(x, y, text, ha="center", va="center", fontsize=8, color="white")
    ax.set_xticks(range(len(events)), events, rotation=30, ha="right")
    ax.set_yticks(range(len(pairs)), pairs)
    ax.legend(handles=[Patch(color=_GREEN, label="the two orders leave the same state"),
                       Patch(color=_RED, label="≠ the first field that differs, +N more"),
                       Patch(facecolor="white", edgecolor="#999", label="the pair never met at that event")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"Do the pairs commute? (tolerance {table.attrs.get('tolerance', TOLERANCE):g})")
    fig.tight_layout()
    return fig
