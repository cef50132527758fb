"""``grae data export TASK OUT --format verl``: write a grae task as an engine's dataset file."""

from __future__ import annotations

import typer

from grae.cli.output import check_writable, error

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
    data_app = typer.Typer(help="Export grae tasks as engine datasets.", no_args_is_help=True)

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
        from rich.console import Console

        console = Console()
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

    app.add_typer(data_app, name="data")
