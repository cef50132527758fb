"""``grae train`` configuration: a YAML file validated into dataclasses before any model is loaded.

Every key is checked: unknown keys (with the closest valid one), wrong types, unknown estimator
names and parameters, and TRL options (validated by building TRL's own ``GRPOConfig``, which also
rejects impossible combinations such as a generation batch not divisible by ``num_generations``).
Command-line overrides use dotted keys: ``--max-steps 50``, ``--estimator grpo``,
``--trl.learning_rate 3e-4``, ``--estimator_params.alpha 0.5``. As in TRL, a GRPOConfig field may
also be given flat (``--learning_rate 1e-5`` = ``--trl.learning_rate 1e-5``, in YAML too), and a ``trl grpo``
recipe YAML (GRPOConfig fields plus the script's ``model_name_or_path``, ``dataset_name``/``dataset_config``,
``dtype``, ``attn_implementation``, ``use_peft``/``lora_*``, ``reward_funcs`` at the top level) is read as it
is (:mod:`grae.train.trl_recipe`; what grae cannot honour is refused in one line).

Every number is checked before a model loads: finite, an integer that fits, and in range (grae's
own ranges in :mod:`grae.train.checks`, TRL's in :data:`TRL_RANGES`); TRL's and reasoning-gym's own checks run
by building their objects early, and their exceptions become one line naming the field.

The parts, each in its module: the dataclasses (:mod:`grae.train.sections`), reading and checking values
(:mod:`grae.train.values`), the cross-field checks (:mod:`grae.train.checks`) and what a config builds for TRL
(:mod:`grae.train.build`); their names are importable from here too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# the config's names, importable from grae.train.config (callers import them from here)
from grae.train.build import PEFT_RANGES as PEFT_RANGES
from grae.train.build import grpo_config as grpo_config
from grae.train.build import lora_config as lora_config
from grae.train.build import resolve_rewards as resolve_rewards
from grae.train.build import reward_specs as reward_specs
from grae.train.checks import MAX_LEARNING_RATE as MAX_LEARNING_RATE
from grae.train.checks import validate
from grae.train.config_files import CONFIG_DIR as CONFIG_DIR
from grae.train.config_files import MANAGED_TRL_KEYS as MANAGED_TRL_KEYS
from grae.train.config_files import read_yaml as read_yaml
from grae.train.config_files import resolve_config_path as resolve_config_path
from grae.train.errors import ConfigError as ConfigError
from grae.train.output_dir import default_output_dir
from grae.train.resolve import resolve
from grae.train.sections import EvalConfig as EvalConfig
from grae.train.sections import TaskConfig, TrainConfig
from grae.train.trl_values import trl_fields as trl_fields
from grae.train.values import INT_LIMIT as INT_LIMIT
from grae.train.values import TRL_RANGES as TRL_RANGES
from grae.train.values import check_trl as check_trl
from grae.train.values import coerce as coerce
from grae.train.values import from_dict
from grae.train.values import trl_value as trl_value


def load_config(source: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Resolve a run's configuration (:mod:`grae.train.resolve`: model defaults → preset recipe → file ``source``
    (a path, or a name in ``grae/configs/``) → dotted ``overrides`` → validation) and return it, validated.
    A layer that names another estimator (task) than the layers below starts its parameters from its defaults, with
    a note naming the keys dropped (``cfg.notes``)."""
    resolution = resolve(source, overrides, frozenset(f.name for f in dataclasses.fields(TrainConfig)))
    run_dir = default_output_dir(resolution.layers, resolution.raw, resolution.explicit,
                                 {"model": TrainConfig.model, "task.name": TaskConfig.name,
                                  "estimator": TrainConfig.estimator})
    if run_dir is not None:  # a run that is not its recipe's goes beside it (grae.train.output_dir)
        resolution.raw["output_dir"] = run_dir
    cfg = from_dict(TrainConfig, resolution.raw, "")
    cfg.explicit_keys = resolution.explicit
    cfg.layers = tuple(f"{name} ({where})" for name, where, _ in resolution.layers)
    cfg.notes = resolution.notes
    validate(cfg)
    return cfg


def to_dict(cfg: TrainConfig) -> dict:
    """The config as plain nested dicts (what a run records in run.json and a compare job in job.yaml)."""
    return dataclasses.asdict(cfg)


def with_defaults(recorded: dict, cls: type = TrainConfig) -> dict:
    """A configuration dict an older grae recorded (a run's ``run.json`` fingerprint, a compare job's
    ``job.yaml``) with the keys added to ``cls`` since then filled in with their defaults, so that
    comparing it with today's ``to_dict`` names only real changes. Valid because a key is only ever
    added with a default that keeps the old behaviour (``reward_funcs: ["task"]`` is what every run
    before it trained with). Nested sections (``task``, ``eval``, …) are filled the same way; free
    mappings (``trl``, ``params``) are left as recorded."""
    defaults = cls()
    out = dict(recorded)
    for f in dataclasses.fields(cls):
        value = getattr(defaults, f.name)
        if f.name not in out:
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        elif dataclasses.is_dataclass(value) and isinstance(out[f.name], dict):
            out[f.name] = with_defaults(out[f.name], type(value))
    return out
