"""Resolve ``--tasks`` entries to :mod:`grae.data` tasks and draw their held-out problems.

An entry is one of

* ``NAME`` — a benchmark (``math500``, ``aime2025``, … see :mod:`grae.eval.benchmarks`) or, failing
  that, any :func:`grae.data.get_task` name (``chain_sum``, ``rg:<generator>``, …): its held-out split;
* ``NAME=PATH`` — benchmark ``NAME`` (its field mapping and answer extraction) read from a local file
  or dataset directory; any other ``NAME``: the local data file ``PATH`` under that name;
* ``PATH`` or ``local:PATH`` (grae.data's name form) — a local ``.jsonl``/``.ndjson``/``.json``/``.parquet``
  file, all of it held out, fields guessed by :func:`grae.data.map_generic_row`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .benchmarks import get_benchmark, is_benchmark

#: Problems drawn from a procedural task when ``--num-problems`` is not given.
DEFAULT_PROCEDURAL_PROBLEMS = 100
#: ``max_tokens`` defaults: math datasets (long reasoning, the seeds' 4,096) and everything else.
DEFAULT_MAX_TOKENS_MATH = 4096
DEFAULT_MAX_TOKENS = 1024
LOCAL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")


def split_task_list(values: Sequence[str]) -> list[str]:
    """``["a,b", "c"]`` → ``["a", "b", "c"]`` (``--tasks`` may be repeated or comma-separated)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def resolve_task(entry: str, *, prompt_style: str | None = None, params: dict[str, Any] | None = None):
    """The :mod:`grae.data` task for one ``--tasks`` entry (see module docstring).

    ``prompt_style`` overrides the task's default (math: ``chat``, procedural: ``plain``); ``params``
    go to :func:`grae.data.get_task` (e.g. reasoning-gym generator settings).
    """
    from grae.data import get_task

    kwargs = dict(params or {})
    if prompt_style is not None:
        kwargs["prompt_style"] = prompt_style
    if "=" in entry and not Path(entry).expanduser().exists():
        name, path = entry.split("=", 1)
        if not Path(path).expanduser().exists():
            raise FileNotFoundError(f"--tasks {entry}: {path} does not exist")
        if is_benchmark(name):
            return get_benchmark(name, path, **kwargs)
        return _local_task(entry, Path(path).expanduser(), name, kwargs)
    if is_benchmark(entry):
        return get_benchmark(entry, **kwargs)
    path = Path(entry.removeprefix("local:")).expanduser()
    if path.suffix.lower() in LOCAL_SUFFIXES:
        return _local_task(entry, path, path.name.split(".")[0], kwargs)
    return get_task(entry, **kwargs)


def _local_task(entry: str, path: Path, name: str, kwargs: dict[str, Any]):
    """A local data file, all of it held out, under task ``name``; read now, so a bad line (not an object,
    too long, a conflicting answer) is refused before the model loads."""
    from grae.data import LocalTask

    if not path.exists():
        raise FileNotFoundError(f"--tasks {entry}: no such file {path}; check the path")
    if path.suffix.lower() not in LOCAL_SUFFIXES or not path.is_file():
        raise FileNotFoundError(f"--tasks {entry}: {path} is not a {'/'.join(LOCAL_SUFFIXES)} file; NAME=DIR works "
                                "for benchmarks only (math500=DIR, …)")
    task = LocalTask(str(path), eval_only=True, name=name, **kwargs)
    task.heldout(None)
    return task


def model_task_params(model: str, entry: str) -> tuple[dict[str, Any], str] | None:
    """The task parameters ``model`` was made for when ``entry`` is its task, and where they come from:
    the tiny preset (or its directory) on ``chain_sum`` gets the shipped model's settings; a ``grae train``
    run's ``final/``, ``checkpoints/checkpoint-N`` or ``snapshots/step-N`` gets its run's ``task.params``
    (the run's ``config.yaml``). None for anything else (the task's own defaults apply)."""
    from grae.presets import tiny_model_path
    from grae.tiny.tasks import DEFAULT_TASK, DEFAULT_TASK_KWARGS

    path = Path(model).expanduser()
    if model == "tiny" or (path.is_dir() and path.resolve() == Path(tiny_model_path()).resolve()):
        return (dict(DEFAULT_TASK_KWARGS), "the tiny model's") if entry == DEFAULT_TASK else None
    if not path.is_dir():
        return None
    run = path.parent if path.name == "final" else path.parent.parent if path.parent.name in ("checkpoints",
                                                                                             "snapshots") else None
    config = run / "config.yaml" if run is not None else None
    if config is None or not config.is_file():
        return None
    import yaml

    from grae.yaml_io import load_yaml

    try:
        task = (load_yaml(config.read_text()) or {}).get("task") or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return None
    if not isinstance(task, dict) or task.get("name") != entry or not isinstance(task.get("params"), dict):
        return None
    return dict(task["params"]), f"its run's ({config})"


def is_fixed_set(task: Any) -> bool:
    """Whether the task reads a fixed problem set (a dataset) rather than generating problems."""
    from grae.data import RowsTask

    return isinstance(task, RowsTask)


def load_examples(task: Any, num_problems: int | None) -> list[dict[str, Any]]:
    """Held-out examples: the first ``num_problems`` of a dataset (all by default, never more than it has)
    or of a procedural task's held-out split (:data:`DEFAULT_PROCEDURAL_PROBLEMS` by default)."""
    if is_fixed_set(task):
        examples = task.heldout(None)[:num_problems] if num_problems is not None else task.heldout(None)
    else:
        examples = task.heldout(num_problems if num_problems is not None else DEFAULT_PROCEDURAL_PROBLEMS)
    if not examples:
        raise ValueError(f"task {getattr(task, 'name', task)!r} gave no held-out problems")
    return list(examples)


def default_max_tokens(task: Any) -> int:
    """The task's own ``max_tokens`` when it sets one; else 4,096 for math datasets, 1,024 otherwise."""
    own = getattr(task, "max_tokens", None)
    if own:
        return int(own)
    return DEFAULT_MAX_TOKENS_MATH if is_fixed_set(task) else DEFAULT_MAX_TOKENS
