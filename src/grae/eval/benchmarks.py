"""Evaluation benchmarks by name, on top of :mod:`grae.data` (which owns the sources and field mappings).

``grae eval --tasks math500`` evaluates the held-out split of a :class:`grae.data.HubTask` built on
``grae.data.SOURCES["math500"]``; ``math500=PATH`` applies the same source's field mapping (answer
extraction included) to a local copy. This module only adds the eval-facing names and aliases and
the local-copy loader; it holds no field mapping of its own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Benchmark:
    """An evaluation benchmark: its ``grae eval`` name and the :data:`grae.data.SOURCES` key behind it."""

    name: str
    source: str
    size: int
    description: str


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark("math", "math_test", 5000, "MATH (Hendrycks et al. 2021), full test set"),
        Benchmark("math500", "math500", 500, "MATH-500 (the PRM800K test subset)"),
        Benchmark("aime2024", "aime24", 30, "AIME 2024 I and II"),
        Benchmark("aime2025", "aime25", 30, "AIME 2025 I and II"),
        Benchmark("amc23", "amc23", 40, "AMC 2023"),
        Benchmark("gsm8k", "gsm8k_test", 1319, "GSM8K test"),
        Benchmark("minerva", "minerva", 272, "Minerva Math (OCWCourses)"),
        Benchmark("olympiadbench", "olympiadbench", 675, "OlympiadBench, open-ended maths, English, text-only"),
    ]
}

#: Other spellings accepted by :func:`get_benchmark` (including the :mod:`grae.data` task names).
ALIASES = {
    "math_test": "math", "math5000": "math", "math-500": "math500", "math_500": "math500",
    "aime24": "aime2024", "aime25": "aime2025", "amc": "amc23", "amc2023": "amc23", "gsm8k_test": "gsm8k",
    "minerva_math": "minerva", "minervamath": "minerva", "olympiad": "olympiadbench", "olympiad_bench": "olympiadbench",
}


def canonical_name(name: str) -> str | None:
    """The registered benchmark name for ``name`` or an alias (case-insensitive), else ``None``."""
    key = name.lower()
    key = ALIASES.get(key, key)
    return key if key in BENCHMARKS else None


def is_benchmark(name: str) -> bool:
    return canonical_name(name) is not None


def hub_source(bench: Benchmark):
    """The :class:`grae.data.HubSource` (dataset id, config, split, field mapping) of a benchmark."""
    from grae.data import SOURCES

    return SOURCES[bench.source]


def any_schema(mapper: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``mapper`` for a local copy whatever its schema variant: a row the source's own mapping rejects (a
    verl RL-schema parquet, an ``id, problem, answer`` mirror) goes through
    :func:`grae.data.map_generic_row`, which reads verl's ``prompt``/``reward_model.ground_truth`` too,
    when it names its gold explicitly (an answer column or verl's ground truth)."""
    from grae.data.fields import ANSWER_FIELDS, DataFormatError, is_verl_row, map_generic_row

    def mapped(raw):
        try:
            row = mapper(raw)
        except DataFormatError:
            row = None
        if row is not None:
            return row
        # only rows that carry their gold explicitly: a file of another benchmark (a MATH file under gsm8k,
        # gold only inside a solution) stays refused rather than read with a guessed mapping
        if is_verl_row(raw) or any(raw.get(f) not in (None, "") for f in ANSWER_FIELDS):
            return map_generic_row(raw)
        return None

    return mapped


def local_loader(path: str | Path) -> Callable[[Any], list[dict]]:
    """A :class:`grae.data.HubTask` loader reading a local copy with the source's own field mapping
    (then :func:`any_schema`'s generic and verl fallbacks).

    ``path`` is a ``.jsonl``/``.ndjson``/``.json``/``.parquet`` file, or a dataset directory loaded with
    ``datasets.load_dataset(path, config, split)`` (the source's config and split).
    """
    path = Path(path).expanduser()

    def load(source) -> list[dict]:
        from grae.data.hub import load_hub_rows, map_located_rows
        from grae.data.local import check_conflicts, located_records

        if path.is_dir():
            return load_hub_rows(dataclasses.replace(source, path=str(path)))
        located = map_located_rows(dataclasses.replace(source, mapper=any_schema(source.mapper)),
                                   located_records(str(path)))
        if not located:
            raise ValueError(f"{path}: no row fits the field mapping of {source.describe()}")
        check_conflicts(str(path), located)  # one question under two golds: refused, as a NAME=FILE task's
        return [row for _, row in located]

    return load


def get_benchmark(name: str, path: str | Path | None = None, *, prompt_style: str | None = None, **kwargs: Any):
    """The benchmark ``name`` as an evaluation-only :class:`grae.data.HubTask` (examples' ``task`` = ``name``).

    Args:
        name: a key of :data:`BENCHMARKS` or an alias.
        path: a local copy to read instead of the Hugging Face hub.
        prompt_style: ``"chat"`` (default: one user message with the ``\\boxed{}`` instruction) or ``"plain"``.
        **kwargs: further :class:`grae.data.rows.RowsTask` options (``instruction``, ``timeout``).
    """
    from grae.data import HubTask

    key = canonical_name(name)
    if key is None:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    bench = BENCHMARKS[key]
    if prompt_style is not None:
        kwargs["prompt_style"] = prompt_style
    if path is not None:
        kwargs["loader"] = local_loader(path)
    else:  # offline, the way out is a local copy: NAME=PATH
        from grae.data.hub import load_hub_rows

        kwargs.setdefault("loader", functools.partial(
            load_hub_rows, local_hint=f"save a copy (a .jsonl/.json/.parquet file or a dataset directory) and pass "
                                      f"--tasks {bench.name}=<path> (read with this benchmark's field mapping)"))
    return HubTask(bench.name, train=None, heldout=bench.source, **kwargs)
