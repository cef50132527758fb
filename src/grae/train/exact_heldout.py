"""``grae train``'s exact held-out report: what the trained model gained over the base, per held-out stratum, and
how much of it a temperature knob on the base already gives.

Every number is exact (teacher-forced gold completions, :func:`grae.eval.runner.evaluate_exact` and
:func:`grae.eval.gold.gold_prob_parts`): a problem's p is the probability that one sample is correct, and pass@k is
the mean over the problems of 1 − (1 − p)^k. Per stratum (all held-out problems, then each of the held-out task's
``heldout_strata``, e.g. ``totals=in_range`` and ``totals=excursion``):

* pass@k for k = 1, 2, 4, …, 256 of the base and of the trained model, and their change paired by problem, each
  with the percentile bootstrap over the problems of ``grae train``'s held-out table
  (:mod:`grae.train.heldout_table`: the same resamples, the same binomial bound where nothing varies);
* the base's temperature frontier on that stratum's problems (:mod:`grae.eval.temperature_frontier`): the
  temperature of the base's best pass@1, the base's pass@k there, and F(pass@1 of the trained model) at every k
  (the plot's line beside the two curves);
* Δ_F = pass@k(trained) − F(pass@1(trained)) at k = 1, 64 and 256, its interval over the problems (the crossed
  interval of :func:`grae.eval.frontier_distance.frontier_distance` with one seed: a t interval, ν = P − 1). At
  k = 1 F is flat at the base's best pass@1, so Δ_F@1 is the gain over the best any temperature gives;
* each strategy's mass (Σ p over its gold completions, ``L`` and ``G`` on the two-modes testbed) before and after,
  with its change paired by problem (pass@1 of that strategy alone, the same bootstrap).

:func:`exact_heldout` computes it from :class:`ExactInputs` (:func:`exact_inputs` builds them from arrays,
:func:`read_exact_inputs` from a run directory's files); :mod:`grae.train.exact_heldout_text` says it in words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grae.eval.crossed import Interval
from grae.eval.stats import Estimate, ProblemCounts, count_problems, paired_difference, passk_estimates
from grae.eval.temperature_frontier import (
    TemperaturePoint,
    distance_above,
    exact_counts,
    read_temperature_p,
    trace_frontier,
)
from grae.metrics import powers_of_two
from grae.train.heldout_table import BOOTSTRAP

#: the k of every pass@k row: 1, 2, 4, …, 256
KS = tuple(powers_of_two(256))
#: the k of Δ_F
DELTA_KS = (1, 64, 256)
#: the stratum of every held-out problem
ALL = "all"
#: the base's exact p per temperature (:func:`grae.eval.temperature_frontier.temperature_record`), under ``eval/``
TEMPERATURES_FILE = "temperatures.json"
#: each strategy's exact mass per problem, before and after training (:func:`parts_record`), under ``eval/``
PARTS_FILES = ("before.parts.json", "after.parts.json")


@dataclass
class ExactInputs:
    """The base's and the trained model's exact counts on the held-out problems, the base's at each temperature of
    the frontier's grid, and per strategy label the (before, after) counts of that strategy's mass alone."""

    base: ProblemCounts
    trained: ProblemCounts
    temperatures: dict[float, ProblemCounts]
    mass: dict[str, tuple[ProblemCounts, ProblemCounts]] = field(default_factory=dict)


@dataclass
class StratumReport:
    """One stratum's rows (module docstring); pass@k and mass as :class:`~grae.eval.stats.Estimate` (bootstrap),
    Δ_F as :class:`~grae.eval.crossed.Interval`; ``frontier``: F(pass@1 of the trained model) per k."""

    name: str
    problems: int
    base: dict[int, Estimate]
    trained: dict[int, Estimate]
    change: dict[int, Estimate]
    best: TemperaturePoint
    at_best: dict[int, Estimate]
    frontier: dict[int, float]
    delta_f: dict[int, Interval]
    #: the grid's lowest temperature gave the best pass@1: F may continue below it
    best_at_edge: bool = False
    #: label → (before, after, change paired by problem)
    mass: dict[str, tuple[Estimate, Estimate, Estimate]] = field(default_factory=dict)


@dataclass
class ExactHeldout:
    """Every stratum's :class:`StratumReport`, :data:`ALL` first; ``ks`` and ``delta_ks`` as computed."""

    ks: list[int]
    delta_ks: list[int]
    strata: dict[str, StratumReport]


def strategy_counts(parts: np.ndarray, labels: Sequence[str], question_ids: Sequence[str],
                    k_max: int = max(KS)) -> dict[str, ProblemCounts]:
    """Label → exact counts of that strategy's mass alone, from ``[P, J]`` parts (column j is ``labels[j]``)."""
    parts = np.asarray(parts, dtype=np.float64)
    if parts.ndim != 2 or parts.shape != (len(question_ids), len(labels)):
        raise ValueError(f"parts of shape {parts.shape} for {len(question_ids)} problems and labels {list(labels)}")
    return {label: exact_counts(parts[:, j], question_ids, k_max) for j, label in enumerate(labels)}


def exact_inputs(question_ids: Sequence[str], base_p: Any, trained_p: Any, temperature_p: Mapping[float, Any], *,
                 labels: Sequence[str] = (), base_parts: Any = None, trained_parts: Any = None,
                 k_max: int = max(KS)) -> ExactInputs:
    """:class:`ExactInputs` from arrays on the same problems: ``[P]`` p of the base and of the trained model,
    temperature → the base's ``[P]`` p, and, with ``labels``, the ``[P, J]`` parts before and after."""
    ids = [str(q) for q in question_ids]
    mass = {}
    if labels:
        before = strategy_counts(base_parts, labels, ids, k_max)
        after = strategy_counts(trained_parts, labels, ids, k_max)
        mass = {label: (before[label], after[label]) for label in labels}
    return ExactInputs(exact_counts(base_p, ids, k_max), exact_counts(trained_p, ids, k_max),
                       {float(t): exact_counts(p, ids, k_max) for t, p in temperature_p.items()}, mass)


def _passk(counts: ProblemCounts, ks: Sequence[int], seed: int, level: float) -> dict[int, Estimate]:
    return passk_estimates(counts, ks, bootstrap=BOOTSTRAP, seed=seed, level=level)


def _change(before: ProblemCounts, after: ProblemCounts, ks: Sequence[int], seed: int,
            level: float) -> dict[int, Estimate]:
    return paired_difference(before, after, ks, bootstrap=BOOTSTRAP, seed=seed, level=level)[0]


def _mass(before: ProblemCounts, after: ProblemCounts, seed: int, level: float) -> tuple[Estimate, Estimate, Estimate]:
    """One strategy's mass before, after and its change paired by problem: pass@1 of that strategy alone."""
    return _passk(before, [1], seed, level)[1], _passk(after, [1], seed, level)[1], _change(before, after, [1], seed,
                                                                                          level)[1]


def stratum_report(name: str, inputs: ExactInputs, question_ids: Sequence[str], *, ks: Sequence[int] = KS,
                   delta_ks: Sequence[int] = DELTA_KS, level: float = 0.95, seed: int = 0) -> StratumReport:
    """The rows of the stratum of ``question_ids`` (module docstring), each measure on those problems only: the
    stratum's own temperature frontier, never the pooled one."""
    ids = [str(q) for q in question_ids]
    base, trained = inputs.base.subset(ids), inputs.trained.subset(ids)
    temperatures = {t: c.subset(ids) for t, c in inputs.temperatures.items()}
    frontiers = {k: trace_frontier(temperatures, k) for k in sorted({int(k) for k in (*ks, *delta_ks)})}
    x_trained = float(trained.p.mean())
    best = frontiers[max(frontiers)].best()
    return StratumReport(
        name, len(ids), _passk(base, ks, seed, level), _passk(trained, ks, seed, level),
        _change(base, trained, ks, seed, level), best, _passk(temperatures[best.temperature], ks, seed, level),
        {int(k): frontiers[int(k)].at(x_trained) for k in ks},
        {int(k): distance_above({0: trained}, temperatures, int(k), level, frontiers[int(k)]).interval
         for k in delta_ks},
        best.temperature == min(temperatures),
        {label: _mass(b.subset(ids), a.subset(ids), seed, level) for label, (b, a) in inputs.mass.items()})


def exact_heldout(inputs: ExactInputs, strata: Mapping[str, Sequence[str]] | None = None, *, ks: Sequence[int] = KS,
                  delta_ks: Sequence[int] = DELTA_KS, level: float = 0.95, seed: int = 0) -> ExactHeldout:
    """:data:`ALL` the base's held-out problems, then each of ``strata`` (label → question ids, e.g.
    :func:`grae.eval.strata.stratum_labels`); ``seed``: the bootstrap's (the run's ``eval.seed``, as the held-out
    table's)."""
    if not inputs.temperatures:
        raise ValueError("the exact held-out report needs the base's p at one temperature at least")
    groups = {ALL: list(inputs.base.question_ids), **{label: list(ids) for label, ids in (strata or {}).items()}}
    return ExactHeldout([int(k) for k in ks], [int(k) for k in delta_ks],
                        {label: stratum_report(label, inputs, ids, ks=ks, delta_ks=delta_ks, level=level, seed=seed)
                         for label, ids in groups.items()})


def frontier_side(interval: Interval, margin: float = 0.0) -> str:
    """Where an interval of Δ_F lies: ``"above"`` F (its lower bound > ``margin``), ``"below"`` (its upper bound
    < ``margin``), else ``"within"``."""
    if interval.lo > margin:
        return "above"
    return "below" if interval.hi < margin else "within"


# ---- files in a run directory's eval/ ---------------------------------------------------------------------------


def parts_record(labels: Sequence[str], question_ids: Sequence[str], parts: Any,
                 settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON record of one model's ``[P, J]`` strategy parts: ``{"settings", "labels", "question_ids",
    "parts"}`` (what :func:`read_parts` reads)."""
    return {"settings": dict(settings or {}), "labels": list(labels), "question_ids": [str(q) for q in question_ids],
            "parts": np.asarray(parts, dtype=np.float64).tolist()}


def read_parts(path: Path, k_max: int = max(KS)) -> dict[str, ProblemCounts]:
    """Label → exact counts of that strategy's mass, from a :func:`parts_record` file."""
    data = json.loads(Path(path).read_text())
    return strategy_counts(np.asarray(data["parts"], dtype=np.float64), data["labels"], data["question_ids"], k_max)


def read_exact_inputs(out: Path) -> ExactInputs | None:
    """The :class:`ExactInputs` of the run in ``out``: its exact held-out rows (``eval/before.jsonl``,
    ``eval/after.jsonl``, as :func:`grae.train.run.evaluate_heldout` writes them with ``exact``), the base's p per
    temperature (``eval/``:data:`TEMPERATURES_FILE`) and, where both are there, the strategy parts
    (``eval/``:data:`PARTS_FILES`). None where the rows or the temperatures are missing or the rows are not exact."""
    from grae.eval.records import RecordsError, iter_rows

    paths = [out / "eval" / name for name in ("before.jsonl", "after.jsonl", TEMPERATURES_FILE)]
    if not all(p.is_file() for p in paths):
        return None
    try:
        base, trained = (count_problems(iter_rows(p)) for p in paths[:2])
        if not (base.exact and trained.exact):
            return None
        inputs = ExactInputs(base, trained, read_temperature_p(paths[2]))
        parts = [out / "eval" / name for name in PARTS_FILES]
        if all(p.is_file() for p in parts):
            before, after = (read_parts(p) for p in parts)
            inputs.mass = {label: (before[label], after[label]) for label in before if label in after}
    except (OSError, RecordsError, ValueError, KeyError):
        return None
    return inputs
