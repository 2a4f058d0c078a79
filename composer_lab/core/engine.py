"""The engine: runs the algorithms and callbacks of each event, in the order the passes decide."""

from __future__ import annotations

import atexit
import os
import weakref
from contextlib import contextmanager
from time import perf_counter
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.callback import listened_events
from composer_lab.core.changes import ChangeObserver, NoObserver
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import DEFAULT_PASSES, ORDER_ONLY_PASSES, AlgorithmPass, pass_name
from composer_lab.core.state import EditCountingList, State
from composer_lab.core.trace import Trace

__all__ = ["Engine", "AlgorithmTrace", "Traces"]

PassSpec = Union[AlgorithmPass, tuple, Sequence[Any]]
CHECK_WRITES_VARIABLE = "COMPOSER_LAB_CHECK_WRITES"
"""Set to 1 to build every engine with ``check_writes=True`` (a test run, a debugging session)."""


class AlgorithmTrace(NamedTuple):
    """One algorithm's run at one event, as Composer's ``Trace``: its exit code (what ``apply``
    returned) and its position after the passes."""

    exit_code: Any
    order: int
    run: bool = True


class Traces(Mapping):
    """What :meth:`Engine.run_event` returns, as Composer's ``Traces``: ``'<name>/<event>'``
    (``'CutMix/after_dataloader'``) to the :class:`AlgorithmTrace` of each algorithm that ran, in
    run order; read-only. Its keys are built when it is first read (most callers never read it)."""

    def __init__(self, label: Callable[[Any], str], event: Event, called: Sequence[Any], codes: Sequence[Any]) -> None:
        self._made = (label, event, called, codes)
        self._traces: Optional[dict[str, AlgorithmTrace]] = None

    def _built(self) -> dict[str, AlgorithmTrace]:
        if self._traces is None:
            label, event, called, codes = self._made
            self._traces = {f"{label(a)}/{event.value}": AlgorithmTrace(code, order)
                            for order, (a, code) in enumerate(zip(called, codes))}
        return self._traces

    def __getitem__(self, key: str) -> AlgorithmTrace:
        return self._built()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._made[2])

    def __repr__(self) -> str:
        return f"Traces({self._built()!r})"


NO_TRACES = Traces(str, Event.INIT, (), ())
"""The :class:`Traces` of an event at which no algorithm ran."""


class Listeners(NamedTuple):
    """Who listens at one event: the algorithms asked ``match`` there, the callbacks run there."""

    algorithms: tuple
    callbacks: tuple


class Engine:
    """Runs ``state.algorithms`` and ``state.callbacks`` at each event and records it all.

    ``run_event(event)``: match (ask the algorithms that listen at the event), order (the
    passes), apply (each in that order, then the callbacks; on ``INIT`` callbacks first), record
    (the trace: what it keeps depends on its level). ``algorithm_passes`` adds passes to the
    default ones and accepts ``f``, ``[f]``, ``(f, index)``, ``[f, index]`` or a list of those.
    The pass list may change between any two events (:meth:`register_pass`, :attr:`passes`).
    ``plan(event)`` gives the order without applying anything, through the same ordering
    function as ``run_event``. ``check_writes`` (default: the environment variable
    ``COMPOSER_LAB_CHECK_WRITES``) trusts no ``writes`` declaration and raises at a call that
    changed a field it left out (a debug mode: every call then compares the whole model).

    Lifecycle, as Composer's: the trainer enters :meth:`watching` around fit, eval and predict
    and calls :meth:`close` at the end, which closes every callback; a closed engine runs no more
    events. An engine dropped without :meth:`close` closes its callbacks when collected, or at
    interpreter exit if still alive then; a callback still open in another engine is refused at ``INIT``.
    """

    def __init__(self, state: State, logger: Optional[Logger] = None,
                 algorithm_passes: Optional[PassSpec] = None, trace: Union[str, Trace] = "all",
                 check_writes: Optional[bool] = None) -> None:
        self.state = state
        self.logger = logger if logger is not None else Logger(state)
        self.trace = trace if isinstance(trace, Trace) else Trace(trace)
        self.check_writes = os.environ.get(CHECK_WRITES_VARIABLE, "") == "1" if check_writes is None else check_writes
        self.observer = ChangeObserver(state, self.check_writes) if self.trace.recording else NoObserver()
        """Tells which State fields each call changed (nothing with the trace off)."""
        self.passes = list(DEFAULT_PASSES)
        self.event: Optional[Event] = None
        """The event being run, or the last one run."""
        self._listening: dict[Event, Listeners] = {}
        self._generation = -1  # EditCountingList.generation when the listeners were worked out
        self._closer = _Closer(state, self.logger)
        atexit.register(self._closer)
        for algorithm_pass, index in _pass_specs(algorithm_passes):
            self.register_pass(algorithm_pass, index)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran: the engine then runs no more events."""
        return self._closer.closed

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
        self._passes = list(passes)
        self._order_only = all(p in ORDER_ONLY_PASSES for p in self._passes)

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

    def runs_per_step(self, event: Union[Event, str]) -> int:
        """How many times ``event`` fires in a training step (per microbatch, for the microbatch
        events): the closure's calls for an event the optimizer's closure fires (2 under SAM), else 1."""
        return self.state.closure_calls if Event(event).in_closure else 1

    def plan_steps(self, event: Union[Event, str], algorithms: Optional[Sequence[Algorithm]] = None,
                   assume_matched: bool = False) -> list[tuple[str, list[Algorithm]]]:
        """How the order of ``event`` comes about: ``('match', matched)`` then, for each pass,
        its name and the order after it (``assume_matched``: as in :meth:`plan`)."""
        event = Event(event)
        algorithms = self.state.algorithms if algorithms is None else algorithms
        matched = list(algorithms) if assume_matched else self._match(algorithms, event)
        steps = [("match", matched)]
        self._order(matched, event, steps)
        return steps

    def _match(self, algorithms: Sequence[Algorithm], event: Event) -> list[Algorithm]:
        return [a for a in algorithms if a.listens(event) and a.match(event, self.state)]

    def _order(self, matched: Sequence[Algorithm], event: Event, steps: Optional[list] = None) -> Sequence[Algorithm]:
        """``matched`` through the passes (each result appended to ``steps`` if given): the one way
        both the run and the plan order an event. Passes that only reorder have nothing to do
        with fewer than two algorithms; any other pass may add one, so it always runs."""
        if steps is None and len(matched) < 2 and self._order_only:
            return matched
        for p in self._passes:
            matched = p(matched, event)
            if not isinstance(matched, (list, tuple)):
                raise TypeError(f"algorithm pass {pass_name(p)} returned {type(matched).__name__}; a pass must "
                                f"return the list of algorithms (return it even when it changes nothing)")
            if steps is not None:
                steps.append((pass_name(p), list(matched)))
        return matched

    def _listeners(self, event: Event) -> Listeners:
        """Who listens at ``event``, worked out again from ``state.algorithms`` and
        ``state.callbacks`` after either was assigned or edited. A closed engine refuses here."""
        if self._closer.closed:
            raise RuntimeError(f"the engine was closed, so it cannot run {event.value}; build a new Trainer "
                               f"(or Engine) to train again")
        if self._generation != EditCountingList.generation:
            self._generation = EditCountingList.generation  # (read first: an edit meanwhile moves it again)
            algorithms, callbacks = list(self.state.algorithms), list(self.state.callbacks)
            for obj in (*algorithms, *callbacks):
                self.trace.label(obj)  # (labelled in list order: 'Name', then 'Name#2', whatever order they run in)
            events_of = [(c, listened_events(c)) for c in callbacks]
            self._listening = {e: Listeners(tuple(a for a in algorithms if a.listens(e)),
                                            tuple(c for c, events in events_of if e in events)) for e in Event}
        return self._listening[event]

    # -- running ------------------------------------------------------------------------------
    def run_event(self, event: Union[Event, str]) -> Traces:
        """Run ``event``: match, order, apply, record; the :class:`Traces` of the algorithms that ran."""
        event = event if isinstance(event, Event) else Event(event)
        algorithms, callbacks = self._listeners(event)
        self.event, self.logger.phase = event, event.phase
        self.trace.seq = seq = self.trace.seq + 1
        t_start, called, codes = perf_counter(), [], []
        try:
            if event is Event.INIT:
                _claim_callbacks(self.state.callbacks, self._closer)
                self._call_all(callbacks, "callback", event, seq, [])  # on INIT, callbacks first
            ordered = self._order([a for a in algorithms if a.match(event, self.state)], event)
            codes = self._call_all(ordered, "algorithm", event, seq, called)
            if callbacks and event is not Event.INIT:
                self._call_all(callbacks, "callback", event, seq, [])
        finally:
            self.observer.event_end()
            self._record_event(event, seq, t_start, algorithms, called)
        return Traces(self.trace.label, event, called, codes) if called else NO_TRACES

    def _call_all(self, objs: Sequence[Any], kind: str, event: Event, seq: int, called: list) -> list:
        """Call each of ``objs`` in order (an algorithm's ``apply``, a callback's ``run_event``), each
        appended to ``called`` as it starts; what each returned."""
        codes = []
        for order, obj in enumerate(objs):
            called.append(obj)
            codes.append(self._call(obj, kind, order, event, seq))
        return codes

    def _call(self, obj: Any, kind: str, order: int, event: Event, seq: int) -> Any:
        """One call, observed and recorded (its row written before an error propagates; a call
        may fire an event, as Composer allows, whose calls are observed inside this one's). With
        the trace off a call is only made: nothing is timed, observed or recorded."""
        if not self.trace.recording:
            return _apply(obj, kind, event, self.state, self.logger)
        self.observer.before(obj, event)
        exit_code = error = None
        t0 = perf_counter()
        try:
            exit_code = _apply(obj, kind, event, self.state, self.logger)
            return exit_code
        except BaseException as err:
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            duration, changed = perf_counter() - t0, self.observer.after(obj)
            self._record_call(obj, kind, order, event, seq, exit_code, duration, changed, error)

    # -- recording ----------------------------------------------------------------------------
    def _record_call(self, obj: Any, kind: str, order: Optional[int], event: Event, seq: int, exit_code: Any = None,
                     duration: Optional[float] = None, changed: Any = None, error: Optional[str] = None) -> None:
        """A call's row (or, ``order`` None, an algorithm asked that did not run); only with the trace recording."""
        state = self.state
        self.trace.add_call(
            seq=seq, event=event, batch=state.timestamp.batch, name=self.trace.label(obj), kind=kind,
            matched=order is not None, order=order, exit_code=exit_code, duration=duration, changed=changed,
            error=error, closure_call=state.closure_call, epoch=state.timestamp.epoch)

    def _record_event(self, event: Event, seq: int, t_start: float, asked: tuple, called: list) -> None:
        """The event's row, after its calls'; at level 'all' first a row for each algorithm asked
        that did not run (it said no, a pass left it out, or a call before it raised)."""
        if not self.trace.recording:
            return
        if self.trace.records_unmatched:
            ran = set(map(id, called))
            for algorithm in asked:
                if id(algorithm) not in ran:
                    self._record_call(algorithm, "algorithm", None, event, seq)
        ts, state = self.state.timestamp, self.state
        self.trace.add_event(
            seq=seq, event=event, epoch=ts.epoch, batch=ts.batch, batch_in_epoch=ts.batch_in_epoch,
            microbatch=state.microbatch, t_start=t_start, t_end=perf_counter(), closure_call=state.closure_call)

    # -- lifecycle ----------------------------------------------------------------------------
    @contextmanager
    def watching(self) -> Iterator["Engine"]:
        """Install, for the duration, what change detection needs (PyTorch's global registration
        hooks) and remove it after. The trainer enters it around fit, eval and predict; events
        run outside it are observed all the same, more slowly."""
        with self.observer.watching():
            yield self

    def close(self) -> None:
        """Shut the engine down, as Composer does: each callback's ``close(state, logger)``, then
        ``post_close()`` of each whose ``close`` did not raise. Every callback is closed even if
        one raises; the first error is raised after. A second call does nothing."""
        atexit.unregister(self._closer)
        self._closer()

    def __del__(self) -> None:
        """An engine collected without :meth:`close` closes its callbacks (Composer's contract)."""
        closer = getattr(self, "_closer", None)
        if closer is not None and not closer.closed and not _EXITING:
            atexit.unregister(closer)
            closer(raises=False)


_OPEN_CALLBACKS: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
"""The callbacks an engine has run ``INIT`` for and not closed yet, by id."""


def _claim_callbacks(callbacks: Sequence[Any], owner: "_Closer") -> None:
    """Refuse a callback still open in another engine (as Composer does), else mark each one open
    in ``owner``'s (an engine may fire INIT again over its own callbacks)."""
    for cb in callbacks:
        if _OPEN_CALLBACKS.get(id(cb)) is cb and id(cb) not in owner.claimed:
            raise RuntimeError(f"Cannot create a new trainer with an open callback or logger from a previous trainer: "
                               f"{type(cb).__name__} was not closed; call the previous trainer's close() (or "
                               f"engine.close()) before passing its callbacks to a new one")
    for cb in callbacks:
        try:
            _OPEN_CALLBACKS[id(cb)] = cb
            owner.claimed.add(id(cb))
        except TypeError:  # (an object without weak references is not tracked)
            pass


class _Closer:
    """Closes an engine's callbacks once: from :meth:`Engine.close`, when the engine is collected,
    or at interpreter exit. It holds the state and logger, not the engine, so the engine can be collected."""

    def __init__(self, state: State, logger: Logger) -> None:
        self.state, self.logger, self.closed = state, logger, False
        self.claimed: set[int] = set()  # ids of the callbacks this engine marked open

    def __call__(self, raises: bool = True) -> None:
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
                _OPEN_CALLBACKS.pop(id(cb), None)
            except Exception as err:
                errors.append(err)
        if errors and raises:
            raise errors[0]


_EXITING = False
"""Set at interpreter exit, after every engine's own exit hook ran: a collection then closes nothing."""


def _exiting() -> None:
    global _EXITING
    _EXITING = True


atexit.register(_exiting)  # (registered first: atexit runs last-in first-out, so this runs after every engine's)


def _apply(obj: Any, kind: str, event: Event, state: State, logger: Logger) -> Any:
    """An algorithm's ``apply`` or a callback's ``run_event``: what it returned."""
    return obj.apply(event, state, logger) if kind == "algorithm" else obj.run_event(event, state, logger)


def _pass_specs(specs: Optional[PassSpec]) -> list[tuple[AlgorithmPass, int]]:
    """``algorithm_passes`` as ``(pass, index)`` pairs: ``f``, ``[f]``, ``(f, index)``, ``[f, index]`` or a
    list of those."""
    if specs is None:
        return []
    if not isinstance(specs, (list, tuple)) or _is_indexed(specs):
        specs = [specs]  # one pass: f, (f, index) or [f, index]
    pairs = []
    for spec in specs:
        if not (callable(spec) or _is_indexed(spec)):
            raise TypeError(f"algorithm_passes: cannot read {spec!r}; give a pass function f (the function, "
                            f"not its name), or (f, index) to insert it at a position, or a list of those")
        pairs.append(tuple(spec) if _is_indexed(spec) else (spec, -1))
    return pairs


def _is_indexed(item: Any) -> bool:
    """Whether ``item`` is ``(f, index)`` or ``[f, index]``."""
    return (isinstance(item, (tuple, list)) and len(item) == 2 and callable(item[0]) and isinstance(item[1], int)
            and not isinstance(item[1], bool))
