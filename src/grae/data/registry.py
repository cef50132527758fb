"""Task registry: ``register_task`` / ``get_task`` / ``task_names``.

Besides registered names, :func:`get_task` understands five name forms:

* ``hf:<org/name>`` - any Hugging Face Hub dataset (:mod:`grae.data.hub`; params ``config``, ``split``,
  ``problem_field``, ``answer_field``);
* ``rg:<generator>`` - any reasoning-gym generator (``rg:leg_counting``), kwargs go to
  ``reasoning_gym.create_dataset``;
* ``mix:<name>=<weight>,<name>=<weight>`` - a weighted task mix (``mix:chain_sum=2,products=1``);
* ``local:<path>`` - a local JSONL/JSON/Parquet file;
* a bare path ending in ``.jsonl``, ``.ndjson``, ``.json`` or ``.parquet``.

The modules that implement a name form register it (:func:`register_name_form`: ``rg:`` and ``mix:`` in
:mod:`grae.data.procedural`, ``local:`` in :mod:`grae.data.local`, ``hf:`` in :mod:`grae.data.hub`), so this
module imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from grae.data.base import Task

_REGISTRY: dict[str, Callable[..., Task]] = {}
#: name forms: prefix -> factory called as ``factory(name_without_prefix, **params)``
_NAME_FORMS: dict[str, Callable[..., Task]] = {}
LOCAL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")
NAME_FORMS = ("hf:<org/name> (a hub dataset)", "rg:<reasoning-gym generator>", "mix:<name>=<weight>,...", "local:<path>",
              "<path>.jsonl|.json|.parquet")

F = TypeVar("F", bound=Callable[..., Task])


class UnknownTaskError(ValueError):
    """Raised by :func:`get_task` for a name that is neither registered nor one of the name forms."""


def register_task(name: str, *, overwrite: bool = False) -> Callable[[F], F]:
    """Decorator registering a task factory (a ``Task`` subclass or a function returning a ``Task``)
    under ``name``; ``get_task(name, **params)`` then calls ``factory(**params)``."""
    if not name or ":" in name:
        raise ValueError(f"task names must be non-empty and contain no ':' (reserved for name forms), got {name!r}")

    def decorator(factory: F) -> F:
        if name in _REGISTRY and not overwrite and _REGISTRY[name] is not factory:
            raise ValueError(f"task {name!r} is already registered (pass overwrite=True to replace it)")
        _REGISTRY[name] = factory
        return factory

    return decorator


def register_name_form(prefix: str) -> Callable[[F], F]:
    """Decorator registering the factory of the name form ``<prefix><rest>`` (``prefix`` ends in ``:``):
    ``get_task(prefix + rest, **params)`` calls ``factory(rest, **params)``."""
    if not prefix.endswith(":"):
        raise ValueError(f"name form prefixes end in ':', got {prefix!r}")

    def decorator(factory: F) -> F:
        _NAME_FORMS[prefix] = factory
        return factory

    return decorator


def task_names() -> list[str]:
    """Sorted registered task names (the ``rg:``/``mix:``/``local:`` forms are accepted in addition)."""
    return sorted(_REGISTRY)


def get_task(name: str, **params: Any) -> Task:
    """Build the task called ``name`` with ``params`` (see the module docstring for accepted forms).

    Raises :class:`UnknownTaskError` listing the valid names for an unknown one.
    """
    if not isinstance(name, str) or not name:
        raise UnknownTaskError(f"task name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        return _REGISTRY[name](**params)
    for prefix, factory in _NAME_FORMS.items():
        if name.startswith(prefix):
            return factory(name[len(prefix):], **params)
    if name.lower().endswith(LOCAL_SUFFIXES) and "local:" in _NAME_FORMS:
        return _NAME_FORMS["local:"](name, **params)
    if name.count("/") == 1 and not name.startswith(("/", ".")) and " " not in name:  # a hub id, as TRL names datasets
        raise UnknownTaskError(
            f"unknown task {name!r}; a Hugging Face Hub dataset is named hf:{name} (task.params: config, split, "
            "problem_field, answer_field; a TRL recipe's dataset_name is mapped to it)")
    raise UnknownTaskError(
        f"unknown task {name!r}. Registered tasks: {', '.join(task_names())}. "
        f"Also accepted: {', '.join(NAME_FORMS)}."
    )


def unknown_parameter(err: BaseException, name: str) -> str | None:
    """The one line for a task built with a parameter it does not take (``err``: the ``TypeError`` of
    ``get_task(name, **params)``), naming the key; None for any other error. ``plain_answer`` (how reasoning-gym
    tasks read an untagged answer) on a dataset task points to its counterpart there, ``answer_extraction``."""
    import re

    found = re.search(r"unexpected keyword argument '([^']+)'", str(err)) if isinstance(err, TypeError) else None
    if found is None:
        return None
    key = found.group(1)
    hint = ("; a dataset task (a local file, a hub dataset) reads answers per task.params.answer_extraction: boxed, "
            "last_number, marker (after task.params.answer_marker, default '####') or exact"
            if key == "plain_answer" else "; docs/tasks.md lists each task's parameters")
    return f"task.params.{key}: not a parameter of task {name!r}{hint}"
