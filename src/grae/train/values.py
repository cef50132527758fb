"""A config's values read and checked: a raw mapping into the dataclasses (:func:`from_dict`, :func:`coerce`) and
the ``trl`` section against ``trl.GRPOConfig``'s fields (:func:`check_trl`, :func:`trl_value`, :data:`TRL_RANGES`).

Every number is checked: finite, an integer that fits in 64 bits, of the annotated type (ints are accepted for
floats); an unknown key names the closest valid one.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any

from grae.train.config_files import MANAGED_TRL_KEYS
from grae.train.errors import ConfigError
from grae.train.trl_recipe import DATASET_KEYS, LORA_KEYS, MODEL_INIT_KEYS, REFUSED, RENAMED
from grae.train.trl_values import trl_annotations, trl_fields

#: the ``trl grpo`` script's keys that are not GRPOConfig fields (:mod:`grae.train.trl_recipe`)
_RECIPE_ONLY = {*DATASET_KEYS, *LORA_KEYS, *MODEL_INIT_KEYS, *REFUSED, *RENAMED, "use_peft"}


def from_dict(cls: type, raw: dict, prefix: str) -> Any:
    """The dataclass ``cls`` from the mapping ``raw``, each value checked by :func:`coerce`; an unknown key names the
    closest valid one (at the top level also a flat GRPOConfig field or a ``trl grpo`` script key); ``prefix`` is the
    dotted path of ``raw`` in the config, for the error."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            pool = {c: c for c in fields}
            if not prefix:  # at the top level also a flat GRPOConfig field or a trl grpo script key, closest first
                pool = {**{c: f"trl.{c}" for c in trl_fields()}, **{c: c for c in _RECIPE_ONLY}, **pool}
            close = [pool[c] for c in difflib.get_close_matches(key, pool, n=1)]
            hint = f" Did you mean {close[0]!r}?" if close else ""
            also = "; any trl.GRPOConfig field too (grae train --help lists every key)" if not prefix else ""
            raise ConfigError(f"{prefix}{key}: unknown key.{hint} Valid keys: {', '.join(fields)}{also}")
        kwargs[key] = coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


INT_LIMIT = 2**63


def coerce(hint: Any, value: Any, path: str) -> Any:
    """Check ``value`` against the annotation ``hint`` (ints are accepted for floats)."""
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value or {}, f"{path}.")
    unions = (typing.Union, getattr(types, "UnionType", None))
    options = typing.get_args(hint) if typing.get_origin(hint) in unions else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{path}: must not be null")
    for option in options:
        base = typing.get_origin(option) or option
        if base is float and isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string, TRL's parser as a float
            try:
                value = float(value)
            except ValueError:
                continue
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value) if isinstance(value, float) or abs(value) < 2**1000 else math.inf
            if not math.isfinite(number):
                raise ConfigError(f"{path}: must be a finite number, got {value!r}")
            return number
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            if not -INT_LIMIT <= value < INT_LIMIT:
                raise ConfigError(f"{path}: {value} does not fit in a 64-bit integer; use a smaller value")
            return value
        if base in (str, dict, list) and isinstance(value, base):
            return value
    names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ConfigError(f"{path}: expected {names}, got {value!r} ({type(value).__name__})")


#: ranges of GRPOConfig's numeric fields that TRL itself does not check (or checks only after the model loads)
TRL_RANGES: dict[str, tuple[Any, str]] = {
    **{name: (lambda v: v > 0, "> 0") for name in (
        "learning_rate", "temperature", "repetition_penalty", "adam_epsilon", "logging_steps")},
    **{name: (lambda v: v >= 0, ">= 0") for name in (
        "beta", "epsilon", "epsilon_high", "delta", "max_grad_norm", "weight_decay", "warmup_steps", "top_k")},
    **{name: (lambda v: v >= 1, ">= 1") for name in (
        "num_generations", "num_generations_eval", "per_device_train_batch_size", "gradient_accumulation_steps",
        "num_iterations", "steps_per_generation", "generation_batch_size", "max_completion_length",
        "ref_model_sync_steps", "save_total_limit")},
    **{name: (lambda v: 0 < v <= 1, "in (0, 1]") for name in ("top_p", "top_entropy_quantile", "vllm_gpu_memory_utilization")},
    **{name: (lambda v: 0 <= v <= 1, "in [0, 1]") for name in ("min_p", "warmup_ratio", "ref_model_mixup_alpha")},
    **{name: (lambda v: 0 <= v < 1, "in [0, 1)") for name in ("adam_beta1", "adam_beta2")},
}

_NUMERIC = {int, float, bool, type(None)}


def check_trl(trl: dict) -> dict:
    """The ``trl`` section with every key a GRPOConfig field (not one grae sets itself) and numeric
    values checked and converted (:func:`trl_value`)."""
    fields = trl_fields()
    checked = {}
    for key, value in trl.items():
        if key in MANAGED_TRL_KEYS:
            raise ConfigError(f"trl.{key}: set it at the top level ({MANAGED_TRL_KEYS[key]}: …), not under trl")
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            raise ConfigError(f"trl.{key}: not a trl.GRPOConfig field." + (f" Did you mean {close[0]!r}?" if close else ""))
        checked[key] = trl_value(fields[key], value)
    return checked


def trl_value(spec: dataclasses.Field, value: Any) -> Any:
    """Check a ``trl.<key>`` value against GRPOConfig's annotation where it is numeric or boolean
    (``int``, ``float | None``, ``list[float] | None``, …): type, finiteness, 64-bit integers."""
    path = f"trl.{spec.name}"
    declared = trl_annotations().get(spec.name, spec.type)
    unions = (typing.Union, getattr(types, "UnionType", None))
    options = typing.get_args(declared) if typing.get_origin(declared) in unions else (declared,)
    if all(o in _NUMERIC for o in options):
        return coerce(declared, value, path)
    lists = [o for o in options if typing.get_origin(o) is list and typing.get_args(o)[0] in _NUMERIC]
    if lists and isinstance(value, list):
        return [coerce(typing.get_args(lists[0])[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value

