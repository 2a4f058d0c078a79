"""composer_lab: a Jupyter lab for composing training speed-up methods."""

from composer_lab.core import *  # noqa: F401,F403
from composer_lab.core import __all__ as _core_all
from composer_lab.trainer import Run, Trainer

__version__ = "0.1.0"
__all__ = [*_core_all, "Trainer", "Run"]
