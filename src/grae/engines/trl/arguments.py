"""GraeTrainer's own arguments, checked when it is built: each refusal names the argument, what it got and what
it takes, before TRL builds anything. ``grae train`` checks the same keys with these functions
(:func:`grae.train.config.validate`), so a library user and a recipe are refused alike.

Without these, a wrong value surfaced far from its cause: ``estimator_params=[1]`` as "'list' object is not a
mapping", ``reward_timeout=inf`` as an ``OverflowError`` from ``threading`` at step 1, ``dual_clip=nan`` as a
divergence blamed on the learning rate, ``reward_funcs=[42]`` as an ``AttributeError``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any


def _number(name: str, value: Any, rule: str) -> float:
    """``value`` as a finite float, or the error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number {rule}, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}: must be a finite number {rule}, got {value!r}")
    return number


def check_dual_clip(value: Any) -> float | None:
    """``dual_clip``: None, or the dual-clip constant c > 1 (verl's ``clip_ratio_c``)."""
    if value is None:
        return None
    number = _number("dual_clip", value, "> 1 (verl's clip_ratio_c, default 3.0), or None")
    if number <= 1:
        raise ValueError(f"dual_clip: must be > 1 (verl default 3.0), got {value!r}")
    return number


def check_reward_timeout(value: Any) -> float | None:
    """``reward_timeout``: None (no limit) or finite seconds per sample > 0."""
    if value is None:
        return None
    number = _number("reward_timeout", value, "of seconds per sample > 0, or None for no limit")
    if number <= 0:
        raise ValueError(f"reward_timeout: must be > 0 seconds per sample (or None: no limit), got {value!r}")
    return number


def check_reward_fallback(value: Any) -> float | None:
    """``reward_fallback``: None or NaN (the sample's reward is missing) or a finite reward within ±REWARD_LIMIT."""
    from grae.advantage.base import REWARD_LIMIT

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    number = _number("reward_fallback", value, f"within ±{REWARD_LIMIT:g} (the reward of a failed sample), or None "
                     "(missing)")
    if abs(number) > REWARD_LIMIT:
        raise ValueError(f"reward_fallback: {value!r} is beyond ±{REWARD_LIMIT:g}, where float32 training overflows")
    return number


def check_trainer_arguments(*, estimator_params: Any, dual_clip: Any, contain_reward_faults: Any,
                            reward_fallback: Any, reward_timeout: Any, reward_funcs: Any) -> None:
    """Refuse GraeTrainer's arguments that would fail (or silently mislead) only once training runs."""
    if estimator_params is not None and not isinstance(estimator_params, Mapping):
        raise TypeError(f"estimator_params: expected a mapping of the estimator's parameters (e.g. {{'alpha': 0.5}}) "
                        f"or None, got {estimator_params!r} ({type(estimator_params).__name__})")
    bad_keys = [key for key in (estimator_params or {}) if not isinstance(key, str)]
    if bad_keys:
        raise TypeError(f"estimator_params: keys are parameter names (strings), got {bad_keys[0]!r}")
    if not isinstance(contain_reward_faults, bool):
        raise TypeError(f"contain_reward_faults: expected True or False, got {contain_reward_faults!r} "
                        f"({type(contain_reward_faults).__name__})")
    check_dual_clip(dual_clip)
    check_reward_fallback(reward_fallback)
    check_reward_timeout(reward_timeout)
    check_reward_funcs(reward_funcs)


def check_reward_funcs(reward_funcs: Any) -> None:
    """Each reward function is a callable, a reward model id (str) or a model (``torch.nn.Module``), as TRL takes."""
    import torch

    funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if reward_funcs is None or not funcs:
        raise ValueError("reward_funcs: none given; pass a reward function (completions, **kwargs) -> list of floats, "
                         "a reward model id, or a list of them")
    for i, func in enumerate(funcs):
        if not (isinstance(func, (str, torch.nn.Module)) or callable(func)):
            where = f"reward_funcs[{i}]" if isinstance(reward_funcs, (list, tuple)) else "reward_funcs"
            raise TypeError(f"{where}: expected a reward function (completions, **kwargs) -> list of floats, a reward "
                            f"model id (str) or a model, got {func!r} ({type(func).__name__})")
