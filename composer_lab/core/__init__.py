"""The training-loop model: events, state, algorithms, callbacks, passes, engine and trace.

This layer imports only torch and pandas; everything else in composer_lab builds on it.
"""

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.callback import Callback
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.passes import (COMPOSER_PASSES, DEFAULT_PASSES, set_filo_order, sort_fused_layernorm_last,
                                      sort_selective_backprop_first, sort_to_back, sort_to_front,
                                      warn_if_multiple_loss_interpolation, warn_if_multiple_mixers)
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeInputError, Timestamp, TimeUnit, ensure_time
from composer_lab.core.trace import TRACE_LEVELS, Trace
from composer_lab.core.changes import UndeclaredWrite

__all__ = [
    "Algorithm", "Callback", "Engine", "Event", "Logger", "State", "Time", "TimeInputError", "Timestamp", "TimeUnit",
    "Trace", "TRACE_LEVELS", "ensure_time", "DEFAULT_PASSES", "COMPOSER_PASSES", "set_filo_order",
    "sort_fused_layernorm_last", "sort_selective_backprop_first", "sort_to_back", "sort_to_front",
    "warn_if_multiple_loss_interpolation", "warn_if_multiple_mixers", "UndeclaredWrite",
]
