"""Compare configuration: a base ``grae train`` config, named methods (with optional sweeps) and seeds.

Example (``studies/*.yaml``)::

    base: default                     # train recipe name or path; every job starts from it
    overrides: {max_steps: 150}       # applied to every job (dotted keys)
    methods:
      grpo: {estimator: grpo}
      agrae: {estimator: agrae, sweep: {estimator_params.alpha: [0.25, 0.5, 1.0]}}
    seeds: [0, 1, 2, 3, 4]
    baseline: grpo
    output_dir: runs/compare/main
    jobs_dir: runs/compare/jobs       # optional (default <output_dir>/jobs): a job pool shared by studies
    parallel: 1                       # jobs at once (each gets cores / parallel torch threads)
    bootstrap: 2000
    frontier: [0.1, 0.25, 0.5, 0.75, 1.0]   # default; checkpoint fractions evaluated ([] = off)
    frontier_methods: [grpo]          # optional (default: every method): the methods evaluated at those fractions
    frontier_eval: {num_problems: 200, n: 64}  # optional: cheaper held-out settings for those evaluations
    eval: {exact: true}               # optional: compare evaluates every model itself (below)
    paired_against: [base, oracle]    # optional: fixed references paired per problem (oracle: needs eval.exact)
    # paired_against: [base, temperature_frontier]  # the base's temperature frontier F (needs eval.exact)
    temperatures: [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]  # optional: F's grid (this is the default)
    selected_by: studies/pilot.yaml   # optional: the selecting study (or its seeds); overlapping seeds are refused
    verdict: "..."                    # optional: the conclusion; refused below MIN_VERDICT_SEEDS seeds (a pilot)
    rule: {keeps_passk: {k: 16, pass1_margin_vs_baseline: -2, passk_margin_vs_base: -1}}  # optional (grae.compare.rules)
    # or: rule: {non_inferior_every_k: {arm: agrae, margin_vs_baseline: -1, baseline_pass1_margin_vs_base: 3}}
    # or: rule: {beats_baseline: {ks: [1, 64, 256], frontier_ks: [64, 256], rare_stratum: totals=excursion}}
    unrecorded_devices: {300: cpu (AMD EPYC)}  # optional: seed -> machine kind of jobs trained before grae
                                      # recorded their device (grae.compare.machines)
    mechanism: {steps: [0, 100, 200], ks: [1, 64, 256], band_holdout: runs/band_holdout.jsonl}  # optional: per
                                      # stratum rows, strategy mass, collapse ratio (grae.compare.mechanism)

``eval:`` (``{exact, num_problems, n, heldout_params}``, instead of ``frontier_eval``): compare evaluates every model of
the study itself with these held-out settings — the base model (``<output_dir>/base/frontier.jsonl``),
every frontier checkpoint and every job's final model (``eval/frontier/step-N.jsonl``) — and the
report's tables, intervals and frontier read these rows instead of the jobs' own ``eval/after.jsonl``.
``exact: true`` is the evaluation of ``grae eval --exact`` (answer enumeration, tasks with a finite
answer set; ``n`` is then the largest k, default the jobs' own ``eval.n``); the report then prints the
reference policies (format-only oracle, near-miss guesser) beside the methods. Finished jobs are not
retrained: adding ``eval:`` to a study re-evaluates its checkpoints.

A sweep expands a method into one method per value, named ``agrae[alpha=0.25]``. Every job's
config is validated (``grae.train.config``) before anything runs.

Studies that share a ``jobs_dir`` share runs: a job lives in ``<jobs_dir>/<method>/seed<s>`` and is
reused by any study whose job of that name has the same train config. A job directory that holds a
different config (its ``job.yaml``) is an error, never silently reused; one difference is none: a job
trained with the no-signal stop armed serves a study that says ``continue_without_signal: true``
(grae.train.rundir.job_changes).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grae.compare.frontier import DEFAULT_FRACTIONS, EVAL_KEYS, check_fractions, keep_steps
from grae.compare.mechanism_spec import check_mechanism
from grae.compare.rules.spec import FRONTIER_TESTS, RULE_SPECS, study_exact_by
from grae.train.config import ConfigError, TrainConfig, load_config, to_dict
from grae.yaml_io import load_yaml

#: every key of a study file: (the YAML types it takes, what it is); null is taken where a key is optional
STUDY_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "base": ((str,), "a train recipe name or a YAML path"),
    "overrides": ((dict,), "a mapping of train-config keys applied to every job"),
    "methods": ((dict,), "a mapping: method name -> train-config overrides"),
    "seeds": ((list,), "a list of distinct integers"),
    "baseline": ((str,), "the name of one of the methods"),
    "output_dir": ((str,), "a directory path"),
    "jobs_dir": ((str,), "a directory path"),
    "parallel": ((int,), "an integer >= 1 (jobs at once)"),
    "bootstrap": ((int,), "an integer >= 1 (bootstrap draws, e.g. 2000)"),
    "title": ((str,), "text"),
    "notes": ((str,), "text"),
    "frontier": ((list,), "a list of training fractions in (0, 1]"),
    "frontier_methods": ((list,), "a list of method names (the methods whose checkpoints are evaluated)"),
    "frontier_eval": ((dict,), "a mapping {num_problems: N, n: N}"),
    "eval": ((dict,), "a mapping {exact: true|false, num_problems: N, n: N}"),
    "paired_against": ((str, list), "a reference name or a list of them"),
    "temperatures": ((list,), "a list of temperatures, e.g. [0.2, 0.3, …, 1.2] (the base's temperature frontier)"),
    "selected_by": ((list, str), "a list of seeds or the selecting study's config path"),
    "verdict": ((str,), "text"),
    "rule": ((dict,), "a mapping {keeps_passk: {k: 16, pass1_margin_vs_baseline: -2, passk_margin_vs_base: -1}} or "
                      "{non_inferior_every_k: {arm: A, margin_vs_baseline: -1, baseline_pass1_margin_vs_base: 3}}"),
    "unrecorded_devices": ((dict,), "a mapping seed -> machine kind (e.g. {300: 'cpu (AMD EPYC)'}) for jobs trained "
                                    "before grae recorded their device"),
    "mechanism": ((dict,), "a mapping {steps: [0, 100, 200], ks: [1, 64, 256], band_holdout: PATH} (every key "
                           "optional; grae.compare.mechanism)"),
}
KEYS = set(STUDY_SCHEMA)
REQUIRED = ("base", "methods", "seeds", "baseline", "output_dir")
#: keys with a lower bound: key -> least value
MINIMUM = {"parallel": 1, "bootstrap": 1}
#: fixed references every trained arm can be paired against per problem (``paired_against``)
REFERENCES = ("base", "oracle", "temperature_frontier")
#: the fewest seeds per method from which a report draws a verdict; below it the study is a pilot
MIN_VERDICT_SEEDS = 3


@dataclass
class Job:
    method: str
    seed: int
    overrides: dict[str, Any]
    output_dir: Path

    @property
    def done(self) -> bool:
        return (self.output_dir / "eval" / "summary.json").exists()


@dataclass
class CompareConfig:
    base: str
    methods: dict[str, dict[str, Any]]
    seeds: list[int]
    baseline: str
    output_dir: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    parallel: int = 1
    bootstrap: int = 2000
    title: str = ""
    notes: str = ""
    source: str = ""
    jobs_dir: Path | None = None
    #: training fractions at which every job is evaluated (grae.compare.frontier); [] = no frontier
    frontier: list[float] = field(default_factory=lambda: list(DEFAULT_FRACTIONS))
    #: the methods evaluated at the frontier's fractions (the others only at 100 % with ``eval``); None = every method
    frontier_methods: list[str] | None = None
    #: held-out settings of the frontier evaluations ({num_problems, n}); None = each job's own eval settings
    frontier_eval: dict[str, Any] | None = None
    #: compare's own held-out evaluation of every model ({exact, num_problems, n}; module docstring); None = the jobs' own
    eval: dict[str, Any] | None = None
    #: fixed references the arms are paired against per problem (``REFERENCES``): "base", and "oracle" = the
    #: base's format-only oracle (needs ``eval: {exact: true}``), "temperature_frontier" = the base's temperature
    #: frontier F over ``temperatures`` (grae.compare.temperature_frontier; needs ``eval: {exact: true}``)
    paired_against: list[str] = field(default_factory=lambda: ["base"])
    #: the temperature frontier's grid (None: grae.eval.temperature_frontier.TEMPERATURES)
    temperatures: list[float] | None = None
    #: seeds of the study that selected the candidate(s) under test; this study may not reuse them
    selected_by: list[int] = field(default_factory=list)
    #: the study's conclusion, printed under "Verdict"; refused with fewer than MIN_VERDICT_SEEDS seeds
    verdict: str = ""
    #: the per-arm decision rule (check_rule: ``{"keeps_passk": {...}}`` or ``{"non_inferior_every_k": {...}}``); None = no rule
    rule: dict[str, Any] | None = None
    #: seed → machine kind of the jobs trained before grae recorded their device (grae.compare.machines)
    unrecorded_devices: dict[int, str] = field(default_factory=dict)
    #: the mechanism rows (grae.compare.mechanism_spec.check_mechanism: ``{steps, ks, band_holdout}``); None = none
    mechanism: dict[str, Any] | None = None
    #: whether the final models have a held-out evaluation (``eval``, or the jobs' own); False = a
    #: training-only study, reported from its training logs (set by :func:`load_compare_config`)
    heldout: bool = True

    def evaluation(self) -> dict[str, Any] | None:
        """The held-out settings of compare's own evaluations (frontier checkpoints, and with ``eval`` the
        final models and the base); None = each job's own eval settings."""
        return self.eval or self.frontier_eval

    def evaluated_fractions(self, job: Job | None = None) -> list[float]:
        """The training fractions compare evaluates ``job`` at (any job: None): the frontier's, plus 100 % with
        ``eval``; a method outside ``frontier_methods`` only at 100 % with ``eval``."""
        frontier = self.frontier if job is None or self.frontier_methods is None or job.method in self.frontier_methods else []
        return sorted(set(frontier) | {1.0}) if self.eval else list(frontier)

    def jobs(self) -> list[Job]:
        pool = self.jobs_dir or self.output_dir / "jobs"
        return [Job(m, s, {**self.overrides, **params, "seed": s, "output_dir": str(pool / _slug(m) / f"seed{s}")},
                    pool / _slug(m) / f"seed{s}")
                for m, params in self.methods.items() for s in self.seeds]

    def train_config(self, job: Job) -> TrainConfig:
        """The job's ``grae train`` config; with a frontier, it keeps the model at the frontier's steps."""
        config = load_config(self.base, job.overrides)
        if self.frontier and not config.keep_steps:
            config.keep_steps = keep_steps(config.max_steps, self.frontier)
        return config


def _slug(method: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in method)


def check_job_folders(methods: dict[str, Any]) -> None:
    """Every method gets a folder of its own (``jobs/<slug>/seed<s>``): a name whose folder is no folder (``''``,
    ``.``, ``..``) or two names with one folder (``a/b`` and ``a_b``) are refused; they would share a job, and
    the report would show one run's rows under both names."""
    folders: dict[str, str] = {}
    for name in methods:
        slug = _slug(name)
        if slug in ("", ".", ".."):
            raise ConfigError(f"methods: {name!r} names no folder of its own (jobs/{slug}/…); give the method a name "
                              "with a letter or digit")
        if slug in folders:
            raise ConfigError(f"methods: {folders[slug]!r} and {name!r} would share the job folder jobs/{slug}/ "
                              "(characters other than letters, digits, '-_.=' become '_'); rename one of them")
        folders[slug] = name


def expand_methods(methods: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, spec in methods.items():
        if not isinstance(name, str):
            raise ConfigError(f"methods: method names are text, got {name!r}; quote it ('{name}': …)")
        if not isinstance(spec, dict):
            raise ConfigError(f"methods.{name}: expected a mapping of train-config overrides, got {spec!r}")
        spec = dict(spec)
        sweep = spec.pop("sweep", None)
        flat = flatten(spec)
        if not sweep:
            out[name] = flat
            continue
        if not isinstance(sweep, dict):
            raise ConfigError(f"methods.{name}.sweep: expected a mapping of dotted keys to lists of values, got {sweep!r}")
        for key, values in sweep.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"methods.{name}.sweep.{key}: expected a non-empty list of values, got {values!r}; "
                                  f"a single value belongs beside the sweep ({key}: {values!r})")
        keys = list(sweep)
        for values in itertools.product(*(sweep[k] for k in keys)):
            label = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values))
            out[f"{name}[{label}]"] = {**flat, **dict(zip(keys, values))}
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"estimator_params": {"alpha": 1}}`` → ``{"estimator_params.alpha": 1}`` (dicts become dotted keys)."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_compare_config(path: str | Path) -> CompareConfig:
    try:
        raw = load_yaml(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of compare keys at the top level, got {type(raw).__name__}")
    unknown = set(raw) - KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; valid: {sorted(KEYS)}")
    for key in REQUIRED:
        if key not in raw:
            raise ConfigError(f"{path}: missing {key!r}")
    check_types(raw)
    methods = expand_methods(raw["methods"])
    check_job_folders(methods)
    if raw["baseline"] not in methods:
        raise ConfigError(f"baseline: {raw['baseline']!r} is not one of the methods {sorted(methods)}")
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: expected a list of distinct integers, got {seeds!r}")
    cfg = CompareConfig(base=str(raw["base"]), methods=methods, seeds=seeds, baseline=raw["baseline"],
                        output_dir=Path(raw["output_dir"]), overrides=flatten(raw.get("overrides") or {}),
                        parallel=raw.get("parallel") or 1, bootstrap=raw.get("bootstrap") or 2000,
                        title=raw.get("title") or "", notes=raw.get("notes") or "", source=str(path),
                        jobs_dir=Path(raw["jobs_dir"]) if raw.get("jobs_dir") else None,
                        frontier=_frontier(raw.get("frontier", list(DEFAULT_FRACTIONS))),
                        frontier_eval=_frontier_eval(raw.get("frontier_eval"), "frontier_eval"),
                        eval=_frontier_eval(raw.get("eval"), "eval"))
    cfg.paired_against = _paired_against(raw.get("paired_against", ["base"]), cfg)
    cfg.temperatures = _temperatures(raw.get("temperatures"), cfg)
    cfg.frontier_methods = _frontier_methods(raw.get("frontier_methods"), cfg)
    cfg.selected_by = _selected_by(raw.get("selected_by"), Path(path))
    reused = sorted(set(cfg.selected_by) & set(seeds))
    if reused:
        raise ConfigError(f"seeds: {reused} also selected the candidate (selected_by: {raw['selected_by']!r}); a "
                          "confirmation uses seeds the selection did not see: replace them, e.g. "
                          f"seeds: {_fresh_seeds(seeds, cfg.selected_by)}")
    cfg.verdict = str(raw.get("verdict") or "")
    if cfg.verdict and len(seeds) < MIN_VERDICT_SEEDS:
        raise ConfigError(f"verdict: a study with {len(seeds)} seed(s) is a pilot (fewer than {MIN_VERDICT_SEEDS} seeds "
                          "decide nothing: docs/compare.md); remove verdict, or run at least "
                          f"{MIN_VERDICT_SEEDS} seeds")
    if cfg.eval and cfg.frontier_eval:
        raise ConfigError("eval and frontier_eval: choose one (eval's settings apply to the frontier's checkpoints too)")
    if cfg.eval is not None and not cfg.eval:
        raise ConfigError("eval: {} changes nothing; give {exact: true} and/or {num_problems: N, n: N}, or remove it")
    if (cfg.evaluation() or {}).get("exact"):
        _check_enumerable(cfg)
    evaluated = {}
    for job in cfg.jobs():
        try:
            config = cfg.train_config(job)
        except ConfigError as err:
            raise ConfigError(f"method {job.method!r}: {err}") from None
        check_job_dir(job, config)
        evaluated.setdefault(config.eval.enabled, []).append(job.method)
    if not cfg.eval and len(evaluated) == 2:
        raise ConfigError(f"eval.enabled: false for {sorted(set(evaluated[False]))} but true for "
                          f"{sorted(set(evaluated[True]))}: their final models would not be compared alike; set "
                          "eval.enabled the same for every method, or give the study key eval: {n: N} to evaluate "
                          "every final model with the same settings")
    cfg.heldout = bool(cfg.eval) or True in evaluated
    cfg.mechanism = check_mechanism(raw.get("mechanism"), cfg)
    cfg.rule = check_rule(raw.get("rule"), cfg)
    cfg.unrecorded_devices = _unrecorded_devices(raw.get("unrecorded_devices"), seeds)
    return cfg


def _unrecorded_devices(value, seeds: list[int]) -> dict[int, str]:
    """``unrecorded_devices``: seeds of the study → non-empty machine-kind text."""
    if not value:
        return {}
    for seed, kind in value.items():
        if isinstance(seed, bool) or not isinstance(seed, int) or seed not in seeds:
            raise ConfigError(f"unrecorded_devices: {seed!r} is not a seed of this study ({seeds}); key each machine kind "
                              "by a seed, e.g. {300: 'cpu (AMD EPYC)'}")
        if not isinstance(kind, str) or not kind.strip():
            raise ConfigError(f"unrecorded_devices.{seed}: expected the machine kind as text (a device label without "
                              f"its thread count, e.g. 'cuda (NVIDIA H100 80GB HBM3)'), got {kind!r}")
    return {int(seed): kind.strip() for seed, kind in value.items()}


def check_rule(value: Any, cfg: CompareConfig) -> dict[str, Any] | None:
    """The study's ``rule`` normalised (``{name: {...}}`` with ``min_seeds`` filled in), or None; ConfigError
    naming the key and the fix otherwise. Every rule is checked alike from its spec
    (grae.compare.rules.spec.RULE_SPECS: each key's type, then the rule's own study-level checks)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or not set(value) <= set(RULE_SPECS) or not isinstance(
            next(iter(value.values())), dict):
        raise ConfigError(f"rule: expected {' or '.join(f'{{{name}: {{…}}}}' for name in RULE_SPECS)} (one of the rules "
                          f"grae knows), got {value!r}; e.g. {' or '.join(kind.example for kind in RULE_SPECS.values())}")
    ((name, given),) = value.items()
    kind, spec = RULE_SPECS[name], dict(given)
    unknown = sorted(set(spec) - set(kind.keys))
    if unknown:
        raise ConfigError(f"rule.{name}: unknown key(s) {unknown}; valid: {sorted(kind.keys)}")
    others = [m for m in cfg.methods if m != cfg.baseline]
    for key, (required, what, kind_of) in kind.keys.items():
        if key not in spec:
            if required:
                raise ConfigError(f"rule.{name}.{key}: missing ({what}); e.g. {kind.example}")
            continue
        if not _rule_value_ok(spec[key], kind_of, others):
            raise ConfigError(f"rule.{name}.{key}: expected {what}, got {spec[key]!r}"
                              + (f"; choose among {others}" if kind_of == "method" else ""))
    if "min_seeds" in kind.keys:
        spec.setdefault("min_seeds", MIN_VERDICT_SEEDS)
    if len(cfg.methods) < 2:
        raise ConfigError(f"rule.{name}: decides arms against the baseline; the study has no other method")
    if not cfg.heldout:
        raise ConfigError(f"rule.{name}: reads held-out pass@k; a training-only study has none (add eval: {{…}})")
    kind.check(spec, cfg)
    return {name: spec}


def _rule_value_ok(value: Any, kind_of: str, methods: list[str]) -> bool:
    """Whether a rule key's ``value`` has its type (grae.compare.rules.spec.RuleKey): ``method`` one of ``methods``;
    ``test`` one of FRONTIER_TESTS; ``label`` non-empty text; ``k_list`` a list of distinct counts; ``points`` a
    finite number, ``margin`` one <= 0; ``count`` an integer >= 1, ``power_of_two`` one that is."""
    if kind_of == "method":
        return isinstance(value, str) and value in methods
    if kind_of == "test":
        return value in FRONTIER_TESTS
    if kind_of == "label":
        return isinstance(value, str) and bool(value.strip())
    if kind_of == "k_list":
        return (isinstance(value, list) and bool(value) and len(set(value)) == len(value)
                and all(_rule_value_ok(k, "count", methods) for k in value))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if kind_of in ("points", "margin"):
        return kind_of == "points" or value <= 0
    return isinstance(value, int) and value >= 1 and (kind_of == "count" or not value & (value - 1))


def _frontier_methods(value, cfg: CompareConfig) -> list[str] | None:
    """``frontier_methods``: names among the (expanded) methods, the baseline included when it is given."""
    if value is None:
        return None
    if not all(isinstance(name, str) for name in value) or not value:
        raise ConfigError(f"frontier_methods: expected a non-empty list of method names, got {value!r}")
    unknown = [name for name in value if name not in cfg.methods]
    if unknown:
        raise ConfigError(f"frontier_methods: {unknown} are not methods of this study; choose among {sorted(cfg.methods)}")
    if cfg.baseline not in value:
        raise ConfigError(f"frontier_methods: the baseline {cfg.baseline!r} is missing; its checkpoints are the "
                          f"early-stopping frontier every method is judged against: add it")
    return list(dict.fromkeys(value))


def _paired_against(value, cfg: CompareConfig) -> list[str]:
    """``paired_against``: a reference name or a list of them (:data:`REFERENCES`); "oracle" needs exact rows."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in REFERENCES for n in names):
        raise ConfigError(f"paired_against: expected one of {list(REFERENCES)} or a list of them, got {value!r}")
    if "oracle" in names and not (cfg.eval or {}).get("exact"):
        raise ConfigError("paired_against: oracle needs the base's exact rows (the format-only oracle is the base's "
                          "p / mass per problem): add eval: {exact: true}")
    if "temperature_frontier" in names and not (cfg.eval or {}).get("exact"):
        raise ConfigError("paired_against: temperature_frontier needs every arm's exact p per problem (its distance to "
                          "the base's frontier is taken per seed × problem): add eval: {exact: true}")
    return list(dict.fromkeys(names))


def _temperatures(value, cfg: CompareConfig) -> list[float] | None:
    """``temperatures``: the grid of the base's temperature frontier (``paired_against: temperature_frontier``)."""
    if value is None:
        return None
    from grae.eval.backends import MAX_TEMPERATURE, MIN_TEMPERATURE

    if "temperature_frontier" not in cfg.paired_against:
        raise ConfigError("temperatures: the grid of the base's temperature frontier, which this study does not trace; "
                          "add temperature_frontier to paired_against, or remove temperatures")
    if (len(value) < 2 or len(set(value)) != len(value) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and MIN_TEMPERATURE <= t <= MAX_TEMPERATURE
            for t in value)):
        raise ConfigError(f"temperatures: expected at least two distinct temperatures in [{MIN_TEMPERATURE:g}, "
                          f"{MAX_TEMPERATURE:g}], e.g. [0.2, 0.3, 0.5, 0.7, 1.0, 1.2], got {value!r}")
    return sorted(float(t) for t in value)


def _selected_by(value, source: Path) -> list[int]:
    """``selected_by``: the seeds that selected this study's candidate — a list of integers, or the path of the
    selecting study's config (relative to this config's folder or the working directory), whose seeds are read."""
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        return list(value)
    if not isinstance(value, str):
        raise ConfigError(f"selected_by: expected a list of seeds or the selecting study's config path, got {value!r}")
    for candidate in (source.parent / value, Path(value)):
        if candidate.is_file():
            try:
                seeds = (load_yaml(candidate.read_text()) or {}).get("seeds")
            except (OSError, yaml.YAMLError, AttributeError):
                seeds = None
            if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
                raise ConfigError(f"selected_by: {candidate} has no list of integer seeds")
            return seeds
    raise ConfigError(f"selected_by: no file {value!r} (next to {source} or in the working directory); give the "
                      "selecting study's config path or its seeds as a list")


def _fresh_seeds(seeds: list[int], taken: list[int]) -> list[int]:
    """As many seeds as ``seeds``, keeping those not in ``taken`` and replacing the rest with unused integers."""
    used = set(seeds) | set(taken)
    spare = itertools.count(max(used) + 1)
    return [s if s not in taken else next(spare) for s in seeds]


def check_types(raw: dict[str, Any]) -> None:
    """Each key of a study file has its schema's type (:data:`STUDY_SCHEMA`); one line naming it otherwise."""
    for key, value in raw.items():
        types, what = STUDY_SCHEMA[key]
        if value is None and key not in REQUIRED:
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types) or (
                key in MINIMUM and value < MINIMUM[key]):
            raise ConfigError(f"{key}: expected {what}, got {value!r}")


def _frontier(value) -> list[float]:
    try:
        return check_fractions(value)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _frontier_eval(value, key: str) -> dict[str, Any] | None:
    """``frontier_eval``/``eval``: ``{num_problems: N, n: N, exact: bool}`` (every key optional)."""
    if value is None:
        return None
    sizes = {k: v for k, v in value.items() if k not in ("exact", "heldout_params")} if isinstance(value, dict) else None
    if sizes is None or set(value) - set(EVAL_KEYS) or not isinstance(value.get("exact", False), bool) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes.values()):
        raise ConfigError(f"{key}: expected {{num_problems: N, n: N, exact: true|false, heldout_params: {{…}}}} "
                          f"(positive integers, every key optional), got {value!r}")
    heldout_params = value.get("heldout_params")
    if heldout_params is not None and (not isinstance(heldout_params, dict) or not heldout_params
                                       or not all(isinstance(k, str) for k in heldout_params)):
        raise ConfigError(f"{key}.heldout_params: expected a non-empty mapping of task parameters merged over the jobs' "
                          f"task.params for the held-out problems (e.g. {{totals: any, heldout_strata: [totals]}}), got "
                          f"{heldout_params!r}")
    return dict(value)


def _check_enumerable(cfg: CompareConfig) -> None:
    """``eval.exact`` (or ``frontier_eval.exact``) needs a task with a finite answer set or one gold completion
    (:func:`study_exact_by`); the format-only oracle exists only for an answer set; one line naming the field
    otherwise."""
    from grae.eval.exact import BY_GOLD

    if study_exact_by(cfg) == BY_GOLD and "oracle" in cfg.paired_against:
        raise ConfigError("paired_against: oracle: the task's exact p teacher-forces its one gold completion, so there "
                          "is no answer format to renormalise to (p / mass = 1); remove oracle")
    for job in cfg.jobs():  # exact pass@k is over the sampling distribution: greedy decoding has none
        temperature = cfg.train_config(job).eval.temperature
        if temperature <= 0:
            raise ConfigError(f"eval.exact: method {job.method!r} evaluates at eval.temperature {temperature} (greedy), "
                              "which has no sampling distribution to enumerate; set eval.temperature > 0 or drop "
                              "eval.exact")


def check_job_dir(job: Job, config: TrainConfig) -> None:
    """A job directory may only be reused by a job with the same train config (shared ``jobs_dir``), and
    only hold that job's run (:mod:`grae.train.rundir`): checked for every job before any runs."""
    from grae.train.rundir import changes, claim, job_changes, owner

    where = f"method {job.method!r} seed {job.seed}: {job.output_dir}"
    fix = "rename the method, or use another output_dir/jobs_dir"
    recorded = job.output_dir / "job.yaml"
    if recorded.exists() and job_changes(load_yaml(recorded.read_text()), to_dict(config)):
        raise ConfigError(f"{where} holds a run with a different config ({recorded}); {fix}")
    try:
        record = owner(job.output_dir)
        changed = changes(record, to_dict(config)) if record else []
        if not job.done:  # an unfinished job is resumed into its folder: the folder must hold this run or nothing
            claim(job.output_dir, to_dict(config), resume=True, overwrite=False, dry_run=True)
    except ConfigError as err:
        raise ConfigError(f"method {job.method!r} seed {job.seed}: {err}; {fix}") from None
    if changed:
        raise ConfigError(f"{where} holds run {record['run_id']} with a different config ({'; '.join(changed)}); {fix}")
