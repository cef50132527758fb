"""``grae compare CONFIG``: run a grid of train+eval jobs and write the multi-seed report; ``grae compare
SUMMARY.json --report-only`` re-renders a report from the table its ``summary.json`` carries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from grae.cli.output import check_writable, error, refuse
from grae.cli.output import console as make_console
from grae.printing import line_printer, print_line

# grae.compare and grae.train are imported inside the functions that use them: they load torch, which
# `grae --help` and `grae compare --help` must not wait for.

#: seconds between status lines while jobs run (--status-every): at a terminal, and in a pipe or log file
STATUS_EVERY_TERMINAL, STATUS_EVERY_PIPE = 15.0, 60.0


def register(app: typer.Typer) -> None:
    """Mount ``grae compare`` on ``app``."""
    app.command("compare")(compare)


def compare(
    config: str = typer.Argument(..., help="Compare YAML (see grae.compare.grid; studies/ has examples), or with "
                                 "--report-only a report's summary.json to re-render it without reading rows."),
    report_only: bool = typer.Option(False, "--report-only", help="Aggregate finished jobs without running any."),
    output: str | None = typer.Option(None, "--output", "-o", help="With a summary.json: where to write the "
                                      "re-rendered report [default: the summary's folder]."),
    parallel: int | None = typer.Option(None, "--parallel", min=1, help="Jobs at once on this machine [default: "
                                        "the study's parallel]; changes no job."),
    status_every: float | None = typer.Option(None, "--status-every", min=0, help="Seconds between the lines "
                                              "that show each running job (step, reward, elapsed, ETA) and the "
                                              "study total; 0: none [default: 15 at a terminal, 60 in a pipe]."),
    seeds: str | None = typer.Option(None, "--seeds", help="Comma-separated seeds of the study to run in this "
                                     "sitting (another machine runs the rest); the report is written once "
                                     "every job of the study has finished [default: all]."),
) -> None:
    """Run methods × seeds of `grae train` (skipping finished jobs) and report pass@k with
    confidence intervals, paired differences against the baseline and training dynamics."""
    if config.endswith(".json"):
        _rerender(config, report_only, output)
        return
    console = make_console(emoji=False)  # paths and job names print literally
    if output is not None:
        refuse(console, "--output: only with a summary.json (a study's report goes to its output_dir)")
    cfg = _load_study(console, config, parallel)
    chosen = _chosen_seeds(console, seeds, cfg.seeds)
    if report_only:
        _check_finished(console, cfg)
    check_writable(console, cfg.output_dir, "output_dir")  # before any job runs
    if cfg.jobs_dir is not None and not report_only:
        check_writable(console, cfg.jobs_dir, "jobs_dir")
    if not report_only and not _run_sitting(console, cfg, chosen, status_every):
        return
    _write_report(console, cfg)


def _load_study(console, config: str, parallel: int | None):
    """The study's config (exit 2 on a config error), with ``--parallel`` where given."""
    from grae.compare.grid import load_compare_config
    from grae.train.config import ConfigError

    try:
        cfg = load_compare_config(config)
    except ConfigError as err:
        error(console, "config error", err)
        raise typer.Exit(2) from None
    if parallel is not None:
        cfg.parallel = parallel
    return cfg


def _chosen_seeds(console, text: str | None, study_seeds: list[int]) -> list[int] | None:
    """``--seeds``' list, each one of the study's (exit 2 naming the flag otherwise)."""
    if text is None:
        return None
    try:
        chosen = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        chosen = []
    unknown = [s for s in chosen if s not in study_seeds]
    if not chosen or unknown:
        refuse(console, f"--seeds {text!r}: give comma-separated seeds of the study "
               f"({', '.join(map(str, study_seeds))})" + (f"; not in it: {unknown}" if unknown else ""))
    return chosen


def _check_finished(console, cfg) -> None:
    """``--report-only``: exit 2 unless every job has finished (and has the study eval settings' rows)."""
    from grae.compare.runner import frontier_done

    missing = [job for job in cfg.jobs() if not job.done or (cfg.eval and not frontier_done(cfg, job))]
    if missing:
        refuse(console, f"--report-only: {len(missing)} of {len(cfg.jobs())} jobs have not finished "
               f"{'or lack the study eval settings rows ' if cfg.eval else ''}"
               f"(first: {missing[0].output_dir}); run without --report-only to train or evaluate them")


def _run_sitting(console, cfg, chosen: list[int] | None, status_every: float | None) -> bool:
    """Run the sitting's jobs (the ``chosen`` seeds' or all), recording each as it finishes and then the sitting's
    wall time; False when jobs of other seeds have not finished, so the report is not written yet."""
    from grae.compare import runner
    from grae.compare.report import log_invocation

    started, t0 = time.time(), time.perf_counter()

    def record(job: str) -> None:
        log_invocation(cfg.output_dir, started=started, wall_seconds=time.perf_counter() - t0, jobs_run=[job])

    if status_every is None:
        status_every = STATUS_EVERY_TERMINAL if console.is_terminal else STATUS_EVERY_PIPE
    with _sitting_errors(console):
        seconds = runner.run_jobs(cfg, log=line_printer(console), seeds=chosen, on_finished=record,
                                  status_every=status_every)
    if seconds:  # the sitting's whole wall time (its jobs are recorded as each finished)
        log_invocation(cfg.output_dir, started=started, wall_seconds=time.perf_counter() - t0, jobs_run=[])
    left = runner.unfinished(cfg) if chosen is not None else []
    if left:
        print_line(console, f"report: not written: {len(left)} of {len(cfg.jobs())} jobs (seeds outside --seeds) "
                            "have not finished; the sitting that runs them writes it")
    return not left


@contextmanager
def _sitting_errors(console) -> Iterator[None]:
    """A failed job (exit 1), a seed split across machines (2) or a stopped sitting (130 on SIGINT, 143 on
    SIGTERM, as grae train's) as one line and its exit code."""
    from grae.compare.machines import SplitSeed
    from grae.compare.runner import JobsFailed, SittingStopped
    from grae.train.run import INTERRUPTED_EXIT

    try:
        yield
    except JobsFailed as err:
        refuse(console, err, 1)
    except SplitSeed as err:
        refuse(console, err, 2)
    except SittingStopped as err:
        error(console, "interrupted:", err)
        raise typer.Exit(INTERRUPTED_EXIT.get(err.signum, 1)) from None


def _write_report(console, cfg) -> None:
    """The study's report from its jobs' rows, and its path; exit 1 on a rule that cannot be decided, 2 on a study
    file no run wrote (a curve's counts, invocations.jsonl: one line each)."""
    from grae.compare.report import write_compare_report
    from grae.compare.rules.common import RuleError

    try:
        report = write_compare_report(cfg)
    except RuleError as err:
        refuse(console, err, 1)
    except ValueError as err:
        refuse(console, err, 2)
    print_line(console, f"report: {report}")


def _rerender(summary: str, report_only: bool, output: str | None) -> None:
    """``grae compare SUMMARY.json --report-only [-o DIR]``: the report rendered from the table alone."""
    from grae.compare.report import render
    from grae.compare.results import from_summary
    from grae.compare.rules.common import RuleError

    console = make_console(emoji=False)
    if not report_only:
        refuse(console, f"{summary}: a summary.json can only be re-rendered; add --report-only (or give the "
               "study's YAML to run it)")
    try:
        results = from_summary(summary)
    except ValueError as err:
        refuse(console, err)
    out = Path(output) if output else Path(summary).parent
    check_writable(console, out, "--output")
    try:
        report = render(results, out)
    except RuleError as err:
        refuse(console, err, 1)
    print_line(console, f"report: {report}")
