"""The configuration error every ``grae.train`` module raises (here so that modules below ``grae.train.config``
can raise it without importing the config)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem, with the key path and the fix in the message."""


class BaseWithoutSignal(RuntimeError):
    """The base model cannot learn here (:func:`grae.engines.learning_signal.base_diagnosis`): ``grae train`` stops
    before step 1 unless ``continue_without_signal``; the message is the diagnosis."""


class TrainingWithoutSignal(RuntimeError):
    """``no_signal_steps`` logged steps in a row had no learning signal: ``grae train`` stopped after the last of
    them with a checkpoint of it (unless ``continue_without_signal``); the message is the diagnosis."""

    def __init__(self, diagnosis: str, step: int, checkpoint: str | None):
        super().__init__(diagnosis)
        #: the step training stopped after, and the checkpoint saved there (``--resume`` continues from it)
        self.step, self.checkpoint = step, checkpoint
