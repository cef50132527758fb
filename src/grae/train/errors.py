"""The configuration error every ``grae.train`` module raises (here so that modules below ``grae.train.config``
can raise it without importing the config)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem, with the key path and the fix in the message."""
