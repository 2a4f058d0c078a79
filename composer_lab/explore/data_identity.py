"""The data a sweep's runs read, as part of its identity: a sweep folder's results hold for the data
they were trained on, and data files rewritten on disk leave the factory's code and values as they
were. Before a sweep trains (or reuses) runs, it builds one trainer with its factory and takes a
fingerprint of each data set that trainer reads: its type, its length and a digest of its first and
last examples. A data set that cannot be read so (an iterable stream, a factory that cannot be
built here) is said to be left out of the identity, in a warning, at run time.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
from typing import Any, Callable, Sequence

import numpy as np
import torch

from composer_lab.core.algorithm import Algorithm

__all__ = ["data_fingerprint"]

def data_fingerprint(make_trainer: Callable, algorithms: Sequence[Algorithm], seed: int) -> dict[str, str]:
    """``{'train': 'CIFAR10 of 50000, sha256 ...', 'eval': ...}`` for the data sets the trainer of
    ``make_trainer(copies of algorithms, seed)`` reads; a value that starts with 'not part of the
    identity' says why one could not be read. The process's random generators are left as they were."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        trainer = make_trainer(copy.deepcopy(list(algorithms)), seed)
        _seed(0)  # (a data set that draws random transforms reads the same examples each time)
        loaders = {"train": getattr(getattr(trainer, "state", None), "dataloader", None),
                   "eval": getattr(trainer, "eval_dataloader", None)}
        found = {name: _fingerprint(loader) for name, loader in loaders.items() if loader is not None}
    except Exception as err:  # (a trial reports a factory that fails, with its own message)
        return {"data": f"not part of the identity: the factory could not be built here ({type(err).__name__})"}
    finally:
        random.setstate(states[0]), np.random.set_state(states[1]), torch.set_rng_state(states[2])
    close = getattr(trainer, "close", None)
    if callable(close):
        close()
    return found


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _fingerprint(loader: Any) -> str:
    """A data loader's data set as its type, length and a digest of its first and last examples."""
    dataset = getattr(loader, "dataset", loader)
    try:
        n = len(dataset)
        ends = [dataset[0], dataset[n - 1]] if n else []
    except Exception as err:
        return f"not part of the identity: {type(dataset).__name__} cannot be read by index ({type(err).__name__})"
    digest = hashlib.sha256()
    for example in ends:
        _feed(digest, example)
    return f"{type(dataset).__name__} of {n}, sha256 {digest.hexdigest()[:16]}"


def _feed(digest: Any, value: Any) -> None:
    """Add ``value`` (tensors, arrays, numbers, strings, nested in tuples, lists and dicts) to ``digest``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        digest.update((value.float() if value.dtype == torch.bfloat16 else value).numpy().tobytes())
    elif isinstance(value, np.ndarray):
        digest.update(value.tobytes())
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(digest, item)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    else:
        digest.update(re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value)).encode())
