"""Where ``grae train``'s configuration files are and how one is read, and the GRPOConfig fields grae sets itself:
what both :mod:`grae.train.config` (the dataclasses) and :mod:`grae.train.resolve` (the layers) need."""

from __future__ import annotations

from pathlib import Path

import yaml

from grae.train.errors import ConfigError
from grae.yaml_io import load_yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"

#: GRPOConfig fields grae sets itself (from the top-level config or the run layout).
MANAGED_TRL_KEYS = {"output_dir": "output_dir", "max_steps": "max_steps", "seed": "seed", "save_steps": "save_steps"}


def resolve_config_path(source: str | Path | None) -> Path:
    if source is None:
        return CONFIG_DIR / "default.yaml"
    path = Path(source)
    if path.exists():
        return path
    named = CONFIG_DIR / f"{source}.yaml"
    if named.exists():
        return named
    available = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config: no file {str(source)!r} and no packaged recipe of that name; recipes: {', '.join(available)}")


def read_yaml(path: Path) -> dict:
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, got {type(data).__name__}")
    return data


