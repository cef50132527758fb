"""The ``grae`` command line (typer). Each command group lives in its own module and is
imported lazily, so ``grae --help`` stays fast and a command only imports its own engine."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="grae",
    help="Group-relative advantage estimation for RLVR: train, evaluate and compare estimators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        from grae import __version__

        print(f"grae {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    _version_flag: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print grae's version and exit."),
    _verbose: bool = typer.Option(False, "--verbose", help="Keep third-party progress bars, log lines and warnings "
                                  "in piped output (they are left out of pipes and log files); may stand anywhere "
                                  "on the command line."),
) -> None:
    """grae: GRPO-family advantage estimators, trained through TRL or verl."""


#: command module -> how it is mounted. A module exposes ``register(app)``.
COMMAND_MODULES = [
    "grae.cli.estimators_cmd",
    "grae.cli.train_cmd",
    "grae.cli.eval_cmd",
    "grae.cli.tiny_cmd",
    "grae.cli.data_cmd",
    "grae.cli.compare_cmd",
    "grae.cli.sim_cmd",
]


def _supervised_command(args: list[str]) -> bool:
    """``grae train`` that trains (not ``--dry-run`` or ``--help``), on POSIX: it runs under a supervisor
    (:mod:`grae.supervision`)."""
    import os

    command = next((arg for arg in args if not arg.startswith("-")), None)
    return (command == "train" and os.name == "posix"
            and not any(arg in ("--dry-run", "--help", "-h", "--version") for arg in args))


def _mount() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


def main() -> None:
    import sys

    from grae.supervision import beacon

    if not beacon.adopt() and _supervised_command(sys.argv[1:]):
        from grae.supervision.supervisor import supervise

        sys.exit(supervise(sys.argv[1:]))  # the same command line again, as the training process
    from grae.cli.quiet import quiet_third_party, take_verbose

    sys.argv[1:] = take_verbose(sys.argv[1:])
    quiet_third_party()
    _mount()
    app()
