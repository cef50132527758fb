"""``grae train [CONFIG] [--key value …]``: train with a grae estimator through TRL."""

from __future__ import annotations

import os
import signal

import typer

from grae.cli.output import error


def parse_overrides(extra: list[str]) -> dict:
    """``--trl.learning_rate 3e-4 --task.name=gcd`` → ``{"trl.learning_rate": 3e-4, "task.name": "gcd"}``.
    Values are read as YAML scalars (numbers, booleans, null, lists)."""
    config, overrides = split_args(extra)
    if config is not None:
        raise typer.BadParameter(f"unexpected argument {config!r}; overrides look like --key value or --key=value")
    return overrides


def split_args(extra: list[str]) -> tuple[str | None, dict]:
    """The optional positional CONFIG and the ``--key value`` overrides, in any order."""
    import yaml

    config, overrides, i = None, {}, 0
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--"):
            if config is not None:
                raise typer.BadParameter(f"unexpected argument {token!r}: CONFIG is already {config!r}; "
                                         "overrides look like --key value or --key=value")
            config = token
            i += 1
            continue
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            value = extra[i + 1]
            i += 2
        else:
            raise typer.BadParameter(f"--{key}: missing a value")
        overrides[key] = _scalar(yaml.safe_load(value))
    return config, overrides


def _scalar(value):
    """YAML 1.1 reads ``3e-4`` as a string; numbers written that way are numbers here."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def register(app: typer.Typer) -> None:
    @app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                 options_metavar="[CONFIG] [OPTIONS] [--key value …]")
    def train(
        ctx: typer.Context,
        estimator: str | None = typer.Option(None, help="Advantage estimator (grae estimators lists them)."),
        max_steps: int | None = typer.Option(None, "--max-steps", help="Training steps."),
        seed: int | None = typer.Option(None, help="Random seed."),
        output_dir: str | None = typer.Option(None, "--output-dir", help="Run directory."),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in the run directory from its newest complete "
                                    "checkpoint (only max_steps and eval settings may change; a longer run re-evaluates)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Clear a run directory that holds another run and start anew."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the rich progress bar."),
    ) -> None:
        """grae train [CONFIG] [--key value …]: train with a grae estimator (default: the embedded
        tiny model with A-GRAE), evaluate held-out pass@k before and after, and write a report.
        CONFIG is a YAML file or a packaged recipe name (default, tiny_vlm, smollm2, qwen25math7b_agrae, …).
        Extra --key value pairs override config keys (dotted: --trl.learning_rate 3e-4); for example
        --eval.enabled false skips the held-out evaluations, --sampling.dynamic true turns on dynamic
        sampling, --peft.r 16 trains a LoRA adapter, --trl.push_to_hub true --trl.hub_model_id ORG/NAME
        pushes the model (grae/train/config.py documents every key)."""
        from rich.console import Console
        from rich.table import Table

        from grae.train.config import ConfigError, load_config

        # several processes (accelerate launch, torchrun): the main one speaks
        console = Console(emoji=False, quiet=os.environ.get("RANK", "0") != "0")
        config, overrides = split_args(list(ctx.args))
        for key, value in [("estimator", estimator), ("max_steps", max_steps), ("seed", seed), ("output_dir", output_dir)]:
            if value is not None:
                overrides[key] = value
        try:
            cfg = load_config(config, overrides)
        except ConfigError as err:
            error(console, "config error", err)
            raise typer.Exit(2) from None

        from rich.markup import escape

        from grae.train.run import INTERRUPTED_EXIT, DiskFullError, run_train

        console.print(f"grae train: [bold]{escape(cfg.estimator)}[/bold] on {escape(cfg.task.name)} with "
                      f"{escape(cfg.model)} → {escape(cfg.output_dir)}", highlight=False, soft_wrap=True)
        try:
            result = run_train(cfg, resume=resume, overwrite=overwrite, console=console, progress=progress)
        except ConfigError as err:
            error(console, "error:", err)
            raise typer.Exit(2) from None
        except DiskFullError as err:
            error(console, "error:", err)
            raise typer.Exit(1) from None
        except Exception as err:  # a write failure outside the guarded writers (run.json, metrics, …): one line
            from pathlib import Path

            from grae.train.faults import write_failure

            line = write_failure(err, Path(cfg.output_dir))
            if line is None:
                raise
            error(console, "error:", line)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:  # a second Ctrl-C, or one during held-out evaluation (its rows are on disk)
            error(console, "interrupted:", "rerun with --resume to continue")
            raise typer.Exit(INTERRUPTED_EXIT[signal.SIGINT]) from None
        if result.interrupted_by is not None:
            raise typer.Exit(INTERRUPTED_EXIT.get(result.interrupted_by, 1))

        summary = escape(f"{cfg.estimator}: {result.steps} steps in {result.train_seconds:.0f}s")
        if result.before:
            table = Table(title=summary)
            table.add_column("held-out")
            ks = sorted(result.before)
            for k in ks:
                table.add_column(f"pass@{k}", justify="right")
            table.add_row("base", *[f"{100 * result.before[k]:.1f}" for k in ks])
            if result.after:
                table.add_row("trained", *[f"{100 * result.after[k]:.1f}" for k in ks])
                table.add_row("change", *[f"{100 * (result.after[k] - result.before[k]):+.1f}" for k in ks])
            console.print(table)
        else:
            console.print(f"{summary}; held-out evaluation off (--eval.enabled false)", highlight=False)
        if result.report:
            console.print(f"report: {result.report}", markup=False, highlight=False, soft_wrap=True)
