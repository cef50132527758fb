"""TRL reward functions named by dotted path (``grae train``'s ``reward_funcs``).

A TRL reward function is ``f(prompts, completions, **columns) -> list[float | None]`` (the dataset's
columns, e.g. ``answer``, arrive as keyword lists). ``"pkg.module:function"`` or ``"pkg.module.function"``
names one; the module is imported from ``sys.path`` (the working directory included when run as
``grae train``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def load_reward_function(spec: str) -> Callable[..., Any]:
    """The callable named by ``spec`` (``module:function`` or ``module.function``); ``ValueError`` with
    one line naming what failed (module not importable, attribute missing, not callable)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward function: expected 'module:function' or 'module.function', got {spec!r}")
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"reward function {spec!r}: expected 'module:function' or 'module.function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"reward function {spec!r}: cannot import {module_name!r} ({err})") from None
    try:
        target: Any = module
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise ValueError(f"reward function {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise ValueError(f"reward function {spec!r}: {type(target).__name__} is not callable")
    return target
