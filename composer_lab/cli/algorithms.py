"""The algorithms a command line names: ``--algorithms cutout,label_smoothing`` read into instances."""

from __future__ import annotations

import difflib

__all__ = ["parse_algorithms"]


def _key(name: str) -> str:
    """How a written algorithm name is looked up: 'LabelSmoothing', 'label-smoothing' and
    'label_smoothing' are one name."""
    return name.lower().replace("_", "").replace("-", "")


def parse_algorithms(text: str, fixed_input_size: bool = False) -> list:
    """Instances of the algorithms named in ``text`` ('selective_backprop,label_smoothing'); the
    class names as the README writes them ('CutOut,LabelSmoothing') are read too, and a name
    that is none of them is refused with the closest one (did you mean ...).
    ``fixed_input_size``: the model takes one input size only (the MLP), so Selective
    Backprop scores full-size inputs (scale_factor=1) instead of downsampled ones."""
    from composer_lab.algorithms import ALGORITHMS

    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    by_key = {_key(name): name for name in ALGORITHMS}
    unknown = [n for n in names if _key(n) not in by_key]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {', '.join(_with_guess(n, by_key) for n in unknown)}; choose from "
                         f"{', '.join(sorted(ALGORITHMS))} (comma-separated), or 'none'")
    options = {"selective_backprop": {"scale_factor": 1.0}} if fixed_input_size else {}
    return [ALGORITHMS[name](**options.get(name, {})) for name in (by_key[_key(n)] for n in names)]


def _with_guess(name: str, by_key: dict[str, str]) -> str:
    """An unknown name, with the closest known one if any is close: 'label_smothing (did you mean
    label_smoothing?)'."""
    guess = difflib.get_close_matches(_key(name), by_key, 1)
    return f"{name} (did you mean {by_key[guess[0]]}?)" if guess else name
