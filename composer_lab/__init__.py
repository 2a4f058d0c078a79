"""composer_lab: a Jupyter lab for composing training speed-up methods."""

from composer_lab.core import *  # noqa: F401,F403
from composer_lab.core import __all__ as _core_all

__version__ = "0.1.0"
__all__ = list(_core_all)
