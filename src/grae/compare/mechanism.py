"""A study's mechanism rows (study key ``mechanism:``): what the arms did, measured, beside what they scored.

::

    eval: {exact: true, n: 256, num_problems: 600, heldout_params: {totals: any, heldout_strata: [totals]}}
    mechanism:
      steps: [0, 100, 200]     # strategy mass at these steps (0 = the base; others must be kept: frontier fractions)
      ks: [1, 64, 256]         # the k of the per-stratum tables and Δ_F (default: 1 and the largest k)
      band_holdout: runs/band_holdout.jsonl   # optional: a band file of problems held out of task.train_subset

It needs exact evaluation of a one-gold task (``eval: {exact: true}`` on ``chain_trace``: p is teacher-forced
gold completions). With it the report adds (:mod:`grae.compare.mechanism_report`):

* every held-out stratum of the held-out task (its ``heldout_strata``, e.g. ``totals=in_range`` and
  ``totals=excursion``) and the band hold-out as its own table: each method's exact pass@k, its paired difference
  against the baseline (Holm over the arms), and with ``paired_against: temperature_frontier`` Δ_F against **that
  stratum's own** temperature frontier (never pooled);
* each strategy's exact mass (Σ p over its gold completions, :func:`grae.eval.gold.gold_prob_parts`; ``L`` and ``G``
  for ``chain_trace`` with ``strategies: two``) per method at each of ``steps`` on each stratum, with the crossed
  seeds × problems interval, and its change against the base's;
* the ratio of each arm's collapsed groups (``acr``, logged per step) to the baseline's, paired by seed, with an
  interval; positive and negative advantage mass and ω over training.

The key is checked by :func:`grae.compare.mechanism_spec.check_mechanism`; this module gathers the table's part
(:class:`Mechanism`, carried in ``summary.json`` → ``results.mechanism``); the probes are :mod:`grae.compare.probes`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grae.eval.strata import stratum_labels


@dataclass
class Probe:
    """One model's probe: ``[P, J]`` gold-completion probabilities on the held-out problems, ``[B, J]`` on the band
    hold-out (None without one)."""

    heldout: np.ndarray
    band: np.ndarray | None = None


@dataclass
class Mechanism:
    """The mechanism rows' part of a study's table (module docstring)."""

    steps: list[int]
    ks: list[int]
    #: the strategies, in the order of a probe's columns
    labels: list[str]
    #: the held-out problems, in the order of a probe's rows
    question_ids: list[str]
    #: stratum label (``totals=in_range``) → its question ids; empty when the held-out task has no strata
    strata: dict[str, list[str]]
    band_ids: list[str] | None
    base: Probe
    #: method → seed → step → probe
    jobs: dict[str, dict[int, dict[int, Probe]]]
    #: method → seed → the logged positive advantage mass per step (``adv_pos_mass``; None where a step lacks it)
    adv_pos_mass: dict[str, dict[int, list]] = field(default_factory=dict)


def _probe(record: dict[str, Any], where: str, question_ids: list[str] | None, band_ids: list[str] | None) -> Probe:
    """A probe file's arrays, its problems checked against the study's."""
    heldout = record["heldout"]
    if question_ids is not None and heldout["question_ids"] != question_ids:
        raise ValueError(f"{where}: probed other held-out problems than the base's; delete it to probe it again")
    band = record.get("band")
    if band_ids is not None and (band is None or band["question_ids"] != band_ids):
        raise ValueError(f"{where}: probed other band hold-out problems than the base's; delete it to probe it again")
    return Probe(np.asarray(heldout["parts"], dtype=np.float64),
                 None if band is None else np.asarray(band["parts"], dtype=np.float64))


def gather_mechanism(cfg: Any) -> Mechanism:
    """The probes of the base and every job, the held-out strata and the positive advantage mass, read once."""
    from grae.compare.frontier import frontier_eval_config
    from grae.compare.probes import BASE_PROBES, parts_path, probe_steps
    from grae.data import get_task
    from grae.train.rundir import read_metrics

    spec = cfg.mechanism
    jobs = cfg.jobs()
    base_path = cfg.output_dir / "base" / BASE_PROBES
    if not base_path.exists():
        raise FileNotFoundError(f"{base_path}: the base was not probed; run grae compare without --report-only "
                                "(mechanism)")
    base_record = json.loads(base_path.read_text())
    question_ids = list(base_record["heldout"]["question_ids"])
    band_ids = list(base_record["band"]["question_ids"]) if base_record.get("band") else None
    config = frontier_eval_config(cfg.train_config(jobs[0]), cfg.eval)
    task = get_task(config.task.name, **config.task.params)
    mech = Mechanism(spec["steps"], spec["ks"], list(base_record["labels"]), question_ids,
                     stratum_labels(task, task.heldout(config.eval.num_problems)), band_ids,
                     _probe(base_record, str(base_path), None, None), {})
    for job in jobs:
        max_steps = cfg.train_config(job).max_steps
        by_step = {}
        for step in probe_steps(max_steps, spec["steps"]):
            path = parts_path(job.output_dir, step)
            if not path.exists():
                raise FileNotFoundError(f"{job.method} seed {job.seed}: {path} is missing (mechanism); run grae compare "
                                        "without --report-only")
            by_step[step] = _probe(json.loads(path.read_text()), str(path), question_ids, band_ids)
        mech.jobs.setdefault(job.method, {})[job.seed] = by_step
        rows = read_metrics(job.output_dir / "metrics.jsonl")
        mech.adv_pos_mass.setdefault(job.method, {})[job.seed] = [r.get("adv_pos_mass", r.get("grae/adv_pos_mass"))
                                                                  for r in rows]
    return mech


# ---- JSON form (summary.json → results.mechanism) ----------------------------------------------------------


def _probe_json(p: Probe) -> dict[str, Any]:
    return {"heldout": p.heldout.tolist(), "band": None if p.band is None else p.band.tolist()}


def mechanism_to_json(m: Mechanism) -> dict[str, Any]:
    return {"steps": m.steps, "ks": m.ks, "labels": m.labels, "question_ids": m.question_ids, "strata": m.strata,
            "band_ids": m.band_ids, "base": _probe_json(m.base),
            "jobs": {method: {str(s): {str(step): _probe_json(p) for step, p in by_step.items()}
                              for s, by_step in by_seed.items()} for method, by_seed in m.jobs.items()},
            "adv_pos_mass": {method: {str(s): v for s, v in by_seed.items()} for method, by_seed in m.adv_pos_mass.items()}}


def mechanism_from_json(data: dict[str, Any]) -> Mechanism:
    """The :class:`Mechanism` :func:`mechanism_to_json` wrote; every probability is checked to lie in [0, 1] and
    every probe to have one row per problem (``ValueError`` naming the entry)."""
    question_ids, band_ids = list(data["question_ids"]), data["band_ids"]

    def probe(record: dict[str, Any], where: str) -> Probe:
        out = Probe(np.asarray(record["heldout"], dtype=np.float64),
                    None if record["band"] is None else np.asarray(record["band"], dtype=np.float64))
        for name, arr, ids in (("heldout", out.heldout, question_ids), ("band", out.band, band_ids)):
            if arr is None:
                continue
            if arr.ndim != 2 or arr.shape[0] != len(ids or []) or not np.all((arr >= 0) & (arr <= 1)):
                raise ValueError(f"results.mechanism.{where}.{name}: expected one row of probabilities in [0, 1] per "
                                 f"problem ({len(ids or [])}), got shape {arr.shape}")
        return out

    return Mechanism(list(data["steps"]), list(data["ks"]), list(data["labels"]), question_ids,
                     {k: list(v) for k, v in data["strata"].items()}, band_ids, probe(data["base"], "base"),
                     {method: {int(s): {int(step): probe(p, f"jobs.{method}.{s}.{step}") for step, p in by_step.items()}
                               for s, by_step in by_seed.items()} for method, by_seed in data["jobs"].items()},
                     {method: {int(s): list(v) for s, v in by_seed.items()}
                      for method, by_seed in data["adv_pos_mass"].items()})
