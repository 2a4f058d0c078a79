"""The engine: runs the algorithms and callbacks of each event, in the order the passes decide."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Union

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.callback import listened_events
from composer_lab.core.watcher import CheckedWatcher, FieldWatcher, ModelHooks
from composer_lab.core.event import _PHASE, Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import DEFAULT_PASSES, ORDER_ONLY_PASSES, AlgorithmPass, pass_name
from composer_lab.core.state import EditCountingList, State
from composer_lab.core.trace import Trace

__all__ = ["Engine", "AlgorithmTrace", "Traces"]

PassSpec = Union[AlgorithmPass, tuple, Sequence[Any]]
_now = time.perf_counter
_new = tuple.__new__  # (a tuple subclass made without a Python __init__)
_INIT = Event.INIT
CHECK_WRITES_VARIABLE = "COMPOSER_LAB_CHECK_WRITES"
"""Set to 1 to build every engine with ``check_writes=True`` (a test run, a debugging session)."""


class AlgorithmTrace(NamedTuple):
    """One algorithm's run at one event, as Composer's ``Trace``: its exit code (what ``apply``
    returned) and its position after the passes."""

    exit_code: Any
    order: int
    run: bool = True


class Traces(tuple, Mapping):
    """What :meth:`Engine.run_event` returns, as Composer's ``Traces``: ``'<name>/<event>'``
    (``'CutMix/after_dataloader'``) to the :class:`AlgorithmTrace` of each algorithm that ran,
    in run order. A mapping built when first read from what the event kept (the labeller, the
    algorithms in order, their exit codes, the event): most callers (the trainer) drop it, and an
    event then pays for one tuple, made without a Python ``__init__``, not for a key and a record
    per algorithm."""

    @cached_property
    def _traces(self) -> dict[str, AlgorithmTrace]:
        label, algorithms, codes, event = tuple.__iter__(self)
        return {f"{label(a)}/{event.value}": AlgorithmTrace(code, order)
                for order, (a, code) in enumerate(zip(algorithms, codes))}

    def __getitem__(self, key: str) -> AlgorithmTrace:
        return self._traces[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._traces)

    def __len__(self) -> int:
        return len(self._traces)

    def __contains__(self, key: object) -> bool:
        return key in self._traces

    def __eq__(self, other: object) -> bool:
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # (a mapping: not hashable, as a dict)

    def __repr__(self) -> str:
        return repr(self._traces)


_NO_TRACES = Traces((str, (), [], Event.INIT))
"""What an event at which no algorithm ran returns (empty; read-only, as every :class:`Traces`)."""


class Listening(NamedTuple):
    """Who listens at one ``event``: the ``algorithms`` asked ``match`` there and their trace
    ``labels`` (in list order: 'LabelSmoothing', 'LabelSmoothing#2'), the ``callbacks`` run there;
    the event's ``phase`` (the logger's while it runs), whether it ``asks`` (someone listens, or
    a pass may add an algorithm) and whether it ``orders`` what matched (the passes run: a pass
    may add one, or two may match; with order-only passes, one that matched is left as it is);
    ``solo``: the one algorithm asked where nothing else happens (no callback, no pass runs), the
    usual event of a step, which an untraced run answers in a few lines (else None)."""

    event: Event
    algorithms: tuple
    labels: tuple[str, ...]
    callbacks: tuple
    phase: str
    asks: bool
    orders: bool
    solo: Optional[Algorithm]


class Engine:
    """Runs ``state.algorithms`` and ``state.callbacks`` at each event and records it all.

    ``run_event(event)``: match (ask the algorithms that listen at the event), order (the
    passes), apply (each in that order, then the callbacks; on ``INIT`` callbacks first), record
    (the trace). ``algorithm_passes`` adds passes to the default ones and accepts ``f``,
    ``[f]``, ``(f, index)`` or ``[(f, index), g]``. The pass list may change between any two
    events (:meth:`register_pass`, :attr:`passes`); the change holds from the next event on.
    ``plan(event)`` gives the order without applying anything, through the same ordering
    function as ``run_event``. ``check_writes`` (default: the environment variable
    ``COMPOSER_LAB_CHECK_WRITES``) trusts no ``writes`` declaration and raises at a call that
    changed a field it left out (a debug mode: every call then compares the whole model).

    Lifecycle: the trainer enters :meth:`watching` around fit, eval and predict (it installs
    what change detection needs for the run and removes it after) and calls :meth:`close` once
    at the end, which closes every callback; a closed engine runs no more events.
    """

    def __init__(self, state: State, logger: Optional[Logger] = None,
                 algorithm_passes: Optional[PassSpec] = None, trace: Union[str, Trace] = "all",
                 check_writes: Optional[bool] = None) -> None:
        self.state = state
        self.logger = logger if logger is not None else Logger(state)
        self.trace = trace if isinstance(trace, Trace) else Trace(trace)
        self.passes = DEFAULT_PASSES
        self.check_writes = os.environ.get(CHECK_WRITES_VARIABLE, "") == "1" if check_writes is None else check_writes
        self.model_hooks = ModelHooks(optimizer_steps=self.check_writes)
        """The PyTorch hooks change detection reads, installed by :meth:`watching` (optimizer steps
        heard only under ``check_writes``, whose model signatures are reused across events)."""
        self._listening: dict[Event, Listening] = {}
        self._labels: dict[int, str] = {}  # id of each algorithm and callback listed -> its trace label
        self._generation = -1  # EditCountingList.generation when the two were worked out
        self._watcher: Optional[FieldWatcher] = self._new_watcher()
        self.closed = False
        """Whether :meth:`close` ran: the engine then runs no more events."""
        self.event: Optional[Event] = None
        """The event being run, or the last one run."""
        for algorithm_pass, index in _pass_specs(algorithm_passes):
            self.register_pass(algorithm_pass, index)

    def _new_watcher(self) -> FieldWatcher:
        return (CheckedWatcher if self.check_writes else FieldWatcher)(self.state, self.model_hooks)

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
        # Plain attributes read at every event; an event in flight keeps the list it started with.
        self._keep_singletons = all(p in ORDER_ONLY_PASSES for p in passes)
        self._passes = list(passes)
        self._generation = -1  # (who asks at each event depends on the passes too: worked out again)

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

        ``algorithms`` defaults to ``state.algorithms``; those that listen at ``event`` are
        asked ``match`` on the current state, as ``run_event`` would, unless ``assume_matched``
        (then all of them go through the passes: the order they would run in if they all matched)."""
        return list(self.plan_steps(event, algorithms, assume_matched)[-1][1])

    def plan_steps(self, event: Union[Event, str], algorithms: Optional[Sequence[Algorithm]] = None,
                   assume_matched: bool = False) -> list[tuple[str, list[Algorithm]]]:
        """How the order of ``event`` comes about: ``('match', matched)`` then, for each pass,
        its name and the order after it (``assume_matched``: as in :meth:`plan`)."""
        event = Event(event)
        algorithms = self.state.algorithms if algorithms is None else algorithms
        state = self.state
        matched = list(algorithms) if assume_matched else [a for a in algorithms if a.listens(event)
                                                           and a.match(event, state)]
        steps = [("match", matched)]
        self._order(matched, event, steps)
        return steps

    def _order(self, matched: Sequence[Algorithm], event: Event, steps: Optional[list] = None) -> Sequence[Algorithm]:
        """``matched`` through the passes (each result appended to ``steps`` if given): the one way
        both the run and the plan order an event, also when nothing matched (a pass may add an
        algorithm). (A run skips it where only order-only passes would see fewer than two.)"""
        for p in self._passes:
            matched = p(matched, event)
            if not isinstance(matched, (list, tuple)):
                raise TypeError(f"algorithm pass {pass_name(p)} returned {type(matched).__name__}; a pass must "
                                f"return the list of algorithms (return it even when it changes nothing)")
            if steps is not None:
                steps.append((pass_name(p), list(matched)))
        return matched

    @contextmanager
    def watching(self) -> Iterator["Engine"]:
        """Install, for the duration, what change detection needs (the engine's :class:`ModelHooks`:
        PyTorch's process-wide module, parameter and optimizer-step hooks) and remove it after. The
        trainer enters it around fit, eval and predict; events run outside it are traced all the
        same, more slowly. With the trace off nothing is installed: nothing is compared."""
        if not self.trace.recording:
            yield self
            return
        with self.model_hooks.installed():
            yield self

    def _listen(self, event: Event) -> None:
        """Work out who listens at each event from ``state.algorithms`` and ``state.callbacks``
        as they are now; done again at the first event after either list was assigned or edited
        (:attr:`EditCountingList.generation` moved: one number read per event, however long the
        lists) or the passes changed. A closed engine refuses to run ``event`` here."""
        if self.closed:
            raise RuntimeError(f"the engine was closed, so it cannot run {event.value}; build a new Trainer "
                               f"(or Engine) to train again")
        generation = EditCountingList.generation  # (read first: an edit meanwhile moves it again)
        algorithms, callbacks, label = list(self.state.algorithms), list(self.state.callbacks), self.trace.label
        self._labels = {id(obj): label(obj) for obj in (*algorithms, *callbacks)}
        events_of, may_add = {id(c): listened_events(c) for c in callbacks}, not self._keep_singletons
        self._listening = {e: Listening(e, at := tuple([a for a in algorithms if a.listens(e)]),
                                        tuple([self._labels[id(a)] for a in at]),
                                        cbs := tuple([c for c in callbacks if e in events_of[id(c)]]),
                                        _PHASE[e], bool(at) or may_add, len(at) > 1 or may_add,
                                        at[0] if len(at) == 1 and not (cbs or may_add) else None)
                           for e in Event}
        self._generation = generation

    # -- running ------------------------------------------------------------------------------
    # The hot path (about 13 events per training step): no allocation or call an event does not need.
    def run_event(self, event: Union[Event, str]) -> Mapping[str, AlgorithmTrace]:
        """Run ``event``: match, order, apply, then record it in the trace; the :class:`Traces` of
        the algorithms that ran (empty if none)."""
        if self._generation != EditCountingList.generation:
            self._listen(Event(event))  # (a list or the passes changed since the last event; closed: raises)
        try:  # (an Event is a str: its value finds it too)
            event, algorithms, labels, callbacks, phase, asks, orders, solo = self._listening[event]
        except (KeyError, TypeError):
            Event(event)  # (not an event: raises, naming the closest one)
            raise
        trace = self.trace
        self.event = event
        self.logger.phase = phase
        trace.seq = seq = trace.seq + 1
        recording = trace.recording
        if not recording:
            if solo is not None:  # (the untraced step's usual event: one algorithm, nothing else to do)
                if solo.match(event, self.state):
                    return _new(Traces, (trace.label, algorithms, (solo.apply(event, self.state, self.logger),), event))
                return _NO_TRACES
            if not (asks or callbacks):
                return _NO_TRACES  # (nobody listens, and nothing to record)
        asked, traces, t0 = None, _NO_TRACES, _now() if recording else 0.0
        try:
            if callbacks and event is _INIT:
                self._call_all(callbacks, "callback", event, seq)  # on INIT, callbacks first
            if asks:
                matched, state = [], self.state
                for algorithm in algorithms:  # (a loop, not a comprehension or a method: no frame of its own)
                    if algorithm.match(event, state):
                        matched.append(algorithm)
                if len(matched) < len(algorithms) and trace.records_unmatched:
                    asked = labels  # the trace works out who said no when read
                if orders and (len(matched) > 1 or not self._keep_singletons):
                    matched = self._order(matched, event)
                if matched:
                    if recording:
                        codes = self._call_all(matched, "algorithm", event, seq)
                    else:  # (the untraced step's calls, inline: no frame, nothing to record)
                        codes, logger = [], self.logger
                        for algorithm in matched:
                            codes.append(algorithm.apply(event, state, logger))
                    traces = _new(Traces, (trace.label, matched, codes, event))
            if callbacks and event is not _INIT:
                self._call_all(callbacks, "callback", event, seq)
        finally:
            if recording:  # the event's row, after its calls' (a full chunk of rows goes to parquet)
                ts = self.state.timestamp
                trace.add_event((seq, event._value_, ts.epoch, ts.batch, ts.batch_in_epoch, self.state.microbatch, t0,
                                 _now(), asked))
                if len(trace.event_fields) >= trace.chunk_fields:
                    trace.spill()
        return traces

    def _call_all(self, objs: Sequence[Any], kind: str, event: Event, seq: int) -> list:
        """Call each of ``objs`` in order (an algorithm's ``apply``, a callback's ``run_event``, as
        ``kind`` says) and return what each returned; with the trace on, record each call: its
        duration, exit code, error and the State fields it changed (the watcher compares it with
        the state the previous call left; a call may fire an event, as Composer allows, whose
        calls have a watcher of their own)."""
        state, logger, trace, applies = self.state, self.logger, self.trace, kind == "algorithm"
        if not trace.recording:
            codes = []
            for obj in objs:  # (a loop, not a comprehension: no frame of its own)
                codes.append(obj.apply(event, state, logger) if applies else obj.run_event(event, state, logger))
            return codes
        watcher = self._watcher or self._new_watcher()  # (None: an event fired from a call, which has its own)
        self._watcher, codes, value, batch, labels = None, [], event._value_, state.timestamp.batch, self._labels
        try:
            for order, obj in enumerate(objs):  # (written flat: it runs for every call)
                watcher.before(obj, event)
                exit_code = error = None
                t0 = _now()
                try:
                    exit_code = obj.apply(event, state, logger) if applies else obj.run_event(event, state, logger)
                except BaseException as err:
                    error = f"{type(err).__name__}: {err}"
                    raise
                finally:  # (the row is written before an error propagates; a pass may add an unlisted algorithm)
                    trace.add_call((seq, value, batch, labels.get(id(obj)) or trace.label(obj), kind, order,
                                    exit_code, _now() - t0, watcher.changed(), error))
                codes.append(exit_code)
            return codes
        finally:
            watcher.release()  # (also when a call raised: the last traceback holds no loss or graph)
            self._watcher = watcher

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the engine down, as Composer does: each callback's ``close(state, logger)``, then
        ``post_close()`` of each whose ``close`` did not raise. Every callback is closed even if
        one raises; the first error is raised after. A second call does nothing."""
        if self.closed:
            return
        self.closed, self._generation = True, None  # (the next event goes to _listen, which refuses it)
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


def _pass_specs(specs: Optional[PassSpec]) -> list[tuple[AlgorithmPass, int]]:
    """``algorithm_passes`` as ``(pass, index)`` pairs: ``f``, ``[f]``, ``(f, index)`` or a list of those."""
    if specs is None:
        return []
    if not isinstance(specs, (list, tuple)) or _is_indexed(specs):
        specs = [specs]  # one pass: f or (f, index)
    pairs = []
    for spec in specs:
        if not (callable(spec) or _is_indexed(spec)):
            raise TypeError(f"algorithm_passes: cannot read {spec!r}; give a pass function f (the function, "
                            f"not its name), or (f, index) to insert it at a position, or a list of those")
        pairs.append(spec if _is_indexed(spec) else (spec, -1))
    return pairs


def _is_indexed(item: Any) -> bool:
    """Whether ``item`` is ``(f, index)``."""
    return isinstance(item, tuple) and len(item) == 2 and callable(item[0]) and isinstance(item[1], int)
