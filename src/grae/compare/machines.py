"""Studies block by machine: every arm of a seed should train on one machine kind, so that a
paired arm − baseline difference compares like with like, and the report prints the machine × arm interaction.

A job records what trained it (``eval/summary.json`` → ``device``, grae.train.run.device_label, e.g.
``"cpu (AMD EPYC 7B13, 2 threads)"``, ``"cuda (NVIDIA H100 80GB HBM3)"``); its **machine kind** is that label
without the thread or process count (:func:`machine_kind`). Jobs trained before grae recorded it take the
study key ``unrecorded_devices`` (seed → machine kind, from the study's own notes), and are marked as declared.

* :func:`blocking` — per seed, the kinds its arms ran on: a seed with two kinds is **split** (its paired
  differences compare machines as well as arms), one with a job of no known kind is **unknown**.
* :func:`interaction` — for one arm, the per-seed × problem values of a paired difference (arm − baseline, or
  the distance above the baseline's frontier) split by the kind both jobs of the seed ran on: per kind the crossed
  seeds × problems interval (grae.compare.stats), and between two kinds the difference of their means with a
  pooled two-sample t on the seed means (ν = seeds − 2). Every seed answers the same problems, so the problems'
  effects cancel in that difference and a seed mean's variance (σ²_seed + σ²_resid/P) is exactly what the
  difference's variance is made of; the t is the interaction's test, its interval the machine × arm effect.
* :func:`check_sitting` — before a ``grae compare`` sitting trains anything: a seed whose finished jobs ran on
  another machine kind than this one is refused (SplitSeed), so that new studies stay blocked by machine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import t as student_t

from grae.compare.stats import Interval, crossed_interval

if TYPE_CHECKING:
    from grae.compare.grid import CompareConfig
    from grae.compare.results import StudyResults


def machine_kind(label: str) -> str:
    """A device label without its thread or process count: ``"cpu (AMD EPYC, 1 thread)"`` → ``"cpu (AMD EPYC)"``."""
    label = re.sub(r" × \d+ processes$", "", label.strip())
    return re.sub(r", \d+ threads?\)$", ")", label)


def job_machines(results: StudyResults) -> dict[str, dict[int, tuple[str | None, bool]]]:
    """method → seed → (machine kind or None, whether declared by ``unrecorded_devices`` rather than recorded)."""
    declared = {int(s): kind for s, kind in (results.study.unrecorded_devices or {}).items()}
    out: dict[str, dict[int, tuple[str | None, bool]]] = {}
    for method, by_seed in results.jobs.items():
        for seed, job in by_seed.items():
            if job.device is not None:
                out.setdefault(method, {})[seed] = (machine_kind(job.device), False)
            else:
                out.setdefault(method, {})[seed] = (declared.get(seed), seed in declared)
    return out


@dataclass
class Blocking:
    """Per seed the machine kinds of its arms (kind → methods); ``split``: seeds with two kinds or more;
    ``unknown``: seeds with a job of no known kind; ``declared``: jobs whose kind the study declared."""

    by_seed: dict[int, dict[str, list[str]]]
    unknown: dict[int, list[str]]
    declared: int

    @property
    def split(self) -> list[int]:
        return [s for s, kinds in self.by_seed.items() if len(kinds) > 1]

    @property
    def kinds(self) -> list[str]:
        return sorted({k for kinds in self.by_seed.values() for k in kinds})


def blocking(results: StudyResults) -> Blocking:
    """Which machine kind each seed's arms ran on (module docstring)."""
    machines = job_machines(results)
    by_seed: dict[int, dict[str, list[str]]] = {}
    unknown: dict[int, list[str]] = {}
    for method, by_s in machines.items():
        for seed, (kind, _) in by_s.items():
            if kind is None:
                unknown.setdefault(seed, []).append(method)
            else:
                by_seed.setdefault(seed, {}).setdefault(kind, []).append(method)
    declared = sum(d for by_s in machines.values() for _, d in by_s.values())
    return Blocking(dict(sorted(by_seed.items())), dict(sorted(unknown.items())), declared)


def blocking_line(check: Blocking) -> str:
    """The report's one-line machine check."""
    if not check.by_seed:
        return "- machines: no job recorded what trained it (nor does the study declare it): the blocking is unchecked"
    declared = (f" ({check.declared} job{'s' * (check.declared != 1)} trained before grae recorded the device: "
                "kind from the study's `unrecorded_devices`)" if check.declared else "")
    problems = []
    for seed in check.split:
        problems.append(f"seed {seed} is split (" + "; ".join(f"{', '.join(methods)} on {kind}"
                                                              for kind, methods in check.by_seed[seed].items()) + ")")
    problems += [f"seed {seed}: no known machine for {', '.join(methods)}" for seed, methods in check.unknown.items()]
    if not problems:
        return (f"- machines: every seed's arms ran on one machine kind{declared}: "
                + "; ".join(f"{kind}: seed{'s' * (len(seeds) != 1)} {', '.join(map(str, seeds))}"
                            for kind, seeds in _seeds_by_kind(check).items()))
    return (f"- machines: **not blocked by machine**{declared}: " + "; ".join(problems)
            + " — its paired differences compare machines as well as arms")


def _seeds_by_kind(check: Blocking) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for seed, kinds in check.by_seed.items():
        for kind in kinds:
            out.setdefault(kind, []).append(seed)
    return out


@dataclass
class MachineContrast:
    """One quantity of one arm by machine kind: per kind its crossed interval (and seeds), and between the first
    two kinds (most seeds first) the difference of their means with its pooled-t interval, t and ν."""

    by_kind: dict[str, tuple[Interval, list[int]]]
    excluded: list[int]  # seeds whose arm and baseline ran on different kinds (or an unknown one)
    difference: Interval | None = None
    t: float | None = None
    dof: int | None = None


def interaction(values: np.ndarray, seeds: list[int], kind_of: dict[int, str | None], level: float = 0.95,
                ) -> MachineContrast:
    """``values[seeds, problems]`` of one paired quantity, ``kind_of`` the machine kind both jobs of each seed ran
    on (None: split or unknown; excluded). Module docstring."""
    groups: dict[str, list[int]] = {}
    for row, seed in enumerate(seeds):
        if kind_of.get(seed) is not None:
            groups.setdefault(kind_of[seed], []).append(row)
    groups = dict(sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])))
    by_kind = {kind: (crossed_interval(values[rows][:, :, None], level)[0], [seeds[r] for r in rows])
               for kind, rows in groups.items()}
    contrast = MachineContrast(by_kind, [s for s in seeds if kind_of.get(s) is None])
    if len(groups) < 2:
        return contrast
    (first, second) = list(groups.values())[:2]
    seed_means = values.mean(axis=1)
    a, b = seed_means[first], seed_means[second]
    dof = len(a) + len(b) - 2
    if dof < 1:
        return contrast
    pooled = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof
    se = math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    diff = float(a.mean() - b.mean())
    half = float(student_t.ppf(0.5 + level / 2, dof)) * se
    contrast.difference = Interval(diff, diff - half, diff + half)
    contrast.t = diff / se if se > 0 else math.copysign(math.inf, diff) if diff else 0.0
    contrast.dof = dof
    return contrast


def pair_kinds(results: StudyResults, arm: str, baseline: str) -> dict[int, str | None]:
    """Seed → the kind both the arm's and the baseline's job of that seed ran on; None where they differ or
    either is unknown."""
    machines = job_machines(results)
    out = {}
    for seed, (kind, _) in machines[arm].items():
        other = machines[baseline].get(seed, (None, False))[0]
        out[seed] = kind if kind is not None and kind == other else None
    return out


class SplitSeed(ValueError):
    """A sitting would train a seed's jobs on another machine kind than its finished jobs: one line."""


def this_machine() -> str:
    """The machine kind ``grae train`` would record here: the first CUDA device when there is one, else the CPU."""
    import torch

    from grae.train.run import cpu_name

    return f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else f"cpu ({cpu_name()})"


def finished_kinds(cfg: CompareConfig, seed: int) -> dict[str, list[str]]:
    """Machine kind → the methods of ``seed`` whose finished job ran on it (recorded in ``eval/summary.json``, or
    declared by ``unrecorded_devices``)."""
    import json

    out: dict[str, list[str]] = {}
    for job in cfg.jobs():
        if job.seed != seed or not job.done:
            continue
        device = json.loads((job.output_dir / "eval" / "summary.json").read_text()).get("device")
        kind = machine_kind(device) if device else cfg.unrecorded_devices.get(seed)
        if kind is not None:
            out.setdefault(kind, []).append(job.method)
    return out


def check_sitting(cfg: CompareConfig, pending_seeds: list[int], here: str) -> None:
    """Studies block by machine: SplitSeed when a seed this sitting would train has finished jobs on a machine
    kind other than ``here`` (the sitting's own), before anything runs."""
    for seed in dict.fromkeys(pending_seeds):
        others = {kind: methods for kind, methods in finished_kinds(cfg, seed).items() if kind != machine_kind(here)}
        if others:
            kind, methods = next(iter(others.items()))
            raise SplitSeed(f"seed {seed}: {', '.join(methods)} trained on {kind}, this machine is {machine_kind(here)}; "
                            "every arm of a seed trains on one machine kind (studies block by machine, docs/compare.md): "
                            f"run seed {seed}'s other jobs there, or leave it out with --seeds")
