"""A study's results, gathered once into one typed table: :class:`StudyResults`.

:func:`gather` reads a finished study's run directory once — every job's final held-out counts (exact
or sampled), its training log (the per-step series the report reads), budget and memorisation
diagnostics, the frontier checkpoints, the base model's rows and its reference policies (format-only
oracle, near-miss guesser), the compare invocations — with each job's train config resolved once. The
report's sections and plots (:mod:`grae.compare.report`) are pure functions of this table, and
``summary.json`` carries it under ``"results"`` (:func:`write_summary`), so ``grae compare
SUMMARY.json --report-only`` re-renders a report without reading any row again (:func:`from_summary`).

What the table keeps, and what it does not:

* per-problem counts of every final model and of the base (``n`` and ``c``, or for exact rows ``p`` and
  ``mass``; ``c = p·n``): the paired differences and Holm tables need them;
* a frontier checkpoint's crossed interval per k over the seeds every checkpoint of the method has, and
  each seed's smallest ``n`` (:class:`FrontierCheckpoint`); per-problem counts only for the baseline's
  checkpoints (the rule's distance above its frontier needs them per seed × problem) — every method's would
  multiply the table's size by the number of checkpoints;
* per training step the logged values of the keys the report reads (:data:`METRIC_KEYS`), exact.

Floats are written with ``repr`` (JSON round-trips them exactly), so a report rendered from the table
and one rendered from ``summary.json`` are the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from grae.compare.counts_json import _is_int, _short, counts_from_json, counts_to_json
from grae.compare.mechanism import Mechanism, gather_mechanism, mechanism_from_json, mechanism_to_json
from grae.compare.stats import Interval, method_passk
from grae.eval.stats import ProblemCounts
from grae.metrics import powers_of_two

if TYPE_CHECKING:
    from grae.compare.grid import CompareConfig, Job
    from grae.train.config import TrainConfig

#: version of the table's JSON form (``summary.json`` → ``results``)
VERSION = 1
#: training-log keys the report reads: the dynamics table and plot (DYNAMICS), pass@k on the training
#: batches (``reward_mean``, ``frac_all_wrong``) and where the update goes (grae.compare.training.ALLOCATION)
DYNAMICS_KEYS = ("reward_mean", "entropy", "acr", "frac_all_correct", "frac_all_wrong", "adv_neg_mass")
ALLOCATION_KEYS = ("omega", "agrae/suppression", "adv_abs_sum_p[0.00,0.25)", "adv_abs_sum_p[0.75,1.00)")
#: estimators that act only on some steps log 1 on a step they acted and 0 on one they did not (AVSPO: ACR_t > τ_t,
#: Eq. 13 of He et al.); the collapse table counts them (grae.compare.mechanism_report.collapse_lines)
GATE_KEYS = ("avspo/active",)
METRIC_KEYS = DYNAMICS_KEYS + ALLOCATION_KEYS + GATE_KEYS
#: the record of the ``grae compare`` sittings that ran jobs (``<output_dir>/invocations.jsonl``): a row
#: per finished job (``started``: the sitting's start, ``wall_seconds`` since then, ``jobs_run``), so a
#: sitting stopped before its end keeps the jobs it finished (older records: one row per sitting)
INVOCATIONS = "invocations.jsonl"
#: the base model's row files a report may read (``<output_dir>/base/``)
BASE_FILES = ("frontier.jsonl", "before.jsonl")


@dataclass
class StudyInfo:
    """What the report says about the study itself (from its config, resolved once)."""

    title: str
    notes: str
    verdict: str
    source: str
    methods: list[str]
    seeds: list[int]
    baseline: str
    bootstrap: int
    eval: dict[str, Any] | None
    frontier: list[float]
    paired_against: list[str]
    heldout: bool
    num_jobs: int
    #: completions per optimiser step and the group size G (the first job's TRL settings)
    per_step: int
    group_size: int
    #: the per-arm decision rule (``rule:`` in the study; grae.compare.rules), None when the study has none
    rule: dict[str, Any] | None = None
    #: whether the study's jobs live in a ``jobs_dir`` other studies may share (None: a table from before
    #: grae recorded it)
    shared_jobs_dir: bool | None = None
    #: seed → machine kind of the jobs that trained before grae recorded their device (study key
    #: ``unrecorded_devices``; grae.compare.machines); None when the study declares none
    unrecorded_devices: dict[str, str] | None = None


@dataclass
class JobResult:
    """One (method, seed) job."""

    final: ProblemCounts | None  # held-out counts of the final model; None in a training-only study
    metrics: dict[str, list]  # METRIC_KEYS → one value per logged step (None where the step lacks it)
    train_seconds: float
    #: the steps it trained (``eval/summary.json``: the trainer's last step), what the report prints
    steps: int | None
    generated: int | None
    #: the job's own sampled held-out counts (``eval/after.jsonl``) in an exact study: exact − sampled
    sampled: ProblemCounts | None = None
    #: train vs held-out gap and answer leakage from ``eval/after.jsonl`` (grae.eval.diagnostics)
    memorisation: dict[str, float] | None = None
    #: what trained it (``eval/summary.json``'s ``device``, grae.train.run.device_label); None for a job
    #: trained before grae recorded it
    device: str | None = None
    #: the machine's load its wall time ran under (``eval/summary.json``'s ``load``, grae.train.run.load_label)
    load: str | None = None
    #: the summed ``step_time`` of every logged step (``metrics.jsonl``: each process's steps); None in tables
    #: that do not record it
    logged_seconds: float | None = None
    #: the ``max_steps`` its train config asks (a job stopped by a budget trains fewer, ``steps``); None in tables
    #: that do not record it
    max_steps: int | None = None

    @property
    def resumed_uncounted(self) -> bool:
        """A run resumed before grae counted an earlier process's time in ``train_seconds``: its
        logged steps took longer than ``train_seconds`` says."""
        return self.logged_seconds is not None and self.logged_seconds > self.train_seconds

    @property
    def counted_seconds(self) -> float:
        """The training time the budget counts: ``train_seconds``, or for a run resumed before grae counted the
        earlier process, its logged step times of every process (a lower bound)."""
        return self.logged_seconds if self.resumed_uncounted else self.train_seconds

    @property
    def logged_steps(self) -> int:
        return max((len(v) for v in self.metrics.values()), default=0)

    def series(self, key: str) -> list:
        return self.metrics.get(key) or [None] * self.logged_steps


@dataclass
class FrontierCheckpoint:
    """One method at one training fraction: each seed's smallest ``n`` (``n_min``) and the crossed
    interval per k (powers of two up to the shared seeds' smallest ``n``) over the seeds that every
    checkpoint of the method has (``shared``)."""

    n_min: dict[int, int]
    shared: list[int]
    passk: dict[int, Interval]
    #: the baseline's checkpoints only: each seed's per-problem counts (the frontier distance's cells,
    #: grae.compare.rules.frontier_distance); None for the other methods and in tables that lack them
    counts: dict[int, ProblemCounts] | None = None


@dataclass
class StudyResults:
    study: StudyInfo
    #: method → seed → job, in the study's order
    jobs: dict[str, dict[int, JobResult]]
    #: the base model's counts per row file of ``<output_dir>/base/`` (BASE_FILES)
    base_files: dict[str, ProblemCounts] = field(default_factory=dict)
    #: the base's reference policies when its report rows are exact (grae.eval.exact.reference_counts)
    references: dict[str, ProblemCounts] = field(default_factory=dict)
    #: method → fraction → checkpoint
    frontier: dict[str, dict[float, FrontierCheckpoint]] = field(default_factory=dict)
    #: ``invocations.jsonl``'s rows (INVOCATIONS)
    invocations: list[dict[str, Any]] = field(default_factory=list)
    #: the mechanism rows' probes, strata and advantage mass (study key ``mechanism``); None without it
    mechanism: Mechanism | None = None

    @property
    def base(self) -> ProblemCounts | None:
        """The base model's counts the held-out tables use: compare's own evaluation with ``eval``, the
        shared base evaluation otherwise."""
        return self.base_files.get("frontier.jsonl" if self.study.eval else "before.jsonl")

    def finals(self, method: str) -> dict[int, ProblemCounts]:
        return {seed: job.final for seed, job in self.jobs[method].items()}

    def ks(self) -> list[int]:
        """Powers of two up to the smallest ``n`` of any final model."""
        return powers_of_two(min(int(j.final.n.min()) for by_seed in self.jobs.values() for j in by_seed.values()))


def gather(cfg: CompareConfig) -> StudyResults:
    """Read a finished study once (module docstring)."""
    from grae.io import read_jsonl

    jobs = cfg.jobs()
    configs = {(job.method, job.seed): cfg.train_config(job) for job in jobs}
    trl = configs[jobs[0].method, jobs[0].seed].trl
    info = StudyInfo(title=cfg.title, notes=cfg.notes, verdict=cfg.verdict, source=cfg.source, methods=list(cfg.methods),
                     seeds=list(cfg.seeds), baseline=cfg.baseline, bootstrap=cfg.bootstrap, eval=cfg.eval,
                     frontier=list(cfg.frontier), paired_against=list(cfg.paired_against), heldout=cfg.heldout,
                     num_jobs=len(jobs), per_step=trl.get("per_device_train_batch_size", 8)
                     * trl.get("gradient_accumulation_steps", 1), group_size=int(trl.get("num_generations", 8)),
                     rule=cfg.rule, shared_jobs_dir=cfg.jobs_dir is not None,
                     unrecorded_devices={str(s): kind for s, kind in cfg.unrecorded_devices.items()} or None)
    base_rows = {name: _rows(cfg.output_dir / "base" / name) for name in BASE_FILES}
    base_files = {name: _counts(rows) for name, rows in base_rows.items() if rows is not None}
    invocations = checked_invocations(read_jsonl(cfg.output_dir / INVOCATIONS, missing_ok=True), info,
                                      str(cfg.output_dir / INVOCATIONS))
    results = StudyResults(info, {}, base_files, invocations=invocations)
    base_name = "frontier.jsonl" if cfg.eval else "before.jsonl"
    if results.base is not None and results.base.exact:
        from grae.eval.exact import reference_counts

        results.references = reference_counts(results.base, base_rows[base_name])
    if "temperature_frontier" in cfg.paired_against:
        from grae.compare.temperature_frontier import read_base_temperatures

        results.base_files.update(read_base_temperatures(cfg.output_dir / "base" / "temperature_frontier.json"))
    for job in jobs:
        results.jobs.setdefault(job.method, {})[job.seed] = _job_result(cfg, job, configs[job.method, job.seed],
                                                                        base_rows["before.jsonl"])
    if cfg.frontier:
        results.frontier = _frontier(cfg, jobs, configs[jobs[0].method, jobs[0].seed].max_steps)
    if cfg.mechanism:
        results.mechanism = gather_mechanism(cfg)
    return results


def job_names(study: StudyInfo) -> set[str]:
    """The names ``invocations.jsonl`` gives the study's jobs (``<method>/seed<s>``, grae.compare.runner.run_jobs)."""
    return {f"{m}/seed{s}" for m in study.methods for s in study.seeds}


def checked_invocations(rows: Any, study: StudyInfo, where: str) -> list[dict[str, Any]]:
    """``invocations.jsonl``'s rows (:data:`INVOCATIONS`), each checked: ``started`` and ``wall_seconds`` finite
    numbers (``wall_seconds >= 0``), ``jobs_run`` a list of the study's job names. Anything else raises
    ``ValueError`` naming ``where`` and the row: the report's wall time is never computed from junk."""
    if not isinstance(rows, list):
        raise ValueError(f"{where}: expected a list of invocation rows, got {_short(rows)}")
    names = job_names(study)
    for i, row in enumerate(rows, start=1):
        here = f"{where}: row {i}"
        if not isinstance(row, dict):
            raise ValueError(f"{here}: expected {{started, wall_seconds, jobs_run}}, got {_short(row)}")
        for key in ("started", "wall_seconds"):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or (
                    key == "wall_seconds" and value < 0):
                raise ValueError(f"{here}: {key} is a finite number{' >= 0' if key == 'wall_seconds' else ''}, got "
                                 f"{_short(value)}")
        run = row.get("jobs_run")
        if not isinstance(run, list) or not all(isinstance(j, str) for j in run):
            raise ValueError(f"{here}: jobs_run is a list of job names (method/seedN), got {_short(run)}")
        foreign = [j for j in run if j not in names]
        if foreign:
            raise ValueError(f"{here}: jobs_run names {foreign[0]!r}, not a job of this study "
                             f"({len(study.methods)} methods × seeds {study.seeds})")
    return rows


def _check_design(study: StudyInfo, jobs: dict[str, dict[int, JobResult]],
                  frontier: dict[str, dict[float, FrontierCheckpoint]]) -> None:
    """The table's jobs are exactly the study's methods × seeds (and its frontier seeds among them): a table with
    a seed removed or added would render other numbers under the study's seed list."""
    methods, seeds = study.methods, study.seeds
    if (not isinstance(seeds, list) or not seeds or not all(_is_int(s) for s in seeds) or len(set(seeds)) != len(seeds)
            or not isinstance(methods, list) or not methods or len(set(methods)) != len(methods)):
        raise ValueError(f"results.study: seeds and methods are non-empty lists without repeats, got seeds "
                         f"{_short(seeds)}, methods {_short(methods)}")
    if set(jobs) != set(methods):
        raise ValueError(f"results.jobs: methods {list(jobs)}, the study's are {list(methods)}")
    for m, by_seed in jobs.items():
        if sorted(by_seed) != sorted(seeds):
            missing, extra = sorted(set(seeds) - set(by_seed)), sorted(set(by_seed) - set(seeds))
            raise ValueError(f"results.jobs.{m}: seeds {sorted(by_seed)}, the study's are {sorted(seeds)}"
                             + (f" (missing {missing})" if missing else "") + (f" (not in it {extra})" if extra else ""))
    if study.num_jobs != len(methods) * len(seeds):
        raise ValueError(f"results.study.num_jobs: {study.num_jobs}, the study has {len(methods)} × {len(seeds)} jobs")
    for m, by_f in frontier.items():
        for f, cp in by_f.items():
            outside = sorted({*cp.n_min, *cp.shared, *(cp.counts or {})} - set(seeds))
            if m not in methods or outside:
                raise ValueError(f"results.frontier.{m}.{f}: " + (f"seeds {outside} are not the study's {seeds}"
                                                                  if outside else "not a method of the study"))


def _rows(path: Path) -> list[dict] | None:
    from grae.eval.records import read_rows

    return read_rows(path) if path.exists() else None


def _counts(rows: list[dict]) -> ProblemCounts:
    from grae.eval.stats import count_problems

    return count_problems(rows)


def _job_result(cfg: CompareConfig, job: Job, config: TrainConfig, base_rows: list[dict] | None) -> JobResult:
    from grae.train.rundir import read_metrics

    rows = read_metrics(job.output_dir / "metrics.jsonl")
    metrics = {key: [r.get(key) for r in rows] for key in DYNAMICS_KEYS}
    metrics |= {key: [r.get(key, r.get(f"grae/{key}")) for r in rows] for key in ALLOCATION_KEYS + GATE_KEYS}
    metrics = {k: v for k, v in metrics.items() if any(x is not None for x in v)}
    if rows and not metrics:  # keep the number of logged steps
        metrics = {DYNAMICS_KEYS[0]: [None] * len(rows)}
    summary = json.loads((job.output_dir / "eval" / "summary.json").read_text())
    after = _rows(job.output_dir / "eval" / "after.jsonl")
    result = JobResult(final=final_counts(cfg, job, config) if cfg.heldout else None, metrics=metrics,
                       train_seconds=summary.get("train_seconds", float("nan")), steps=summary.get("steps"),
                       generated=summary.get("generated_completions"), device=summary.get("device"),
                       load=summary.get("load"), max_steps=config.max_steps,
                       logged_seconds=float(sum(r.get("step_time") or 0.0 for r in rows)) if rows else None)
    if after is not None:
        if (cfg.eval or {}).get("exact"):
            result.sampled = _counts(after)
        result.memorisation = _memorisation(config, rows, after, base_rows)
    return result


def final_counts(cfg: CompareConfig, job: Job, config: TrainConfig) -> ProblemCounts:
    """The final model's held-out counts: the job's own evaluation (``eval/after.jsonl``), or with the
    study key ``eval`` compare's evaluation of the final model (``eval/frontier/step-<max_steps>``)."""
    from grae.compare.frontier import counts_from_record, curve_path, rows_path, step_done, step_settings

    if not cfg.eval:
        return _counts(_rows(job.output_dir / "eval" / "after.jsonl") or [])
    rows = rows_path(job.output_dir, config.max_steps)
    if not step_done(rows, step_settings(config, cfg.eval)):
        raise FileNotFoundError(f"{job.method} seed {job.seed}: no rows of the study's eval settings {cfg.eval} for "
                                f"its final model ({curve_path(rows)}); run grae compare without --report-only")
    return counts_from_record(json.loads(curve_path(rows).read_text()), str(curve_path(rows)))


def _memorisation(config: TrainConfig, metrics: list[dict], after: list[dict],
                  base_rows: list[dict] | None) -> dict[str, float]:
    """Train vs held-out gap and answer leakage of one job (grae.eval.diagnostics); leakage is nan and the
    base's None when the task's training answers cannot be listed."""
    from grae.eval.diagnostics import answer_leakage, train_heldout_gap

    try:
        train_answers = [e["answer"] for e in config.task.build().train(config.task.train_size,
                                                                       seed=config.seed)]
    except (KeyError, OSError, TypeError, ValueError):  # training answers that cannot be listed
        train_answers = []
    gap = train_heldout_gap(metrics, after)
    return {**gap, "leakage": answer_leakage(after, train_answers)["rate"] if train_answers else float("nan"),
            "base_leakage": answer_leakage(base_rows, train_answers)["rate"]
            if base_rows is not None and train_answers else None}


def _frontier(cfg: CompareConfig, jobs: list[Job], max_steps: int) -> dict[str, dict[float, FrontierCheckpoint]]:
    """Every method's checkpoints (grae.compare.frontier.collect_frontier) as :class:`FrontierCheckpoint`."""
    from grae.compare.frontier import collect_frontier

    out: dict[str, dict[float, FrontierCheckpoint]] = {}
    for method, by_fraction in collect_frontier(jobs, cfg.frontier, max_steps).items():
        shared = sorted(set.intersection(*(set(v) for v in by_fraction.values())))
        for f, per_seed in sorted(by_fraction.items()):
            counts = [per_seed[s] for s in shared]
            passk = method_passk(counts, powers_of_two(min(int(c.n.min()) for c in counts))) if counts else {}
            out.setdefault(method, {})[f] = FrontierCheckpoint({s: int(c.n.min()) for s, c in per_seed.items()},
                                                               shared, passk,
                                                               dict(per_seed) if method == cfg.baseline else None)
    return out


# ---- JSON form -------------------------------------------------------------------------------------------


def interval_json(iv: Interval) -> dict[str, float]:
    return dict(vars(iv))


def to_json(results: StudyResults) -> dict[str, Any]:
    """The table as JSON-ready data (:func:`from_json` reads it back)."""
    first = next((j.final for by_seed in results.jobs.values() for j in by_seed.values() if j.final is not None),
                 results.base)
    problems = list(first.question_ids) if first is not None else []

    def counts(c: ProblemCounts | None):
        return None if c is None else counts_to_json(c, problems)

    return {
        "version": VERSION,
        "study": vars(results.study),
        "problems": problems,
        "jobs": {m: {str(s): {"final": counts(j.final), "sampled": counts(j.sampled), "train_seconds": j.train_seconds,
                              "steps": j.steps, "generated": j.generated, "memorisation": j.memorisation,
                              "metrics": j.metrics, "device": j.device, **({"load": j.load} if j.load else {}),
                              **({"logged_seconds": j.logged_seconds} if j.logged_seconds is not None else {}),
                              **({"max_steps": j.max_steps} if j.max_steps is not None else {})}
                          for s, j in by_seed.items()}
                 for m, by_seed in results.jobs.items()},
        "base_files": {name: counts(c) for name, c in results.base_files.items()},
        "references": {name: counts(c) for name, c in results.references.items()},
        "frontier": {m: {repr(f): {"n_min": {str(s): n for s, n in cp.n_min.items()}, "shared": cp.shared,
                                   "passk": {str(k): interval_json(iv) for k, iv in cp.passk.items()},
                                   **({"counts": {str(s): counts(c) for s, c in cp.counts.items()}}
                                      if cp.counts is not None else {})}
                         for f, cp in by_f.items()} for m, by_f in results.frontier.items()},
        "invocations": results.invocations,
        **({"mechanism": mechanism_to_json(results.mechanism)} if results.mechanism is not None else {}),
    }


def from_json(data: dict[str, Any]) -> StudyResults:
    """The table :func:`to_json` wrote. Every count is checked (:func:`counts_from_json`) and a table of another
    shape raises ``ValueError`` in one line naming the entry: a report is never rendered from numbers no
    evaluation can have produced."""
    if not isinstance(data, dict):
        raise ValueError(f"results: expected the table (a mapping), got {_short(data)}")
    if data.get("version") != VERSION:
        raise ValueError(f"results: version {data.get('version')!r}, this grae reads version {VERSION}; re-run "
                         "grae compare CONFIG --report-only on the study's rows")
    try:
        return _from_checked_json(data)
    except (KeyError, TypeError, AttributeError) as err:
        what = f"missing {err.args[0]!r}" if isinstance(err, KeyError) else " ".join(str(err).split())
        raise ValueError(f"results: not a table grae compare wrote ({what}); re-render it from the study's rows with "
                         "grae compare CONFIG --report-only") from None


def _from_checked_json(data: dict[str, Any]) -> StudyResults:
    problems = data["problems"]
    if not isinstance(problems, list) or not all(isinstance(q, str) for q in problems):
        raise ValueError(f"results.problems: expected a list of question ids, got {_short(problems)}")

    def counts(record, where: str):
        return None if record is None else counts_from_json(record, problems, where)

    def number(value, where: str, *, optional: bool = False):
        if optional and value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise ValueError(f"{where}: expected a finite number >= 0, got {_short(value)}")
        return value

    jobs = {m: {int(s): JobResult(final=counts(j["final"], f"results.jobs.{m}.{s}.final"), metrics=dict(j["metrics"]),
                                  train_seconds=number(j["train_seconds"], f"results.jobs.{m}.{s}.train_seconds"),
                                  steps=number(j["steps"], f"results.jobs.{m}.{s}.steps", optional=True),
                                  generated=number(j["generated"], f"results.jobs.{m}.{s}.generated", optional=True),
                                  sampled=counts(j["sampled"], f"results.jobs.{m}.{s}.sampled"),
                                  memorisation=j["memorisation"], device=j.get("device"), load=j.get("load"),
                                  logged_seconds=number(j.get("logged_seconds"), f"results.jobs.{m}.{s}.logged_seconds",
                                                        optional=True),
                                  max_steps=number(j.get("max_steps"), f"results.jobs.{m}.{s}.max_steps", optional=True))
                 for s, j in by_seed.items()}
            for m, by_seed in data["jobs"].items()}
    frontier = {m: {float(f): FrontierCheckpoint({int(s): n for s, n in cp["n_min"].items()}, list(cp["shared"]),
                                                 {int(k): Interval(**iv) for k, iv in cp["passk"].items()},
                                                 {int(s): counts(c, f"results.frontier.{m}.{f}.counts.{s}")
                                                  for s, c in cp["counts"].items()} if "counts" in cp else None)
                    for f, cp in by_f.items()} for m, by_f in data["frontier"].items()}
    study = StudyInfo(**data["study"])
    _check_design(study, jobs, frontier)
    return StudyResults(study, jobs,
                        {name: counts(c, f"results.base_files.{name}") for name, c in data["base_files"].items()},
                        {name: counts(c, f"results.references.{name}") for name, c in data["references"].items()},
                        frontier, checked_invocations(data["invocations"], study, "results.invocations"),
                        mechanism_from_json(data["mechanism"]) if data.get("mechanism") is not None else None)


def write_summary(path: Path, summary: dict[str, Any], results: StudyResults) -> Path:
    """``summary.json``: the report's numbers (``summary``, indented as before) and the table under
    ``"results"`` (one line: its arrays would take a line per number)."""
    from grae.io import atomic_write_text

    head = json.dumps(summary, indent=2, ensure_ascii=False)
    table = json.dumps(to_json(results), ensure_ascii=False, separators=(",", ":"))
    return atomic_write_text(path, head[:-2] + f',\n  "results": {table}\n}}\n')


def from_summary(path: str | Path) -> StudyResults:
    """The table of a ``summary.json`` written by :func:`write_summary`; a clear error for one without it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read a compare summary ({err})") from None
    if not isinstance(data, dict) or "results" not in data:
        raise ValueError(f"{path}: no 'results' table (written before grae compare kept one, or not a compare "
                         "summary); re-render it from its rows with grae compare CONFIG --report-only")
    try:
        return from_json(data["results"])
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
