"""The model behind the lab's widgets: which algorithms and passes are on, in what order.

Widgets never change the engine themselves; they call a :class:`Control`. It keeps the full
lists (so a switched-off algorithm or pass can come back in its place), applies each change
to the engine with one assignment at a batch boundary (while a run trains in another thread,
the next one after the click is received, through ``Trainer.between_batches``; at once
otherwise), notes the change in the trace at that batch, and tells its listeners so the
panels can redraw.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

from composer_lab.core.algorithm import Algorithm, hyperparameters
from composer_lab.core.checks import is_int
from composer_lab.core.engine import Engine
from composer_lab.core.passes import pass_name

__all__ = ["Control"]


def _same_kind(old: Any, value: Any) -> bool:
    """Whether ``value`` may replace ``old``: same type, ints allowed for floats, bools apart."""
    if isinstance(old, bool) or isinstance(value, bool):
        return isinstance(old, bool) and isinstance(value, bool)
    if isinstance(old, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(old))


def _engine_of(target: Any) -> Engine:
    engine = target if isinstance(target, Engine) else getattr(target, "engine", None)
    if not isinstance(engine, Engine):
        raise TypeError(f"the lab needs a Trainer or an Engine (anything with an .engine), got "
                        f"{type(target).__name__}; pass the trainer itself, e.g. Lab(trainer)")
    return engine


class Control:
    """Switch algorithms and passes on and off, edit hyperparameters, reorder algorithms and
    passes, add passes.

    ``target`` is a Trainer (anything with ``.engine``) or an :class:`Engine`. Every change
    is written to ``engine.trace.notes`` (kind 'algorithm', 'hparam' or 'pass') with the
    batch it happened at, and each listener added with :meth:`on_change` is called after it.
    """

    def __init__(self, target: Any) -> None:
        self.target = target
        self.engine = _engine_of(target)
        self.state = self.engine.state
        self.algorithms: list[Algorithm] = list(self.state.algorithms)
        self.names = [self.engine.trace.label(a) for a in self.algorithms]
        self._enabled = [True] * len(self.algorithms)
        self._passes: list[Callable] = list(self.engine.passes)
        self._pass_enabled = [True] * len(self._passes)
        self._listeners: list[Callable[[str], None]] = []

    # -- listeners --------------------------------------------------------------------------
    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(kind)`` after every change ('algorithm', 'hparam' or 'pass')."""
        self._listeners.append(listener)

    def _change(self, kind: str, text: str, apply: Callable[[], None]) -> None:
        """``apply()`` the change to the engine where it holds from a batch boundary (the
        trainer's ``between_batches``: the next one while a fit trains in another thread, now
        otherwise), then note it in the trace at that batch and tell the listeners."""
        def change() -> None:
            apply()
            self.engine.trace.note(kind, text, self.state.timestamp)
            for listener in self._listeners:
                listener(kind)
        between_batches = getattr(self.target, "between_batches", None)
        between_batches(change) if between_batches is not None else change()

    def _assign_algorithms(self) -> None:
        self.state.algorithms = self.enabled_algorithms  # one assignment, read once per event

    # -- algorithms -------------------------------------------------------------------------
    def algorithm(self, key: Union[int, str, Algorithm]) -> Algorithm:
        """The algorithm at an index, with a name (as in the trace) or the object itself."""
        return self.algorithms[self._algorithm_index(key)]

    def _algorithm_index(self, key: Union[int, str, Algorithm]) -> int:
        if isinstance(key, Algorithm):
            for i, algo in enumerate(self.algorithms):
                if algo is key:
                    return i
        elif isinstance(key, str) and key in self.names:
            return self.names.index(key)
        elif is_int(key) and -len(self.algorithms) <= key < len(self.algorithms):
            return key % len(self.algorithms)
        raise ValueError(f"no algorithm {key!r} in this lab; give an index, the algorithm or one of "
                         f"the names {self.names}")

    def is_enabled(self, key: Union[int, str, Algorithm]) -> bool:
        return self._enabled[self._algorithm_index(key)]

    @property
    def enabled_algorithms(self) -> list[Algorithm]:
        """The switched-on algorithms, in the list's order."""
        return [a for a, on in zip(self.algorithms, self._enabled) if on]

    def set_enabled(self, key: Union[int, str, Algorithm], enabled: bool) -> None:
        """Switch an algorithm on or off from the next event on."""
        i = self._algorithm_index(key)
        if self._enabled[i] == bool(enabled):
            return
        self._enabled[i] = bool(enabled)
        self._change("algorithm", f"{self.names[i]} {'on' if enabled else 'off'}", self._assign_algorithms)

    def move_algorithm(self, key: Union[int, str, Algorithm], offset: int) -> None:
        """Move an algorithm ``offset`` places in the list (-1: up, earlier; +1: down, later).
        The list is what the passes start from: at an event where no pass decides the order
        of two algorithms, it is the order they run in."""
        i = self._algorithm_index(key)
        j = min(max(i + offset, 0), len(self.algorithms) - 1)
        if i == j:
            return
        for items in (self.algorithms, self.names, self._enabled):
            items.insert(j, items.pop(i))
        self._change("algorithm", f"moved {self.names[j]} to position {j}: {self.names}", self._assign_algorithms)

    def set_hyperparameter(self, key: Union[int, str, Algorithm], name: str, value: Any) -> None:
        """Set a hyperparameter; the value is checked by building a fresh instance of the
        algorithm with it, so the algorithm's own constructor checks apply."""
        i = self._algorithm_index(key)
        algo = self.algorithms[i]
        current = hyperparameters(algo)
        if name not in current:
            raise ValueError(f"{self.names[i]} has no editable hyperparameter {name!r}; it has "
                             f"{sorted(current)}")
        old = current[name]
        if not _same_kind(old, value):
            raise TypeError(f"{self.names[i]}.{name} is a {type(old).__name__}, got {type(value).__name__} "
                            f"{value!r}; give a {type(old).__name__} such as {old!r}")
        value = float(value) if isinstance(old, float) else value
        type(algo)(**{**current, name: value})  # raises the constructor's ValueError for bad values
        if value == old:
            return
        self._change("hparam", f"{self.names[i]}.{name} {old!r} -> {value!r}", lambda: setattr(algo, name, value))

    # -- passes -----------------------------------------------------------------------------
    @property
    def passes(self) -> list[tuple[Callable, bool]]:
        """Every pass, also the switched-off ones, in order, with whether it is on."""
        return list(zip(self._passes, self._pass_enabled))

    @property
    def pass_names(self) -> list[str]:
        return [pass_name(p) for p in self._passes]

    def _pass_index(self, key: Union[int, str, Callable]) -> int:
        if callable(key):
            for i, p in enumerate(self._passes):
                if p is key:
                    return i
        elif isinstance(key, str) and self.pass_names.count(key) == 1:
            return self.pass_names.index(key)
        elif is_int(key) and 0 <= key < len(self._passes):
            return key
        raise ValueError(f"no single pass {key!r}; give its index (0-{len(self._passes) - 1}), the "
                         f"function, or one of the names {self.pass_names}")

    def _apply_passes(self, text: str) -> None:
        self._change("pass", text, self._assign_passes)

    def _assign_passes(self) -> None:
        self.engine.passes = [p for p, on in zip(self._passes, self._pass_enabled) if on]  # one assignment

    def move_pass(self, key: Union[int, str, Callable], offset: int) -> None:
        """Move a pass ``offset`` places (-1: up, earlier; +1: down, later), within the list."""
        i = self._pass_index(key)
        j = min(max(i + offset, 0), len(self._passes) - 1)
        if i == j:
            return
        for items in (self._passes, self._pass_enabled):
            items.insert(j, items.pop(i))
        self._apply_passes(f"moved {pass_name(self._passes[j])} to position {j}: {self.pass_names}")

    def set_pass_order(self, names: Sequence[str]) -> None:
        """Put the passes in the order of ``names`` (each pass's name once)."""
        if sorted(names) != sorted(self.pass_names) or len(set(names)) != len(names):
            raise ValueError(f"set_pass_order needs each of the passes {self.pass_names} exactly once, "
                             f"got {list(names)}")
        order = [self.pass_names.index(n) for n in names]
        self._passes = [self._passes[i] for i in order]
        self._pass_enabled = [self._pass_enabled[i] for i in order]
        self._apply_passes(f"order {self.pass_names}")

    def set_pass_enabled(self, key: Union[int, str, Callable], enabled: bool) -> None:
        """Switch a pass on or off from the next event on."""
        i = self._pass_index(key)
        if self._pass_enabled[i] == bool(enabled):
            return
        self._pass_enabled[i] = bool(enabled)
        self._apply_passes(f"{pass_name(self._passes[i])} {'on' if enabled else 'off'}")

    def add_pass(self, algorithm_pass: Callable, index: int = -1) -> None:
        """Add a custom pass ``(algorithms, event) -> algorithms`` at ``index`` (-1: last)."""
        if not callable(algorithm_pass):
            raise TypeError(f"a pass is a function (algorithms, event) -> algorithms, got "
                            f"{type(algorithm_pass).__name__} {algorithm_pass!r}")
        if any(p is algorithm_pass for p in self._passes):
            raise ValueError(f"the pass {pass_name(algorithm_pass)} is already in the list; move it instead")
        index = len(self._passes) if index == -1 else index
        self._passes.insert(index, algorithm_pass)
        self._pass_enabled.insert(index, True)
        self._apply_passes(f"added {pass_name(algorithm_pass)} at position {index}")
