"""The base model's temperature frontier in a study: the base's counts per temperature among a study's base files,
and the file ``grae compare`` writes them to.

F, Δ_F and their interval are :mod:`grae.eval.temperature_frontier` (``grae train``'s exact held-out report shares
them); their names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from grae.eval.frontier_distance import FrontierDistance
from grae.eval.stats import ProblemCounts
from grae.eval.temperature_frontier import (
    TEMPERATURES,
    TemperatureFrontier,
    TemperaturePoint,
    base_temperature_p,
    distance_above,
    exact_counts,
    frontier_table,
    pareto_front,
    read_temperature_p,
    temperature_frontier,
    trace_frontier,
)

__all__ = ["PREFIX", "TEMPERATURES", "FrontierDistance", "TemperatureFrontier", "TemperaturePoint",
           "base_temperature_p", "base_temperatures", "distance_above", "exact_counts", "frontier_table",
           "pareto_front", "read_base_temperatures", "temperature_frontier", "trace_frontier"]

#: the base's counts at temperature T are ``StudyResults.base_files[f"{PREFIX}{T!r}"]`` (compare's tables)
PREFIX = "temperature "


def read_base_temperatures(path: Path) -> dict[str, ProblemCounts]:
    """``{PREFIX + T: exact counts}`` of the file compare writes (grae.compare.runner.base_temperature_evaluation);
    FileNotFoundError naming the fix when it is missing."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: the base's temperature frontier was not traced; run grae compare without "
                                "--report-only (paired_against: temperature_frontier)")
    return {PREFIX + repr(t): c for t, c in read_temperature_p(path).items()}


def base_temperatures(base_files: Mapping[str, ProblemCounts]) -> dict[float, ProblemCounts]:
    """The base's counts per temperature among a study's base files (empty when it traced no frontier)."""
    return {float(name[len(PREFIX):]): c for name, c in base_files.items() if name.startswith(PREFIX)}
