"""A run's ``metrics.jsonl``: its name and its reader, what both :mod:`grae.train.rundir` and
:mod:`grae.train.resume` need."""

from __future__ import annotations

from pathlib import Path

from grae.io import read_jsonl

#: one JSON line per logged training step (grae.train.callbacks writes it)
METRICS_FILE = "metrics.jsonl"


def read_metrics(path: str | Path) -> list[dict]:
    """The step rows of a run's ``metrics.jsonl`` (rows without an integer ``step`` are left out; the torn
    last line of a killed writer is ignored)."""
    return [row for row in read_jsonl(path) if _step_of(row) is not None]


def _step_of(row: dict) -> int | None:
    try:
        return int(row["step"])
    except (ValueError, KeyError, TypeError):
        return None
