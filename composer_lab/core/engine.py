"""The engine: runs the algorithms and callbacks of each event, in the order the passes decide."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import contextmanager
from functools import cached_property
from operator import is_not
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence, Union

from composer_lab.core.algorithm import Algorithm, listens
from composer_lab.core.callback import listened_events
from composer_lab.core.changes import FieldWatcher, torch_hooks
from composer_lab.core.event import _PHASE, Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import DEFAULT_PASSES, ORDER_ONLY_PASSES, AlgorithmPass, pass_name
from composer_lab.core.state import State
from composer_lab.core.trace import Trace

__all__ = ["Engine", "AlgorithmTrace", "Traces"]

PassSpec = Union[AlgorithmPass, tuple, Sequence[Any]]
_now = time.perf_counter
_INIT = Event.INIT


class AlgorithmTrace(NamedTuple):
    """One algorithm's run at one event, as Composer's ``Trace``: its exit code (what ``apply``
    returned) and its position after the passes."""

    exit_code: Any
    order: int
    run: bool = True


class Traces(Mapping):
    """What :meth:`Engine.run_event` returns, as Composer's ``Traces``: ``'<name>/<event>'``
    (``'CutMix/after_dataloader'``) to the :class:`AlgorithmTrace` of each algorithm that ran,
    in run order. Built when first read: most callers (the trainer) drop it, and an event then
    pays for one small object, not for a key and a record per algorithm."""

    def __init__(self, label: Callable[[Any], str], algorithms: Sequence[Algorithm], codes: list,
                 event: Event) -> None:
        self._parts = (label, algorithms, codes, event)

    @cached_property
    def _traces(self) -> dict[str, AlgorithmTrace]:
        label, algorithms, codes, event = self._parts
        return {f"{label(a)}/{event.value}": AlgorithmTrace(code, order)
                for order, (a, code) in enumerate(zip(algorithms, codes))}

    def __getitem__(self, key: str) -> AlgorithmTrace:
        return self._traces[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._traces)

    def __len__(self) -> int:
        return len(self._traces)

    def __repr__(self) -> str:
        return repr(self._traces)


class Engine:
    """Runs ``state.algorithms`` and ``state.callbacks`` at each event and records it all.

    ``run_event(event)``: ask every algorithm ``match(event, state)``, put the matches
    through the passes, ``apply`` each in the resulting order, then run the callbacks (on
    ``INIT``, callbacks first). ``algorithm_passes`` adds passes to the default ones and
    accepts ``f``, ``[f]``, ``(f, index)`` or ``[(f, index), g]``. The pass list may change
    between any two events (:meth:`register_pass`, :attr:`passes`); the change holds from the
    next event on. ``plan(event)`` gives the order without applying anything, through the same
    code as ``run_event``.

    Lifecycle: the trainer enters :meth:`running` around fit, eval and predict (it installs
    what change detection needs for the run and removes it after) and calls :meth:`close` once
    at the end, which closes every callback; a closed engine runs no more events.
    """

    def __init__(self, state: State, logger: Optional[Logger] = None,
                 algorithm_passes: Optional[PassSpec] = None, trace: Union[str, Trace] = "all") -> None:
        self.state = state
        self.logger = logger if logger is not None else Logger(state)
        self.trace = trace if isinstance(trace, Trace) else Trace(trace)
        self.passes = DEFAULT_PASSES
        self._listed: list = []  # copies of the algorithms and callbacks lists last seen, to notice a change
        self._listed_names: tuple[str, ...] = ()
        self._listening: dict[Event, list] = {}
        self._callbacks_listed: list = []
        self._callbacks_listening: dict[Event, list] = {event: [] for event in Event}
        self._watcher = FieldWatcher(state)
        self.closed = False
        """Whether :meth:`close` ran: the engine then runs no more events."""
        self.event: Optional[Event] = None
        """The event being run, or the last one run."""
        if algorithm_passes is None:
            algorithm_passes = []
        elif not isinstance(algorithm_passes, (list, tuple)) or _is_indexed(algorithm_passes):
            algorithm_passes = [algorithm_passes]  # one pass: f or (f, index)
        for spec in algorithm_passes:
            if callable(spec):
                self.register_pass(spec)
            elif _is_indexed(spec):
                self.register_pass(*spec)
            else:
                raise TypeError(f"algorithm_passes: cannot read {spec!r}; give a pass function f (the function, "
                                f"not its name), or (f, index) to insert it at a position, or a list of those")

    # -- passes -------------------------------------------------------------------------------
    @property
    def passes(self) -> list[AlgorithmPass]:
        """The passes in the order they run (a copy; assign a list to change them)."""
        return list(self._passes)

    @passes.setter
    def passes(self, passes: Sequence[AlgorithmPass]) -> None:
        for p in passes:
            if not callable(p):
                raise TypeError(f"an algorithm pass is a function (algorithms, event) -> algorithms, got "
                                f"{type(p).__name__} {p!r}")
        # Two plain attributes read at every event; an event in flight keeps the list it started with.
        self._keep_singletons = all(p in ORDER_ONLY_PASSES for p in passes)
        self._passes = list(passes)

    def register_pass(self, algorithm_pass: AlgorithmPass, index: int = -1) -> None:
        """Add a pass at ``index`` (-1: last)."""
        passes = list(self._passes)
        passes.insert(len(passes) if index == -1 else index, algorithm_pass)
        self.passes = passes

    def remove_pass(self, algorithm_pass: Union[AlgorithmPass, str]) -> None:
        """Remove a pass, given as the function or its name."""
        keep = [p for p in self._passes if p is not algorithm_pass and pass_name(p) != algorithm_pass]
        if len(keep) == len(self._passes):
            raise ValueError(f"no pass {algorithm_pass!r} to remove; the engine's passes are "
                             f"{[pass_name(p) for p in self._passes]}: give one of those names or the function")
        self.passes = keep

    # -- ordering -----------------------------------------------------------------------------
    def plan(self, event: Union[Event, str], algorithms: Optional[Sequence[Algorithm]] = None,
             assume_matched: bool = False) -> list[Algorithm]:
        """The algorithms that would run at ``event`` now, in order; nothing is applied.

        ``algorithms`` defaults to ``state.algorithms``; they are asked ``match`` on the
        current state, as ``run_event`` would, unless ``assume_matched`` (then all of them
        go through the passes: the order they would run in if they all matched)."""
        return self.plan_steps(event, algorithms, assume_matched)[-1][1]

    def plan_steps(self, event: Union[Event, str], algorithms: Optional[Sequence[Algorithm]] = None,
                   assume_matched: bool = False) -> list[tuple[str, list[Algorithm]]]:
        """How the order of ``event`` comes about: ``('match', matched)`` then, for each pass,
        its name and the order after it (``assume_matched``: as in :meth:`plan`)."""
        event = Event(event)
        algorithms = self.state.algorithms if algorithms is None else algorithms
        matched = list(algorithms) if assume_matched else [
            a for a in algorithms if listens(a, event) and a.match(event, self.state)]
        steps = [("match", matched)]
        self._order(matched, event, steps)
        return steps

    def _order(self, matched: Sequence[Algorithm], event: Event,
               steps: Optional[list] = None) -> Sequence[Algorithm]:
        """``matched`` through the passes (each result appended to ``steps`` if given): the one
        way both the run and the plan order an event, also when nothing matched (a pass may
        add an algorithm)."""
        for p in self._passes:
            matched = p(matched, event)
            if not isinstance(matched, (list, tuple)):
                raise TypeError(f"algorithm pass {pass_name(p)} returned {type(matched).__name__}; a pass must "
                                f"return the list of algorithms (return it even when it changes nothing)")
            if steps is not None:
                steps.append((pass_name(p), list(matched)))
        return matched

    @contextmanager
    def running(self) -> Iterator["Engine"]:
        """Install, for the duration, what change detection needs (PyTorch's process-wide module,
        parameter and optimizer-step hooks) and remove it after. The trainer enters it around
        fit, eval and predict; events run outside it are traced all the same, more slowly."""
        with torch_hooks():
            yield self

    # -- running ------------------------------------------------------------------------------
    # The hot path: written flat, with no allocation or call an event does not need (it runs
    # about 13 times per training step); rows go straight into the trace's lists.
    def run_event(self, event: Union[Event, str]) -> Mapping[str, AlgorithmTrace]:
        """Run the algorithms and callbacks of ``event``, record them in the trace, and return
        the :class:`Traces` of the algorithms that ran (``{}`` if none)."""
        if type(event) is not Event:
            event = Event(event)
        if self.closed:
            raise RuntimeError(f"the engine was closed, so it cannot run {event.value}; build a new Trainer "
                               f"(or Engine) to train again")
        state, trace = self.state, self.trace
        self.event = event
        self.logger.phase = _PHASE[event]
        trace.seq = seq = trace.seq + 1
        asked = None  # the algorithms asked here, when the trace keeps the ones that said no
        traces: Mapping[str, AlgorithmTrace] = {}
        t0 = _now()
        try:
            if event is _INIT:
                self._run_callbacks(event, seq)  # on INIT, callbacks first
            algorithms = state.algorithms
            if algorithms:
                if _edited(algorithms, self._listed):
                    self._list_algorithms(algorithms)  # a new list, or this one edited in place
                matched = []
                for algorithm in self._listening[event]:  # a loop, not a comprehension: no frame when none listen
                    if algorithm.match(event, state):
                        matched.append(algorithm)
                if len(matched) < len(algorithms) and trace.records_unmatched:
                    asked = self._listed_names
                if len(matched) > 1 or not self._keep_singletons:
                    matched = self._order(matched, event)  # (order-only passes cannot change 0 or 1)
                if matched:
                    codes = self._invoke_all(matched, "algorithm", "apply", event, seq)
                    traces = Traces(trace.label, matched, codes, event)
            if state.callbacks and event is not _INIT:
                self._run_callbacks(event, seq)
        finally:
            if trace.recording:
                ts = state.timestamp
                rows = trace.event_rows
                rows.append(  # an EventRecord's fields, as a plain tuple (see Trace)
                    (seq, event._value_, ts.epoch, ts.batch, ts.batch_in_epoch, state.microbatch, t0, _now(), asked))
                if len(rows) >= trace.chunk_rows:
                    trace.spill()  # a full chunk of rows goes to parquet: the trace's memory stays bounded
        return traces

    def _list_algorithms(self, algorithms: list) -> None:
        """Note a new or edited algorithms list: name its instances in list order ('LabelSmoothing',
        'LabelSmoothing#2'), not run order, and keep, for each event, the algorithms whose
        ``events`` admit it (the only ones asked ``match`` there)."""
        self._listed_names = tuple([self.trace.label(algo) for algo in algorithms])
        self._listening = {event: [a for a in algorithms if listens(a, event)] for event in Event}
        self._listed = list(algorithms)

    def _run_callbacks(self, event: Event, seq: int) -> None:
        callbacks = self.state.callbacks
        if _edited(callbacks, self._callbacks_listed):  # as for algorithms: each event's listeners, kept
            self._callbacks_listed = list(callbacks)
            events = [listened_events(cb) for cb in callbacks]
            self._callbacks_listening = {e: [cb for cb, on in zip(callbacks, events) if e in on] for e in Event}
        listening = self._callbacks_listening[event]
        if listening:
            self._invoke_all(listening, "callback", "run_event", event, seq)

    def _invoke_all(self, objs: Sequence[Any], kind: str, method: str, event: Event, seq: int) -> list:
        """Call ``method`` of each of ``objs`` in order and return what each returned; with the
        trace on, record each with its duration, exit code, error and the State fields it
        changed (the watcher compares each call with the state the previous one left, and the
        model only around calls whose ``writes`` may include it). A call may fire an event (as
        Composer allows): the calls of that one are watched by a watcher of their own, and the
        calling one's changed fields include theirs."""
        state, trace, logger = self.state, self.trace, self.logger
        codes: list = []
        if not trace.recording:
            for obj in objs:
                codes.append(getattr(obj, method)(event, state, logger))
            return codes
        watcher = self._watcher or FieldWatcher(state)  # (None: an event fired from a call, which has its own)
        self._watcher, rows, value, batch = None, trace.invocation_rows, event._value_, state.timestamp.batch
        watcher.watch(event)
        for order, obj in enumerate(objs):
            name = trace.label(obj)
            call = getattr(obj, method)
            watcher.before(obj)
            t0 = _now()
            try:
                exit_code = call(event, state, logger)
            except BaseException as err:
                duration = _now() - t0
                rows.append((seq, value, batch, name, kind, order, None, duration,  # InvocationRecord's
                             watcher.changed(), f"{type(err).__name__}: {err}"))
                raise
            duration = _now() - t0
            rows.append((seq, value, batch, name, kind, order, exit_code, duration, watcher.changed(), None))
            codes.append(exit_code)
        watcher.release()
        self._watcher = watcher
        return codes

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the engine down, as Composer does: each callback's ``close(state, logger)``, then
        ``post_close()`` of each whose ``close`` did not raise. Every callback is closed even if
        one raises; the first error is raised after. A second call does nothing."""
        if self.closed:
            return
        self.closed = True
        errors, closed = [], []
        for cb in self.state.callbacks:
            try:
                cb.close(self.state, self.logger)
                closed.append(cb)
            except Exception as err:  # close the others before raising
                errors.append(err)
        for cb in closed:
            try:
                cb.post_close()
            except Exception as err:
                errors.append(err)
        if errors:
            raise errors[0]


def _edited(current: Sequence[Any], seen: Sequence[Any]) -> bool:
    """Whether ``current`` holds other objects than ``seen``, compared by identity: an equal
    instance (a dataclass with the same fields) swapped in is another algorithm."""
    return len(current) != len(seen) or any(map(is_not, current, seen))


def _is_indexed(item: Any) -> bool:
    """Whether ``item`` is ``(f, index)``."""
    return isinstance(item, tuple) and len(item) == 2 and callable(item[0]) and isinstance(item[1], int)
