"""``grae sim``: train the simulated behaviour-space policy with estimators and print exact pass@k."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from grae.cli.output import check_writable, refuse
from grae.cli.output import console as make_console
from grae.printing import print_line
from grae.yaml_io import DuplicateKeyError, load_yaml

# torch and grae.sim are imported inside the functions that use them: `grae --help` must not wait for torch.


def register(app: typer.Typer) -> None:
    """Mount ``grae sim`` on ``app``."""
    app.command("sim")(sim)


def parse_estimator(spec: str) -> tuple[str, dict]:
    """``"agrae:alpha=0.5"`` → ``("agrae", {"alpha": 0.5})`` (values parsed as YAML scalars)."""
    name, _, params = spec.partition(":")
    out = {}
    for item in filter(None, params.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--estimators: {spec!r}; parameters look like name:key=value,key=value")
        try:
            out[key.strip()] = load_yaml(value)
        except DuplicateKeyError as err:
            raise ValueError(f"--estimators: {key.strip()}: {err}") from None
    return name.strip(), out


def sim(
    estimators: list[str] = typer.Option(["grpo", "agrae:alpha=1.0", "agrae:alpha=0.5", "nsr", "w_reinforce",
                                          "negative_dominant:beta=10"], "--estimators", "-e",
                                         help="Estimators to compare, each NAME or NAME:key=value,…; repeat the option."),
    steps: int = typer.Option(300, help="Training steps per run."),
    prompts: int = typer.Option(512, help="Simulated prompts P."),
    trajectories: int = typer.Option(64, help="Trajectories per prompt M."),
    correct: int = typer.Option(4, help="Correct trajectories per prompt K."),
    group_size: int = typer.Option(8, "--group-size", "-g", help="Samples per prompt per step G."),
    difficulty: str = typer.Option("beta:1,3", help="Base success probability over prompts: "
                                                    "beta:a,b | uniform:lo,hi | ladder:p1,p2,…"),
    parameterisation: str = typer.Option("tabular", help="tabular (independent prompts) or "
                                                         "lowrank (shared strategy factors)."),
    rank: int = typer.Option(8, help="Rank r of the lowrank parameterisation."),
    optimizer: str = typer.Option("sgd", help="sgd or adam."),
    lr: float = typer.Option(0.1, help="Learning rate."),
    loss_agg: str = typer.Option("sum", help="sum over samples (Theorem 1) or mean (step independent of P)."),
    seed: int = typer.Option(0, help="Seed: the same base policy for every estimator."),
    output: str = typer.Option(None, "--output", "-o", help="Write every run's history as JSON here."),
) -> None:
    """Train the simulated policy (grae.sim) with each estimator and print exact pass@k, base vs after."""
    import torch

    from grae.sim import run_sim

    torch.set_num_threads(1)
    console = make_console(emoji=False)
    configs = _configs(console, estimators, steps=steps, prompts=prompts, trajectories=trajectories, correct=correct,
                       group_size=group_size, difficulty=difficulty, parameterisation=parameterisation, rank=rank,
                       optimizer=optimizer, lr=lr, seed=seed, loss_agg=loss_agg)
    if output:
        check_writable(console, output, "--output", is_file=True)
    results = {spec: run_sim(cfg) for spec, cfg in zip(estimators, configs)}
    title = (f"after {steps} steps — {parameterisation}, P={prompts}, M={trajectories}, K={correct}, G={group_size}, "
             f"{difficulty}, {optimizer} lr={lr}")
    for table in _tables(results, title):
        console.print(table)
    if output:
        Path(output).write_text(json.dumps({spec: {"config": r.config, "history": r.history, "seconds": r.seconds}
                                            for spec, r in results.items()}, indent=1, default=str))
        print_line(console, f"histories: {output}")


def _configs(console, estimators: list[str], **settings) -> list:
    """One checked :class:`~grae.sim.SimConfig` per ``--estimators`` spec; exit 2 naming what is wrong."""
    from grae.sim import SimConfig

    try:
        specs = [parse_estimator(s) for s in estimators]
        configs = [SimConfig(estimator=name, estimator_params=params, **settings,
                             eval_every=max(1, settings["steps"] // 6 or 1)) for name, params in specs]
        for cfg in configs:
            cfg.check()
    except (ValueError, KeyError, TypeError) as err:
        refuse(console, err.args[0] if err.args else err)
    return configs


def _tables(results: dict, title: str) -> tuple[Table, Table]:
    """Exact pass@k per k (base, then each estimator with its steps/s) and each estimator's change vs base."""
    first = next(iter(results.values()))
    ks = first.ks
    table = Table(title=f"exact pass@k (%) {title}")
    change = Table(title="change vs base (points)")
    for t in (table, change):
        t.add_column("policy")
        for k in ks:
            t.add_column(f"@{k}", justify="right")
    table.add_column("steps/s", justify="right")
    table.add_row("base", *[f"{100 * first.base[k]:.1f}" for k in ks], "")
    for spec, result in results.items():
        label = Text(spec)  # the estimator as given, literally (not read as rich markup)
        table.add_row(label, *[f"{100 * result.final[k]:.1f}" for k in ks], f"{result.steps_per_second:.0f}")
        change.add_row(label, *[f"{100 * (result.final[k] - result.base[k]):+.2f}" for k in ks])
    return table, change
