"""The configuration error every ``grae.train`` module raises (here so that modules below ``grae.train.config``
can raise it without importing the config)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem, with the key path and the fix in the message."""


class BaseWithoutSignal(RuntimeError):
    """The base model cannot learn here (:func:`grae.engines.learning_signal.base_diagnosis`): ``grae train`` stops
    before step 1 unless ``continue_without_signal``; the message is the diagnosis."""
