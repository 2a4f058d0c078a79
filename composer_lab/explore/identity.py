"""Experiment identity: what makes the runs in a sweep folder results of one experiment.

A folder's results hold only for the code and the values that produced them. The identity
names them, readable, in the folder's ``sweep.json``:

- each algorithm: its class and the public attributes of the instance (its hyperparameters;
  private ones hold a run's state);
- ``code``: the source of every function and class method defined outside installed packages
  (in the notebook, the script, the user's own modules) that the factory or an algorithm class
  reaches: the factory, the helpers it calls, what they call in turn;
- ``values``: the value of every global, closure variable and default argument that code reads
  (``EPOCHS``), and the fields of a factory object (the CLI's ``SweepExperiment``);
- the metric and composer_lab's version (which stands for the installed packages' code), and a
  digest of the source file of each installed module that defines an algorithm class used.

:func:`differences` says what changed in words: ``EPOCHS: '3ep' -> '12ep'``,
``GaussianNoise.apply: source changed``, and :func:`source_diffs` shows the changed lines.
Values are compared by their ``repr`` (tensors, arrays,
a model's weights and a DataFrame's rows by their content): an object whose repr does not show
its content (a dataset object built outside the factory, a file the factory reads) is not told
apart; build it inside the factory, where the code that builds it is part of the identity.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import json
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from composer_lab.core.algorithm import Algorithm

__all__ = ["experiment_identity", "differences", "source_diffs", "is_user_code"]

_LONG = 200
"""Values whose repr is longer are kept as their type, length and digest."""
_SITE = ("site-packages", "dist-packages")
_NO_SOURCE = "<no source>"


def experiment_identity(make_trainer: Callable, algorithms: Sequence[Algorithm], names: Sequence[str],
                        metric: str) -> dict[str, Any]:
    """The identity of a sweep of ``algorithms`` (named ``names``) trained by ``make_trainer``
    and ranked by ``metric``, as JSON data (see the module's docstring)."""
    import composer_lab

    walk = _Walk()
    factory = walk.factory(make_trainer)
    described = []
    for name, algorithm in zip(names, algorithms):
        walk.cls(type(algorithm))
        walk.modules_of(type(algorithm))
        for attribute, value in vars(algorithm).items():
            if not attribute.startswith("_"):  # (private attributes hold a run's state, not a setting)
                walk.value(f"{name}.{attribute}", value)
        described.append({"name": name, "class": _qualified(type(algorithm))})
    identity = {"composer_lab": composer_lab.__version__, "metric": metric, "factory": factory,
                "algorithms": described, "code": walk.code, "values": walk.values}
    return json.loads(json.dumps(identity))


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs from identity ``old`` to ``new``, one readable line per difference."""
    lines = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in ("composer_lab", "metric", "factory")
             if old.get(key) != new.get(key)]
    if old.get("algorithms") != new.get("algorithms"):
        lines.append(f"algorithms: {_listed(old.get('algorithms'))} -> {_listed(new.get('algorithms'))}")
    old_code, new_code = old.get("code", {}), new.get("code", {})
    for key in sorted(set(old_code) | set(new_code)):
        if key not in new_code:
            lines.append(f"{key}: no longer reached")
        elif key not in old_code:
            lines.append(f"{key}: newly reached")
        elif _code_changed(old_code[key], new_code[key]):
            shown = " (the lines below)" if _diff(key, old_code[key], new_code[key]) else ""
            lines.append(f"{key}: source changed{shown}")
    old_values, new_values = old.get("values", {}), new.get("values", {})
    for key in sorted(set(old_values) | set(new_values)):
        if old_values.get(key) != new_values.get(key):
            lines.append(f"{key}: {old_values.get(key, '(not read)')} -> {new_values.get(key, '(not read)')}")
    return lines


def source_diffs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The changed lines of each function whose source changed from identity ``old`` to ``new``,
    as a unified diff headed by its name (``make_trainer: batch_size=50 -> 64`` shows as a ``-``
    and a ``+`` line)."""
    old_code, new_code = old.get("code", {}), new.get("code", {})
    diffs = [_diff(key, old_code[key], new_code[key]) for key in sorted(set(old_code) & set(new_code))
             if _code_changed(old_code[key], new_code[key])]
    return [diff for diff in diffs if diff]


def _diff(key: str, before: Any, after: Any) -> str:
    """A unified diff of two sources of ``key``; '' where either has none (a module's digest, exec'd code)."""
    sources = [code.get("source", _NO_SOURCE) if isinstance(code, dict) else _NO_SOURCE for code in (before, after)]
    if _NO_SOURCE in sources:
        return ""
    return "\n".join(difflib.unified_diff(sources[0].splitlines(), sources[1].splitlines(),
                                          f"{key} (the folder's runs)", f"{key} (now)", n=1, lineterm=""))


def is_user_code(obj: Any) -> bool:
    """Whether ``obj`` (a function, class or module) is defined outside installed packages: in
    ``__main__`` (a notebook, a script) or a module that is neither the standard library, nor
    composer_lab, nor under site-packages."""
    module_name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    if not isinstance(module_name, str) or module_name == "__main__":
        return module_name == "__main__"
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", "composer_lab"):
        return False
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    return file is not None and not any(part in _SITE for part in Path(file).parts)


class _Walk:
    """Collects the code and the values a factory and algorithm classes reach."""

    def __init__(self) -> None:
        self.code: dict[str, Any] = {}
        self.values: dict[str, str] = {}
        self._seen: set[int] = set()

    def factory(self, make_trainer: Callable) -> str:
        """Walk the factory; its description: a function's name, or what a partial or object wraps."""
        if isinstance(make_trainer, functools.partial):
            self.value("factory arguments", (make_trainer.args, make_trainer.keywords))
            return f"functools.partial({self.factory(make_trainer.func)})"
        if isinstance(make_trainer, types.MethodType):
            self.value(f"{_key(make_trainer.__func__)}.__self__", make_trainer.__self__)
            self.function(make_trainer.__func__)
            return _key(make_trainer.__func__)
        if isinstance(make_trainer, types.FunctionType):
            self.function(make_trainer)
            return _key(make_trainer)
        cls = type(make_trainer)
        self.cls(cls)
        for field, value in _fields(make_trainer).items():
            self.value(f"{cls.__qualname__}.{field}", value)
        return _qualified(cls)

    def function(self, fn: types.FunctionType) -> None:
        """Record ``fn``'s source and walk what it reads, if it is user code not walked yet."""
        if id(fn) in self._seen or not is_user_code(fn):
            return
        self._seen.add(id(fn))
        key = _key(fn)
        self.code[key] = {"source": _source(fn), "compiled": _digest(_code_text(fn.__code__))}
        names = _names(fn.__code__)
        prefix = "" if fn.__module__ == "__main__" else f"{fn.__module__}."
        for name in sorted(names & set(fn.__globals__)):
            self.value(f"{prefix}{name}", fn.__globals__[name], names)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                self.value(f"{key} closure {name}", cell.cell_contents, names)
            except ValueError:  # an empty cell: a variable assigned after the function was made
                continue
        if fn.__defaults__ or fn.__kwdefaults__:
            self.value(f"{key} defaults", (fn.__defaults__, fn.__kwdefaults__))

    def cls(self, cls: type) -> None:
        """Walk a user class and its user bases: each method's source, each class attribute's value."""
        for klass in cls.__mro__:
            if id(klass) in self._seen or not is_user_code(klass):
                continue
            self._seen.add(id(klass))
            for name, attribute in vars(klass).items():
                function = _underlying(attribute)
                if function is not None:
                    self.function(function)
                elif not (name.startswith("__") and name.endswith("__")):
                    self.value(f"{_key(klass)}.{name}", attribute)

    def modules_of(self, cls: type) -> None:
        """A digest of the source file of each installed module defining ``cls`` or a base below
        :class:`Algorithm` (composer_lab's algorithms: an edit in a checkout keeps the version)."""
        for klass in cls.__mro__:
            if klass is Algorithm or not issubclass(klass, Algorithm) or is_user_code(klass):
                continue
            file = getattr(sys.modules.get(klass.__module__), "__file__", None)
            if file is not None and Path(file).is_file():
                self.code[f"{klass.__module__} (module source)"] = _digest(Path(file).read_bytes())

    def value(self, key: str, value: Any, names: frozenset = frozenset()) -> None:
        """Record ``value`` under ``key``; walk it when it is user code (a function, a class, a
        module whose attributes among ``names`` the reading code may use)."""
        if isinstance(value, types.ModuleType):
            self._module(key, value, names)
        elif isinstance(value, (types.FunctionType, type)):
            self.values[key] = f"{'class' if isinstance(value, type) else 'function'} {_qualified(value)}"
            self.function(value) if isinstance(value, types.FunctionType) else self.cls(value)
        elif isinstance(value, functools.partial):
            self.values[key] = f"functools.partial({_qualified(value.func)})"
            self.value(f"{key} arguments", (value.args, value.keywords))
            self.value(f"{key} function", value.func)
        elif is_user_code(type(value)) and not _has_own_repr(type(value)):
            self._object(key, value)
        else:
            self.values[key] = _text(value)

    def _module(self, key: str, module: types.ModuleType, names: frozenset) -> None:
        """A module: named; a user module's attributes among ``names`` (those the code reads) walked."""
        self.values[key] = f"module {module.__name__}"
        if is_user_code(module):
            for name in sorted(names & set(vars(module))):
                if not name.startswith("__"):
                    self.value(f"{module.__name__}.{name}", getattr(module, name))

    def _object(self, key: str, value: Any) -> None:
        """An instance of a user class without a repr of its own: its class and fields, once."""
        if id(value) in self._seen:  # an object reached again (a cycle): its fields are recorded once
            self.values[key] = f"{_qualified(type(value))} (recorded above)"
            return
        self._seen.add(id(value))
        self.cls(type(value))
        for field, field_value in _fields(value).items():
            self.value(f"{key}.{field}", field_value)


def _names(code: types.CodeType) -> frozenset:
    """The names ``code`` and the code nested in it (lambdas, comprehensions, inner functions) load."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return frozenset(names)


def _underlying(attribute: Any) -> Optional[types.FunctionType]:
    """The function behind a method, static or class method, or property; None for other attributes."""
    if isinstance(attribute, (staticmethod, classmethod)):
        attribute = attribute.__func__
    if isinstance(attribute, property):
        attribute = attribute.fget
    return attribute if isinstance(attribute, types.FunctionType) else None


def _code_changed(old: Any, new: Any) -> bool:
    """Whether code changed: its source and its compiled form both differ. (The source alone
    would call an edit of a comment a change, and is read from the file, which may have changed
    since the module was imported; the compiled form alone differs between Python versions.)
    Code without a source is told by its compiled form."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old != new  # a module's digest
    sources_differ = old.get("source") != new.get("source") or old.get("source") == _NO_SOURCE
    return sources_differ and old.get("compiled") != new.get("compiled")


def _source(fn: types.FunctionType) -> str:
    """``fn``'s source (a notebook cell's too: IPython keeps cells where ``inspect`` finds them),
    or a placeholder when it has none (code made by ``exec``)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return _NO_SOURCE


def _code_text(code: types.CodeType) -> str:
    """Compiled code as text: instructions, constants (nested code too) and names, not line numbers."""
    consts = [_code_text(c) if isinstance(c, types.CodeType) else
              repr(sorted(map(repr, c))) if isinstance(c, frozenset) else repr(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}"


def _text(value: Any) -> str:
    """A value as stored: its repr, addresses left out; tensors and arrays by their bytes, and
    a long repr by its type, length and digest."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu()
        data = data.float() if data.dtype == torch.bfloat16 else data  # (numpy has no bfloat16)
        return f"tensor {tuple(data.shape)} {value.dtype} {_digest(data.numpy().tobytes())}"
    if isinstance(value, np.ndarray):
        return f"array {value.shape} {value.dtype} {_digest(value.tobytes())}"
    if isinstance(value, torch.nn.Module):  # (its repr shows the layers, not the weights)
        weights = b"".join(_text(t).encode() for t in value.state_dict().values())
        return f"module {type(value).__qualname__} {_digest(weights)}"
    if isinstance(value, (pd.DataFrame, pd.Series)):  # (their repr shows the first and last rows only)
        value = (type(value).__name__, value.shape, value.to_dict())
    try:
        text = re.sub(r" at 0x[0-9a-fA-F]+", "", _repr(value))
    except Exception as err:  # a value that cannot be read so must not stop the sweep
        return f"{type(value).__name__} (unreadable: {type(err).__name__})"
    return text if len(text) <= _LONG else f"{type(value).__name__} of {len(text)} characters, {_digest(text)}"


def _repr(value: Any) -> str:
    """``repr(value)``, but a set's items in a fixed order (a set of strings or enum members is
    ordered by string hashes, which differ from one process to the next), inside lists, tuples
    and dicts too; tensors, arrays and models inside them as :func:`_text` gives them."""
    if isinstance(value, (set, frozenset)):
        items = "{" + ", ".join(sorted(map(_repr, value))) + "}" if value else ""
        return (items or "set()") if type(value) is set else f"{type(value).__name__}({items})"
    if type(value) in (list, tuple):
        items = [_repr(v) for v in value]
        return f"[{', '.join(items)}]" if type(value) is list else f"({items[0]},)" if len(items) == 1 else \
            f"({', '.join(items)})"
    if type(value) is dict:
        return "{" + ", ".join(f"{_repr(k)}: {_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (torch.Tensor, np.ndarray, torch.nn.Module)):
        return _text(value)
    return repr(value)


def _digest(data: Any) -> str:
    return "sha256 " + hashlib.sha256(data if isinstance(data, bytes) else str(data).encode()).hexdigest()[:16]


def _fields(obj: Any) -> dict[str, Any]:
    """An object's attributes (a dataclass's fields, a slotted object's slots)."""
    try:
        return dict(vars(obj))
    except TypeError:
        return {name: getattr(obj, name) for name in getattr(type(obj), "__slots__", ()) if hasattr(obj, name)}


def _has_own_repr(cls: type) -> bool:
    """Whether ``cls`` shows its content in its repr (a dataclass, a class with its own __repr__)."""
    return cls.__repr__ is not object.__repr__


def _qualified(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _key(obj: Any) -> str:
    """How code is named in the identity: its qualified name, without the module in ``__main__``."""
    return obj.__qualname__ if obj.__module__ == "__main__" else _qualified(obj)


def _listed(algorithms: Any) -> str:
    return "[" + ", ".join(f"{a.get('name')} ({a.get('class')})" for a in algorithms or []) + "]"
