"""``grae data export TASK OUT --format verl``: write a grae task as an engine's dataset file.
``grae data band --model M --task T -o band.jsonl``: the training problems in a base model's competence band
(:mod:`grae.eval.pass_rate`, :mod:`grae.data.band`; train on them with ``--task.train_subset band.jsonl``)."""

from __future__ import annotations

import typer

from grae.cli.output import check_writable, error
from grae.cli.output import console as make_console

FORMATS = ("verl",)


def parse_params(items: list[str]) -> dict:
    """``["split=train", "min_value=3"]`` → ``{"split": "train", "min_value": 3}`` (values read as YAML scalars)."""
    from grae.yaml_io import DuplicateKeyError, load_yaml

    params = {}
    for item in items:
        if "=" not in item:
            raise typer.BadParameter(f"--param {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            params[key.strip()] = load_yaml(value)
        except DuplicateKeyError as err:
            raise typer.BadParameter(f"--param {key.strip()}: {err}") from None
    return params


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(help="Export grae tasks as engine datasets; select training problems by a model's pass "
                           "rate.", no_args_is_help=True)

    @data_app.command("export")
    def export(
        task: str = typer.Argument(..., help="grae.data task name (e.g. math, chain_sum)."),
        out: str = typer.Argument(..., help="Output file (.parquet for verl)."),
        format: str = typer.Option("verl", "--format", "-f", help=f"Output format: {', '.join(FORMATS)}."),
        split: str = typer.Option("train", help="train (task.train(n, seed)) or heldout (task.heldout(n))."),
        n: int = typer.Option(1000, "--n", "-n", help="Number of examples; 0 = the whole split (dataset tasks)."),
        seed: int = typer.Option(0, help="Sampling seed for the train split."),
        param: list[str] | None = typer.Option(None, "--param", "-p", help="Task parameter key=value (repeatable)."),
    ) -> None:
        """Write N examples of TASK in an engine's dataset format (verl: RL parquet + reward function)."""
        console = make_console()
        if format not in FORMATS:
            error(console, f"--format {format!r}:", f"supported formats are {', '.join(FORMATS)}")
            raise typer.Exit(2)
        if n < 0:
            error(console, "--n:", f"must be >= 0 (0 = the whole split), got {n}")
            raise typer.Exit(2)
        check_writable(console, out, "OUT", is_file=True)
        from grae.engines.verl.export import REWARD_OVERRIDES, export_verl

        try:
            path = export_verl(task, out, split=split, n=n or None, seed=seed, task_params=parse_params(param or []))
        except (ValueError, KeyError, TypeError) as err:
            error(console, "export failed:", err)
            raise typer.Exit(2) from None
        import pyarrow.parquet as pq

        console.print(f"wrote {pq.read_metadata(path).num_rows} {split} examples of {task} to {path}")
        console.print("verl overrides:\n  data.train_files=<train.parquet> data.val_files=<heldout.parquet>\n  "
                      + "\n  ".join(REWARD_OVERRIDES))

    @data_app.command("band")
    def band(
        model: str = typer.Option(..., "--model", "-m", help="The base model: a preset (tiny, tiny-ladder, …), a local "
                                                            "directory or a hub id."),
        task: str = typer.Option(..., "--task", "-t", help="grae.data task name (e.g. chain_trace, chain_sum, a .jsonl)."),
        param: list[str] | None = typer.Option(None, "--param", "-p", help="Task parameter key=value (repeatable)."),
        out: str = typer.Option(..., "--output", "-o", help="The band file to write (.jsonl)."),
        pool: int = typer.Option(4000, help="Training problems scored: the first POOL of the task's training stream."),
        seed: int = typer.Option(0, help="Seed of the training stream the pool is drawn from (task.train(pool, seed))."),
        lo: float = typer.Option(0.15, help="Keep problems whose pass rate is >= LO."),
        hi: float = typer.Option(0.85, help="... and <= HI."),
        exact: bool = typer.Option(False, "--exact", help="Pass rate = teacher-forced probability of the gold completion "
                                                          "(tasks whose answer is one completion: chain_trace, chain_sum)."),
        n: int | None = typer.Option(None, "--n", "-n", help="Sampled pass rate: N samples per problem (with its Wilson "
                                                             "interval). Give --exact or --n."),
        temperature: float = typer.Option(1.0, help="Sampling temperature the pass rate is measured at."),
        top_p: float = typer.Option(1.0, "--top-p", help="Nucleus threshold the pass rate is measured at."),
        max_tokens: int = typer.Option(64, "--max-tokens", help="Completion budget (a longer gold completion has p = 0)."),
        sample_seed: int = typer.Option(0, "--sample-seed", help="Seed of the samples (--n)."),
        batch_size: int = typer.Option(64, "--batch-size", help="Problems per forward (exact) / sequences per call."),
        device: str | None = typer.Option(None, help="cpu or cuda (default: cuda when available)."),
    ) -> None:
        """Score a pool of TASK's training problems by MODEL's pass rate, keep those in [LO, HI], write them."""

        console = make_console()
        if exact == (n is not None):
            error(console, "--exact / --n:", "give exactly one: --exact (teacher-forced gold completion) or --n N (N "
                                             "samples per problem)")
            raise typer.Exit(2)
        from grae.eval.backends import MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P, ModelLoadError

        for name, bad, rule in [("--temperature", not MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE,
                                 f"in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]"),
                                ("--top-p", not MIN_TOP_P <= top_p <= 1, f"in [{MIN_TOP_P:g}, 1]"),
                                ("--max-tokens", max_tokens < 1, ">= 1"), ("--batch-size", batch_size < 1, ">= 1")]:
            if bad:
                error(console, f"{name}:", f"must be {rule}")
                raise typer.Exit(2)
        check_writable(console, out, "--output", is_file=True)
        from grae.data.band import write_band
        from grae.eval.pass_rate import BandSettings, band_summary, score_band

        settings = BandSettings(lo=lo, hi=hi, n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                seed=sample_seed, batch_size=batch_size)
        try:
            header, rows = score_band(model, task, parse_params(param or []), pool=pool, pool_seed=seed,
                                      settings=settings, device=device)
        except (ValueError, KeyError, TypeError, ModelLoadError) as err:
            error(console, "band failed:", err.args[0] if err.args else err)
            raise typer.Exit(2) from None
        if not rows:
            error(console, "no problem kept:", f"none of the {pool} pass rates lies in [{lo:g}, {hi:g}] "
                                               f"(counts {header['counts']}); widen --lo/--hi or score a larger --pool")
            raise typer.Exit(1)
        path = write_band(out, header, rows)
        console.print(band_summary(header, path))
        console.print(f"train on them: grae train --task.name {task} --task.train_subset {path} (the same task.params)")

    app.add_typer(data_app, name="data")
