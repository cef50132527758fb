"""``grae eval``, ``grae passk`` and ``grae report``: sample and verify, pass@k tables, pass@k figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from grae.cli.output import error


def _model_label(model: str) -> str:
    path = Path(model).expanduser()
    if model == "tiny":
        return "tiny"
    if path.exists():
        return path.resolve().name
    return model.replace("/", "__")


def _local_weights(model: str) -> Path | None:
    """The directory holding ``model``'s weights when they are on disk (the tiny preset, a local path)."""
    if model == "tiny":
        from grae.tiny import tiny_model_path

        return Path(tiny_model_path())
    path = Path(model).expanduser()
    return path if path.is_dir() else None


def _train_run_files(output: Path) -> Path | None:
    """The ``grae train`` run directory whose own files ``output`` would mix with (``output`` is the run
    directory or its ``eval/``); None otherwise. ``-o runs/x/math`` beside a run's files is fine."""
    from grae.train.rundir import RUN_FILE

    for run in (output, output.parent) if output.name == "eval" else (output,):
        if (run / RUN_FILE).is_file():
            return run
    return None


def _parse_params(values: List[str]) -> dict:
    import yaml

    params = {}
    for value in values:
        if "=" not in value:
            raise typer.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint="--task-param")
        key, raw = value.split("=", 1)
        params[key.strip()] = yaml.safe_load(raw)
    return params


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}"


def _ci(lo: float, hi: float) -> str:
    return "" if lo != lo else f"[{100.0 * lo:.1f}, {100.0 * hi:.1f}]"


def _parse_ks(values: List[str]) -> Optional[List[int]]:
    ks = [int(part) for value in values for part in value.split(",") if part.strip()]
    return ks or None


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_(
        model: str = typer.Argument(..., help="Local HF model directory, `tiny` (the shipped model), or a hub id."),
        tasks: List[str] = typer.Option(..., "--tasks", "-t",
                                        help="Benchmarks (math500, aime2024, …), NAME=PATH, a data file, or grae.data "
                                             "tasks; comma-separated or repeated."),
        n: int = typer.Option(256, "--n", help="Samples per problem."),
        temperature: float = typer.Option(0.6, help="Sampling temperature (0 = greedy)."),
        top_p: float = typer.Option(0.95, "--top-p", help="Nucleus sampling threshold."),
        max_tokens: Optional[int] = typer.Option(None, "--max-tokens",
                                                 help="New tokens per sample [default: the task's, else 1024]."),
        num_problems: Optional[int] = typer.Option(None, "--num-problems",
                                                   help="First N problems [default: all; 100 for procedural tasks]."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output directory [default: eval/<model>]."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size",
                                                 help="Sequences per generate call [default: 64 on hf, 8192 on vllm]."),
        seed: int = typer.Option(0, help="Base seed; each generate call is seeded from (seed, question_id, batch)."),
        backend: str = typer.Option("auto", help="auto (vLLM if installed and a CUDA GPU is present, else hf), hf, vllm."),
        prompt_style: Optional[str] = typer.Option(None, "--prompt-style",
                                                   help="chat or plain [default: the task's own]."),
        task_param: List[str] = typer.Option([], "--task-param",
                                             help="KEY=VALUE passed to procedural tasks (grae.data.get_task); repeatable."),
        label: Optional[str] = typer.Option(None, help="Model label in summaries and figures [default: model name]."),
        device: Optional[str] = typer.Option(None, help="hf backend device [default: cuda if available, else cpu]."),
        dtype: str = typer.Option("auto", help="Model dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16, …"),
        threads: Optional[int] = typer.Option(None, help="torch CPU threads [default: torch's]; 1 is fastest for tiny "
                                                         "models on a busy machine."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace rows in the output directory that another "
                                       "model (other weights) or other sampling settings produced."),
    ) -> None:
        """Sample N completions per problem, verify each, write JSONL rows and pass@k (resumable)."""
        import time

        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        from rich.table import Table

        from grae.eval.backends import DEFAULT_BATCH_SIZE, ModelLoadError, SamplingSettings, make_sampler, select_backend
        from grae.eval.records import RecordsError, atomic_write_json, file_stem
        from grae.eval.report import plot_passk_curves
        from grae.eval.runner import run_samples
        from grae.eval.tasks import default_max_tokens, load_examples, resolve_task, split_task_list

        from rich.markup import escape

        from grae.eval.identity import looks_like_missing_path, model_identity
        from grae.eval.runner import conflicts, discard_rows

        console = Console(emoji=False)
        bad = [(name, rule, value) for name, value, rule, ok in [
            ("--n", n, ">= 1", n >= 1), ("--temperature", temperature, ">= 0 (0 = greedy)", temperature >= 0),
            ("--top-p", top_p, "in (0, 1]", 0 < top_p <= 1), ("--max-tokens", max_tokens, ">= 1", max_tokens is None or max_tokens >= 1),
            ("--num-problems", num_problems, ">= 1", num_problems is None or num_problems >= 1),
            ("--batch-size", batch_size, ">= 1", batch_size is None or batch_size >= 1),
            ("--output", str(output), "a directory name", output is None or str(output).strip() not in ("", "."))] if not ok]
        if bad:
            error(console, "error:", "; ".join(f"{name} must be {rule}, got {value!r}" for name, rule, value in bad))
            raise typer.Exit(2)
        if looks_like_missing_path(model):
            error(console, "error:", f"model {model!r} does not exist (a local directory, a hub id org/name, or a preset: tiny, smollm2)")
            raise typer.Exit(2)
        if threads:
            import torch

            torch.set_num_threads(threads)
        label = label or _model_label(model)
        output = output or Path("eval") / label
        params = _parse_params(task_param)
        identity = model_identity(model, _local_weights(model))
        try:
            chosen = select_backend(backend)
            resolved = []
            for entry in split_task_list(tasks):
                entry_params = params
                if model == "tiny" and entry == "chain_sum" and not params:  # the tiny model's own distribution
                    from grae.tiny import DEFAULT_TASK_KWARGS

                    entry_params = dict(DEFAULT_TASK_KWARGS)
                    console.print(f"chain_sum with the tiny model's settings {entry_params} (override with --task-param)",
                                  markup=False)
                resolved.append((entry, resolve_task(entry, prompt_style=prompt_style, params=entry_params), entry_params))
        except (KeyError, FileNotFoundError, ValueError, RuntimeError) as err:
            error(console, "error:", err)
            raise typer.Exit(2)
        batch = batch_size or DEFAULT_BATCH_SIZE[chosen]

        def meta_for(task, task_params):
            return {"model": model, "identity": identity, "label": label, "backend": chosen, "temperature": temperature,
                    "top_p": top_p, "max_tokens": max_tokens or default_max_tokens(task), "batch_size": batch,
                    "task_params": task_params, "prompt_style": prompt_style}

        # one model's results per directory: rows of other weights or settings are refused (or, with
        # --overwrite, replaced) before the model loads; a refused command changes nothing
        held_by_train = _train_run_files(output)
        if held_by_train:
            error(console, "error:", f"{output} holds the files of the grae train run in {held_by_train}; "
                                     "choose another --output")
            raise typer.Exit(2)
        stale = conflicts(output, identity, {
            output / f"{file_stem(getattr(task, 'name', entry))}.jsonl":
                {**meta_for(task, task_params), "task": getattr(task, "name", entry), "seed": seed}
            for entry, task, task_params in resolved})
        if stale and not overwrite:
            error(console, "error:", f"{output} holds samples of another model or other settings ("
                  + "; ".join(f"{rows.name}: {reason}" for rows, reason in stale.items())
                  + "); --overwrite replaces them, or choose another --output")
            raise typer.Exit(2)
        for rows in stale:
            discard_rows(rows)
        console.print(f"[bold]grae eval[/bold] {escape(model)} on {escape(', '.join(e for e, _, _ in resolved))}: n={n}, "
                      f"T={temperature}, top-p={top_p}, backend={chosen}, batch={batch} → {escape(str(output))}",
                      highlight=False, soft_wrap=True)
        try:  # Ctrl-C: every finished batch is on disk (fsync'd), so the same command resumes
            sampler = None
            combined_path = output / "summary.json"
            combined = json.loads(combined_path.read_text()) if combined_path.exists() else {}
            combined.update(model=model, identity=identity, label=label, backend=chosen)
            combined["tasks"] = {name: summary for name, summary in combined.get("tasks", {}).items()
                                 if summary.get("identity") == identity}  # other weights' tasks were replaced above
            results = {}
            for entry, task, task_params in resolved:
                tokens = max_tokens or default_max_tokens(task)
                settings = SamplingSettings(temperature, top_p, tokens)
                try:
                    examples = load_examples(task, num_problems)
                    if sampler is None:  # one model load for all tasks
                        sampler = make_sampler(model, settings, backend=chosen, device=device, dtype=dtype)
                    sampler.settings = settings
                except (ModelLoadError, RuntimeError, ValueError, KeyError) as err:
                    error(console, "error:", err)
                    raise typer.Exit(1)
                name = getattr(task, "name", entry)
                stem = file_stem(name)
                meta = meta_for(task, task_params)
                with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                              TimeRemainingColumn(), console=console, transient=True) as bar:
                    job = bar.add_task(name, total=len(examples) * n)
                    try:
                        result = run_samples(sampler, examples, task, n=n, batch_size=batch, seed=seed,
                                             output_path=output / f"{stem}.jsonl", settings=meta,
                                             progress=lambda done, total: bar.update(job, completed=done))
                    except RecordsError as err:
                        error(console, "error:", err)
                        raise typer.Exit(1)
                summary = {**result.summary(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
                atomic_write_json(output / f"{stem}.summary.json", summary)
                combined["tasks"][name] = summary
                atomic_write_json(combined_path, combined)
                results[name] = result
                rate = summary["samples_per_second"]
                console.print(f"{escape(name)}: {result.counts.num_problems} problems × {n}; {result.num_generated} new samples"
                              f"{f' ({rate:.1f}/s)' if rate else ''}, {result.num_resumed} already on disk")
            table = Table(title=escape(f"pass@k (%) — {label}, n={n}, T={temperature}, top-p={top_p}"))
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
            figure = plot_passk_curves({name: r.curve for name, r in results.items()}, output / "passk.png",
                                       title=f"{label} (n={n}, T={temperature})",
                                       intervals={name: r.intervals for name, r in results.items()})
            console.print(f"rows: {', '.join(str(output / f'{file_stem(name)}.jsonl') for name in results)}\n"
                          f"summary: {combined_path}\nfigure: {figure}", markup=False, highlight=False, soft_wrap=True)
        except KeyboardInterrupt:
            error(console, "interrupted:", "the samples written so far are kept; rerun the same command to resume")
            raise typer.Exit(130)

    @app.command("passk")
    def passk(
        files: List[Path] = typer.Argument(..., help="JSONL files with rows holding question_id and label.",
                                           exists=True, dir_okay=False),
        k: List[str] = typer.Option([], "--k", help="k values (repeat or comma-separate) [default: 1, 2, 4, …, n]."),
        n: Optional[int] = typer.Option(None, "--n", help="Samples per problem to use (first n) [default: min over problems]."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
        compare: bool = typer.Option(False, "--compare", help="Difference of each file vs the first (paired bootstrap)."),
        bootstrap: int = typer.Option(1000, help="Bootstrap resamples over problems for 95% intervals (0 = none)."),
        seed: int = typer.Option(0, help="Bootstrap seed."),
    ) -> None:
        """pass@k with bootstrap confidence intervals from existing sample files."""
        from rich.console import Console
        from rich.table import Table

        from grae.eval.records import RecordsError, iter_rows
        from grae.eval.stats import count_problems, paired_difference, passk_estimates

        console = Console()
        ks = _parse_ks(k)
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
            if compare:  # one k grid for all files
                ks = ks or _common_ks(counts.values())
            estimates = {f: passk_estimates(c, ks, bootstrap=bootstrap, seed=seed) for f, c in counts.items()}
            first = str(files[0])
            deltas = {f: paired_difference(counts[first], c, ks, bootstrap=bootstrap, seed=seed)
                      for f, c in list(counts.items())[1:]} if compare else {}
        except RecordsError as err:
            error(console, "error:", err)
            raise typer.Exit(1)

        if as_json:
            out = {}
            for f, est in estimates.items():
                entry = {f"pass@{kk}": e.value for kk, e in est.items()}
                if bootstrap > 0:
                    entry["ci95"] = {f"pass@{kk}": [e.lo, e.hi] for kk, e in est.items()}
                entry.update(n=int(counts[f].n.min()), num_problems=counts[f].num_problems)
                if f in deltas:
                    diff, shared = deltas[f]
                    entry["delta"] = {f"pass@{kk}": e.as_dict() for kk, e in diff.items()}
                    entry["shared_problems"] = len(shared)
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
        table = Table(title="pass@k (%); Δ vs first file on shared problems, paired bootstrap 95% CI")
        table.add_column("k", justify="right")
        names = _display_names(list(counts))
        for i, f in enumerate(counts):
            table.add_column(names[i], justify="right")
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
        inputs: List[Path] = typer.Argument(..., help="Eval output directories, sample JSONL files or summary JSONs.",
                                            exists=True),
        output: Path = typer.Option(Path("report"), "--output", "-o", help="Directory for the PNGs and report.md."),
        label: List[str] = typer.Option([], "--label", help="Label per input, in order [default: dir/file names]."),
    ) -> None:
        """pass@k curves (log-2 k axis, one PNG per task) and a markdown table for several models."""
        from rich.console import Console

        from grae.eval.records import RecordsError
        from grae.eval.report import write_report

        console = Console()
        try:
            result = write_report(inputs, output, label or None)
        except (RecordsError, ValueError) as err:
            error(console, "error:", err)
            raise typer.Exit(1)
        for task, figure in result.figures.items():
            console.print(f"{task}: {figure}", markup=False, highlight=False, emoji=False)
        console.print(f"markdown: {result.markdown}\n", markup=False, highlight=False, emoji=False)
        print(result.markdown.read_text())


def _common_ks(counts) -> List[int]:
    from grae.metrics import powers_of_two

    return powers_of_two(min(int(c.n.min()) for c in counts))


def _display_names(files: List[str]) -> List[str]:
    """Shortest path suffixes that tell the files apart (``a/chain_sum.jsonl``, ``b/chain_sum.jsonl``)."""
    parts = [Path(f).parts for f in files]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return list(files)
