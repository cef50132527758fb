"""``grae eval`` as a library call: one model on several tasks into one output directory, resumable.

:func:`evaluate_tasks` does everything the command does but parse options and print: it checks the
settings, resolves the ``--tasks`` entries, refuses (or, with ``overwrite``, replaces) rows of other
weights or settings before the model loads, then samples each task with :func:`grae.eval.runner.run_samples`
(rows already on disk are resumed), writes ``<task>.summary.json``, the combined ``summary.json`` and
``passk.png``. What it reports on the way goes through callbacks; what it refuses raises :class:`EvalError`.

Output directory::

    <task>.jsonl          rows (grae.eval.records)         <task>.run.json   what produced them
    <task>.summary.json   one task's summary               summary.json      every task of this model
    passk.png             pass@k curves of the tasks evaluated by this call
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grae.io import atomic_write_json

from . import runner
from .backends import MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P
from .cost import CostEstimate
from .records import RecordsError, file_stem
from .runner import EvalResult

#: ``progress(task_name, total_samples)``: a context manager giving ``update(samples_done, samples_total)``;
#: an ``update.decoding(tokens, max_tokens, sequences)`` attribute, when present, also hears every decoding
#: step of the hf backend (progress inside a call)
ProgressFactory = Callable[[str, int], AbstractContextManager[Callable[[int, int], None]]]


class EvalError(Exception):
    """An evaluation that cannot start or finish. ``exit_code`` is 2 for settings or an output directory
    it refuses (nothing was changed), 1 for a failure on the way (a model that does not load, unreadable
    rows)."""

    def __init__(self, message: Any, exit_code: int = 1):
        super().__init__(str(message))
        self.exit_code = exit_code


def model_label(model: str) -> str:
    """The default label of ``model``: ``tiny``, a local directory's name (a ``grae train`` run's ``final/``: the
    run's name, not ``final``), or the hub id with ``/`` → ``__``."""
    from .run_heldout import run_directory

    path = Path(model).expanduser()
    if model == "tiny":
        return "tiny"
    if path.exists():
        run = run_directory(path)
        return (run or path).resolve().name
    return model.replace("/", "__")


def local_weights(model: str) -> Path | None:
    """The directory holding ``model``'s weights when they are on disk (the tiny preset, a local path)."""
    if model == "tiny":
        from grae.presets import tiny_model_path

        return Path(tiny_model_path())
    path = Path(model).expanduser()
    return path if path.is_dir() else None


def train_run_files(output: Path) -> Path | None:
    """The ``grae train`` run directory whose own files ``output`` would mix with (``output`` is the run
    directory or its ``eval/``); None otherwise. ``-o runs/x/math`` beside a run's files is fine."""
    from grae.train.rundir import RUN_FILE

    for run in (output, output.parent) if output.name == "eval" else (output,):
        if (run / RUN_FILE).is_file():
            return run
    return None


@dataclass
class PlannedTask:
    """One ``--tasks`` entry, resolved: the :mod:`grae.data` task and the parameters it was built with."""

    entry: str
    task: Any
    params: dict[str, Any]

    @property
    def name(self) -> str:
        return getattr(self.task, "name", self.entry)


@dataclass
class EvalPlan:
    """What :func:`evaluate_tasks` is about to do, known before the model loads."""

    model: str
    identity: str
    label: str
    output: Path
    backend: str
    batch_size: int
    n: int
    temperature: float
    top_p: float
    max_tokens: int | None
    seed: int
    prompt_style: str | None
    tasks: list[PlannedTask]
    #: exact pass@k by answer enumeration (grae.eval.exact) instead of sampling
    exact: bool = False
    #: exact: the memory budget of the candidates' batches (MB; grae.eval.exact.DEFAULT_EXACT_MEMORY_MB)
    exact_memory_mb: float | None = None

    def meta(self, planned: PlannedTask) -> dict[str, Any]:
        """The settings recorded beside a task's rows (and checked when they are resumed)."""
        from .tasks import default_max_tokens

        return {"model": self.model, "identity": self.identity, "label": self.label, "backend": self.backend,
                "temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens or default_max_tokens(planned.task), "batch_size": self.batch_size,
                "task_params": planned.params, "prompt_style": self.prompt_style, "exact": self.exact}

    def rows_path(self, planned: PlannedTask) -> Path:
        return self.output / f"{file_stem(planned.name)}.jsonl"


@dataclass
class TasksResult:
    """What :func:`evaluate_tasks` produced: one :class:`~grae.eval.runner.EvalResult` and summary per task."""

    plan: EvalPlan
    #: the combined ``summary.json`` (every task of this model in the output directory)
    summary_path: Path
    results: dict[str, EvalResult] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``passk.png`` (None when no task was evaluated)
    figure: Path | None = None

    @property
    def rows_paths(self) -> list[Path]:
        return [self.plan.output / f"{file_stem(name)}.jsonl" for name in self.results]


def _check_settings(model: str, *, n: int, temperature: float, top_p: float, max_tokens: int | None,
                    num_problems: int | None, batch_size: int | None, output: Path | None) -> None:
    from .identity import looks_like_missing_path

    bad = [(name, rule, value) for name, value, rule, ok in [
        ("--n", n, ">= 1", n >= 1),
        ("--temperature", temperature, f"0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] (below, the scaled "
         "logits overflow half precision; above, every token is about equally likely)",
         temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE),
        ("--top-p", top_p, f"in [{MIN_TOP_P:g}, 1] (a smaller top-p keeps the most probable token alone, as {MIN_TOP_P:g} "
         "does)", MIN_TOP_P <= top_p <= 1),
        ("--max-tokens", max_tokens, ">= 1", max_tokens is None or max_tokens >= 1),
        ("--num-problems", num_problems, ">= 1", num_problems is None or num_problems >= 1),
        ("--batch-size", batch_size, ">= 1", batch_size is None or batch_size >= 1),
        ("--output", str(output), "a directory name", output is None or str(output).strip() not in ("", "."))] if not ok]
    if bad:
        raise EvalError("; ".join(f"{name} must be {rule}, got {value!r}" for name, rule, value in bad), exit_code=2)
    if looks_like_missing_path(model):
        raise EvalError(f"model {model!r} does not exist (a local directory, a hub id org/name, or a preset: tiny, "
                        "smollm2)", exit_code=2)


def plan_tasks(
    model: str,
    tasks: Sequence[str],
    *,
    n: int = 256,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_tokens: int | None = None,
    num_problems: int | None = None,
    output: str | Path | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    backend: str = "auto",
    prompt_style: str | None = None,
    task_params: dict[str, Any] | None = None,
    label: str | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
    exact: bool = False,
    exact_memory_mb: float | None = None,
    exact_max_candidates: int | None = None,
    planned: Sequence[PlannedTask] = (),
) -> EvalPlan:
    """Check the settings, resolve the tasks and clear the way in the output directory (see
    :func:`evaluate_tasks`); raises :class:`EvalError` with ``exit_code`` 2, changing nothing, when it refuses.
    ``planned``: tasks already built (a train run's own task, :mod:`grae.eval.run_heldout`), evaluated after
    those of ``tasks``."""
    from .backends import default_batch_size, select_backend
    from .identity import model_identity
    from .tasks import model_task_params, resolve_task, split_task_list

    output = Path(output) if output is not None else None
    _check_settings(model, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                    num_problems=num_problems, batch_size=batch_size, output=output)
    label = label or model_label(model)
    output = output or Path("eval") / label
    params = dict(task_params or {})
    identity = model_identity(model, local_weights(model))
    try:
        chosen = select_backend(backend)
        resolved = []
        for entry in split_task_list(tasks):
            entry_params = params
            own = None if params else model_task_params(model, entry)
            if own is not None:  # the tiny model's own distribution, or the one its run trained on
                entry_params, source = own
                log(f"{entry} with {source} settings {entry_params} (override with --task-param)")
            resolved.append(PlannedTask(entry, resolve_task(entry, prompt_style=prompt_style, params=entry_params),
                                        entry_params))
        resolved += list(planned)
    except (KeyError, FileNotFoundError, ValueError, RuntimeError) as err:
        raise EvalError(err, exit_code=2) from err
    except (TypeError, AssertionError) as err:  # a task's own constructor refused --task-param (reasoning-gym asserts)
        raise EvalError(f"--task-param {params}: {err}", exit_code=2) from None
    if not resolved:
        raise EvalError(f"--tasks: no task in {list(tasks)!r}", exit_code=2)
    resolved = _one_entry_per_name(resolved)
    exact_only = [name for name, value in [("--exact-memory-mb", exact_memory_mb),
                                           ("--exact-max-candidates", exact_max_candidates)] if value is not None]
    if exact_only and not exact:
        raise EvalError(f"{' and '.join(exact_only)}: settings of exact evaluation, which this run does not do (it "
                        "samples); add --exact, or drop them", exit_code=2)
    if exact:
        _check_exact(resolved, num_problems, exact_memory_mb, exact_max_candidates, log)
        if temperature <= 0:
            raise EvalError("--exact: --temperature must be > 0 (greedy has no distribution to enumerate)", exit_code=2)
        if backend == "vllm":
            raise EvalError("--exact: runs on the hf backend (teacher forcing); drop --backend vllm", exit_code=2)
    plan = EvalPlan(model=model, identity=identity, label=label, output=output, backend=chosen,
                    batch_size=batch_size or default_batch_size(chosen, model), n=n, temperature=temperature, top_p=top_p,
                    max_tokens=max_tokens, seed=seed, prompt_style=prompt_style, tasks=resolved, exact=exact,
                    exact_memory_mb=exact_memory_mb)
    if exact:
        plan.backend = "hf"

    # one model's results per directory: rows of other weights or settings are refused (or, with
    # overwrite, replaced) before the model loads; a refused call changes nothing
    held_by_train = train_run_files(output)
    if held_by_train:
        raise EvalError(f"{output} holds the files of the grae train run in {held_by_train}; choose another --output",
                        exit_code=2)
    stale = runner.conflicts(output, identity, {plan.rows_path(p): {**plan.meta(p), "task": p.name, "seed": seed}
                                                for p in resolved})
    if stale and not overwrite:
        raise EvalError(f"{output} holds samples of another model or other settings ("
                        + "; ".join(f"{rows.name}: {reason}" for rows, reason in stale.items())
                        + "); --overwrite replaces them, or choose another --output", exit_code=2)
    for rows in stale:
        runner.discard_rows(rows)
    return plan


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def available_memory_mb() -> float | None:
    """Memory free for the exact scorer's chunks, in MB: the GPU's free memory where the hf backend runs on
    one, else the machine's available memory (``MemAvailable`` of /proc/meminfo); None where it cannot be read."""
    if _on_gpu():
        import torch

        return torch.cuda.mem_get_info()[0] / 2**20
    try:
        with open("/proc/meminfo") as meminfo:
            kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return kb / 1024


def _one_entry_per_name(resolved: list[PlannedTask]) -> list[PlannedTask]:
    """``resolved`` with a repeated entry once; two entries under one task name (``t=A.jsonl,t=B.jsonl``), whose
    rows would go to one file and one summary, are refused."""
    by_name: dict[str, PlannedTask] = {}
    for planned in resolved:
        seen = by_name.setdefault(planned.name, planned)
        if seen.entry != planned.entry:
            raise EvalError(f"--tasks: {seen.entry} and {planned.entry} are both named {planned.name!r}, so their rows "
                            f"would share {file_stem(planned.name)}.jsonl; give each its own name (NAME=PATH)", exit_code=2)
    return list(by_name.values())


def _check_exact(resolved: list[PlannedTask], num_problems: int | None, memory_mb: float | None,
                 max_candidates: int | None, log: Callable[[str], None]) -> None:
    """``--exact``: every task has a finite answer set of at most ``max_candidates`` answers (default
    :data:`grae.eval.exact.DEFAULT_EXACT_MAX_CANDIDATES`) or one gold completion (:func:`grae.eval.exact.exact_by`);
    says what it will teacher-force."""
    from .exact import (
        BY_GOLD,
        DEFAULT_EXACT_MAX_CANDIDATES,
        DEFAULT_EXACT_MEMORY_MB,
        MIN_EXACT_MEMORY_MB,
        ExactError,
        exact_by,
        task_answer_set,
    )
    from .tasks import DEFAULT_PROCEDURAL_PROBLEMS, is_fixed_set

    limit = DEFAULT_EXACT_MAX_CANDIDATES if max_candidates is None else max_candidates
    budget = DEFAULT_EXACT_MEMORY_MB if memory_mb is None else memory_mb
    for name, value, ok, rule in [("--exact-max-candidates", limit, limit >= 1, ">= 1"),
                                  ("--exact-memory-mb", budget, budget >= MIN_EXACT_MEMORY_MB and math.isfinite(budget),
                                   f"at least {MIN_EXACT_MEMORY_MB:g} (MB: the candidates' batches are scored within it)")]:
        if not ok:
            raise EvalError(f"{name} must be {rule}, got {value!r}", exit_code=2)
    free_mb = available_memory_mb() if memory_mb is not None else None
    if free_mb is not None and budget > free_mb:
        raise EvalError(f"--exact-memory-mb {budget:g} is more than this machine has free ({free_mb:,.0f} MB"
                        f"{' on the GPU' if _on_gpu() else ''}); give at most that (default {DEFAULT_EXACT_MEMORY_MB:g})",
                        exit_code=2)
    for planned in resolved:
        problems = num_problems or (None if is_fixed_set(planned.task) else DEFAULT_PROCEDURAL_PROBLEMS)
        try:
            by = exact_by(planned.task)
        except ExactError as err:
            raise EvalError(f"--exact: {err}", exit_code=2) from None
        if by == BY_GOLD:
            log(f"{planned.name}: exact, each problem's gold completion teacher-forced"
                + (f" ({problems} problem{'s' * (problems != 1)})" if problems else ""))
            continue
        count = len(task_answer_set(planned.task))
        times = (f" × {problems} problem{'s' * (problems != 1)} = {count * problems:,} sequences" if problems
                 else " per problem")
        if count > limit:
            raise EvalError(f"--exact: task {planned.name} has {count:,} candidate answers{times} to teacher-force, "
                            f"above the limit of {limit:,} per problem (hours even on the tiny model); narrow the task "
                            f"(--task-param, e.g. max_digits=2) or raise --exact-max-candidates", exit_code=2)
        log(f"{planned.name}: exact over {count:,} candidate answers{times}, scored within {budget:g} MB")


def run_plan(
    plan: EvalPlan,
    *,
    num_problems: int | None = None,
    device: str | None = None,
    dtype: str = "auto",
    progress: ProgressFactory | None = None,
    on_task: Callable[[str, EvalResult, dict[str, Any]], None] | None = None,
    vllm_options: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    confirm: Callable[[CostEstimate], None] | None = None,
) -> TasksResult:
    """Sample every planned task (one model load for all), resuming rows on disk; write each task's
    summary, the combined ``summary.json`` and ``passk.png``. ``confirm(estimate)``, when given, hears what
    the sampling will cost (:mod:`grae.eval.cost`, after a warm-up call) before the first sample, and may
    raise :class:`EvalError` to stop. A Ctrl-C (KeyboardInterrupt) leaves every finished batch on disk: the
    same call resumes."""
    from .backends import ModelLoadError, SamplingSettings, make_sampler
    from .report import plot_passk_curves
    from .tasks import default_max_tokens, load_examples

    output, n = plan.output, plan.n
    out = TasksResult(plan, output / "summary.json")
    combined = json.loads(out.summary_path.read_text()) if out.summary_path.exists() else {}
    combined.update(model=plan.model, identity=plan.identity, label=plan.label, backend=plan.backend)
    combined["tasks"] = {name: summary for name, summary in combined.get("tasks", {}).items()
                         if summary.get("identity") == plan.identity}  # other weights' tasks were replaced

    def settings_of(task) -> SamplingSettings:
        return SamplingSettings(plan.temperature, plan.top_p, plan.max_tokens or default_max_tokens(task))

    try:  # every task's problems, then one model load for all
        loaded = [(planned, load_examples(planned.task, num_problems)) for planned in plan.tasks]
        sampler = make_sampler(plan.model, settings_of(plan.tasks[0].task), backend=plan.backend, device=device,
                               dtype=dtype, vllm_options=vllm_options)
    except (ModelLoadError, RuntimeError, ValueError, KeyError) as err:
        raise EvalError(err, exit_code=1) from err
    if confirm is not None and not plan.exact:
        confirm(estimate_cost(plan, loaded, sampler))
    for planned, examples in loaded:
        task = planned.task
        sampler.settings = settings_of(task)
        name = planned.name
        stem = file_stem(name)
        if plan.exact:
            result = _run_exact(plan, planned, sampler, examples, output / f"{stem}.jsonl", progress, log)
            extra = _exact_summary(result)
        else:
            bar = progress(name, len(examples) * n) if progress is not None else nullcontext(None)
            with bar as update:
                if hasattr(sampler, "on_step"):
                    sampler.on_step = getattr(update, "decoding", None)
                try:
                    result = runner.run_samples(sampler, examples, task, n=n, batch_size=plan.batch_size,
                                                seed=plan.seed, output_path=output / f"{stem}.jsonl",
                                                settings=plan.meta(planned), progress=update)
                except RecordsError as err:
                    raise EvalError(err, exit_code=1) from err
                finally:
                    if hasattr(sampler, "on_step"):
                        sampler.on_step = None
            extra = {}
        summary = {**result.summary(), **extra, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
        atomic_write_json(output / f"{stem}.summary.json", summary)
        combined["tasks"][name] = summary
        atomic_write_json(out.summary_path, combined)
        out.results[name] = result
        out.summaries[name] = summary
        if on_task is not None:
            on_task(name, result, summary)
    if out.results:
        out.figure = plot_passk_curves({name: r.curve for name, r in out.results.items()}, output / "passk.png",
                                       title=f"{plan.label} ({'exact' if plan.exact else f'n={n}'}, T={plan.temperature})",
                                       intervals={name: r.intervals for name, r in out.results.items()})
    return out


def estimate_cost(plan: EvalPlan, loaded: list[tuple[PlannedTask, list[dict[str, Any]]]], sampler: Any) -> CostEstimate:
    """What sampling ``loaded`` (each planned task with its problems) will cost with ``sampler``: the samples
    not yet on disk, their token budget and generate calls, timed by one warm-up call on the hf backend
    (:func:`grae.eval.cost.measure_decoding`; not for vLLM or images)."""
    import torch

    from .cost import TaskCost, measure_decoding
    from .tasks import default_max_tokens

    shares = []
    for planned, examples in loaded:
        ids = [str(example["question_id"]) for example in examples]
        try:
            on_disk = sum(1 for _, gid in runner.rows_done(plan.rows_path(planned), ids) if gid < plan.n)
        except RecordsError as err:
            raise EvalError(err, exit_code=1) from err
        total = len(examples) * plan.n
        calls = math.ceil(runner.count_calls(len(examples), plan.n, plan.batch_size) * (total - on_disk) / total)
        shares.append(TaskCost(planned.name, len(examples), plan.n, total - on_disk,
                               plan.max_tokens or default_max_tokens(planned.task), calls))
    weights = getattr(sampler, "model", None)
    device = next(weights.parameters()).device.type if hasattr(weights, "parameters") else "cuda"
    cost = CostEstimate(shares, plan.backend, device, plan.batch_size, torch.get_num_threads())
    todo = [(examples, share) for (_, examples), share in zip(loaded, shares) if share.samples]
    if not todo:
        cost.notes.append("nothing left to draw")
    elif any(example.get("image") is not None for example in todo[0][0]):
        cost.notes.append("a visual task: no warm-up")
    else:
        examples = todo[0][0]
        sequences = plan.batch_size if plan.n >= plan.batch_size else min(plan.batch_size // plan.n, len(examples)) * plan.n
        measured = measure_decoding(sampler, sampler.render(examples[0]["prompt"]), sequences)
        if measured is None:
            cost.notes.append(f"{plan.backend}: no warm-up")
        else:
            cost.prefill_s, cost.step_s, cost.warmup_steps = measured
    return cost


def _run_exact(plan: EvalPlan, planned: PlannedTask, sampler: Any, examples: list[dict[str, Any]], rows_path: Path,
               progress: ProgressFactory | None, log: Callable[[str], None]) -> EvalResult:
    """Exact rows of one task (grae.eval.exact), recorded like sampled rows, as an :class:`EvalResult`;
    ``log`` hears the expected time (measured on the first chunk of candidates)."""
    from .exact import ExactError

    def estimate(seconds: float) -> None:
        log(f"{planned.name}: {len(examples)} problem{'s' * (len(examples) != 1)}, expected {seconds:.0f} s "
            "(measured on the first chunk)")

    settings = {**plan.meta(planned), "task": planned.name, "seed": plan.seed, "n": plan.n}
    try:
        bar = progress(planned.name, len(examples)) if progress is not None else nullcontext(None)
        with bar as update:
            result = runner.evaluate_exact(sampler.model, sampler.tokenizer, examples, planned.task, settings=settings,
                                           k_max=plan.n, render=sampler.render, output_path=rows_path, seed=plan.seed,
                                           progress=update, memory_mb=plan.exact_memory_mb, estimate=estimate)
    except (ExactError, RecordsError) as err:
        raise EvalError(err, exit_code=1) from err
    result.task = planned.name
    return result


def _exact_summary(result: EvalResult) -> dict[str, Any]:
    """The exact-only part of a summary: how p was computed (``exact_by``) and, enumerating an answer set, the
    enumerated mass and the reference policies' pass@k (a one-gold task has neither)."""
    from grae.eval.records import read_rows

    from .exact import BY_ANSWER_SET, BY_GOLD, NEAR_MISS_W, reference_table

    counts = result.counts
    rows = read_rows(result.output_path) if result.output_path else result.rows
    if any(row.get("exact_by") == BY_GOLD for row in rows or []):
        return {"exact": True, "exact_by": BY_GOLD}
    ks = sorted({1, 16, 64, 256} & set(result.curve) | {max(result.curve)})
    table = reference_table(counts, rows, ks)
    return {"exact": True, "exact_by": BY_ANSWER_SET, "mass_mean": float(counts.mass.mean()),
            "mass_min": float(counts.mass.min()),
            "near_miss_w": NEAR_MISS_W,
            "references": {name: {str(k): v for k, v in row.items()} for name, row in table.items()}}


def evaluate_tasks(
    model: str,
    tasks: Sequence[str],
    *,
    n: int = 256,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_tokens: int | None = None,
    num_problems: int | None = None,
    output: str | Path | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    backend: str = "auto",
    prompt_style: str | None = None,
    task_params: dict[str, Any] | None = None,
    label: str | None = None,
    device: str | None = None,
    dtype: str = "auto",
    overwrite: bool = False,
    exact: bool = False,
    exact_memory_mb: float | None = None,
    exact_max_candidates: int | None = None,
    log: Callable[[str], None] = print,
    on_start: Callable[[EvalPlan], None] | None = None,
    progress: ProgressFactory | None = None,
    on_task: Callable[[str, EvalResult, dict[str, Any]], None] | None = None,
    vllm_options: dict[str, Any] | None = None,
    confirm: Callable[[CostEstimate], None] | None = None,
    planned: Sequence[PlannedTask] = (),
) -> TasksResult:
    """Evaluate ``model`` on ``tasks`` (``grae eval``; entries as in :mod:`grae.eval.tasks`) into ``output``
    [default: ``eval/<label>``] and return the results per task.

    Args:
        model: a local directory, a preset (``tiny``, ``smollm2``) or a hub id.
        tasks: ``--tasks`` entries (each may be comma-separated); ``planned``: tasks already built (a train
            run's own, :mod:`grae.eval.run_heldout`), evaluated after them.
        n, temperature, top_p, max_tokens, seed: sampling (``max_tokens`` None: the task's default).
        num_problems: first N held-out problems (None: all of a dataset, 100 of a procedural task).
        batch_size: sequences per generate call (None: :func:`grae.eval.backends.default_batch_size`).
        backend: ``auto``, ``hf`` or ``vllm``; ``device``/``dtype``: the hf backend's; ``vllm_options``:
            ``vllm.LLM`` keyword arguments (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``).
        task_params: parameters for :func:`grae.data.get_task` (procedural tasks).
        label: the model's label in summaries and figures (None: :func:`model_label`).
        overwrite: replace rows in ``output`` of other weights or other settings (otherwise refused).
        exact: exact pass@k by answer enumeration (:mod:`grae.eval.exact`; tasks with a finite answer
            set, hf backend); ``n`` is then the largest k reported. ``exact_memory_mb``: the candidates'
            memory budget; ``exact_max_candidates``: answers per problem above which it refuses (None: the
            defaults of :mod:`grae.eval.exact`).
        log: informational lines; ``on_start(plan)``: once, after the checks, before the model loads;
            ``progress``: see :data:`ProgressFactory`; ``on_task(name, result, summary)``: after each task;
            ``confirm(estimate)``: before the first sample, the cost (:mod:`grae.eval.cost`); it may raise
            :class:`EvalError` to stop (``grae eval`` does so on a CPU above an hour without ``--yes``).

    Raises:
        EvalError: ``exit_code`` 2 when refused before anything changed (bad settings, unknown task,
            rows of another model or settings without ``overwrite``, a ``grae train`` run directory);
            1 when the model does not load or rows cannot be read.
        KeyboardInterrupt: passed on; every finished batch is on disk and the same call resumes.
    """
    plan = plan_tasks(model, tasks, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                      num_problems=num_problems, output=output, batch_size=batch_size, seed=seed, backend=backend,
                      prompt_style=prompt_style, task_params=task_params, label=label, overwrite=overwrite, log=log,
                      exact=exact, exact_memory_mb=exact_memory_mb, exact_max_candidates=exact_max_candidates,
                      planned=planned)
    if on_start is not None:
        on_start(plan)
    return run_plan(plan, num_problems=num_problems, device=device, dtype=dtype, progress=progress, on_task=on_task,
                    vllm_options=vllm_options, log=log, confirm=confirm)
