"""Warnings the algorithms give, named as in Composer (``composer.algorithms.warnings``)."""

__all__ = ["NoEffectWarning"]


class NoEffectWarning(Warning):
    """An algorithm was applied and changed nothing (a model surgery found no module to replace)."""
