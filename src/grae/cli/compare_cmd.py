"""``grae compare CONFIG``: run a grid of train+eval jobs and write the multi-seed report; ``grae compare
SUMMARY.json --report-only`` re-renders a report from the table its ``summary.json`` carries."""

from __future__ import annotations

import typer

from grae.cli.output import check_writable, error
from grae.cli.output import console as make_console

#: seconds between status lines while jobs run (--status-every): at a terminal, and in a pipe or log file
STATUS_EVERY_TERMINAL, STATUS_EVERY_PIPE = 15.0, 60.0


def register(app: typer.Typer) -> None:
    @app.command("compare")
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
        import time

        if config.endswith(".json"):
            _rerender(config, report_only, output)
            return
        if output is not None:
            error(make_console(emoji=False), "error:", "--output: only with a summary.json (a study's report goes to its "
                  "output_dir)")
            raise typer.Exit(2)

        from grae.compare.grid import load_compare_config
        from grae.compare.report import log_invocation, write_compare_report
        from grae.compare.runner import run_jobs
        from grae.train.config import ConfigError

        console = make_console(emoji=False)  # paths and job names print literally
        try:
            cfg = load_compare_config(config)
        except ConfigError as err:
            error(console, "config error", err)
            raise typer.Exit(2) from None
        if parallel is not None:
            cfg.parallel = parallel
        chosen = _chosen_seeds(console, seeds, cfg.seeds)
        if report_only:
            from grae.compare.runner import frontier_done

            missing = [job for job in cfg.jobs() if not job.done or (cfg.eval and not frontier_done(cfg, job))]
            if missing:
                error(console, "error:", f"--report-only: {len(missing)} of {len(cfg.jobs())} jobs have not finished "
                      f"{'or lack the study eval settings rows ' if cfg.eval else ''}"
                      f"(first: {missing[0].output_dir}); run without --report-only to train or evaluate them")
                raise typer.Exit(2)
        check_writable(console, cfg.output_dir, "output_dir")  # before any job runs
        if cfg.jobs_dir is not None and not report_only:
            check_writable(console, cfg.jobs_dir, "jobs_dir")
        started, t0 = time.time(), time.perf_counter()
        if not report_only:
            from grae.compare.machines import SplitSeed
            from grae.compare.runner import JobsFailed, SittingStopped
            from grae.train.run import INTERRUPTED_EXIT

            def record(job: str) -> None:
                log_invocation(cfg.output_dir, started=started, wall_seconds=time.perf_counter() - t0, jobs_run=[job])

            try:
                seconds = run_jobs(cfg, log=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True),
                                   seeds=chosen, on_finished=record,
                                   status_every=status_every if status_every is not None else
                                   STATUS_EVERY_TERMINAL if console.is_terminal else STATUS_EVERY_PIPE)
            except JobsFailed as err:
                error(console, "error:", err)
                raise typer.Exit(1) from None
            except SplitSeed as err:
                error(console, "error:", err)
                raise typer.Exit(2) from None
            except SittingStopped as err:  # 130 (SIGINT) / 143 (SIGTERM), as grae train's
                error(console, "interrupted:", err)
                raise typer.Exit(INTERRUPTED_EXIT.get(err.signum, 1)) from None
            if seconds:  # the sitting's whole wall time (its jobs are recorded as each finished)
                log_invocation(cfg.output_dir, started=started, wall_seconds=time.perf_counter() - t0, jobs_run=[])
            if chosen is not None:
                from grae.compare.runner import unfinished

                left = unfinished(cfg)
                if left:
                    console.print(f"report: not written: {len(left)} of {len(cfg.jobs())} jobs (seeds outside --seeds) "
                                  "have not finished; the sitting that runs them writes it", markup=False,
                                  highlight=False, soft_wrap=True)
                    return
        from grae.compare.rules.common import RuleError

        try:
            report = write_compare_report(cfg)
        except RuleError as err:
            error(console, "error:", err)
            raise typer.Exit(1) from None
        except ValueError as err:  # a study file no run wrote: a curve's counts, invocations.jsonl (one line each)
            error(console, "error:", err)
            raise typer.Exit(2) from None
        console.print(f"report: {report}", markup=False, highlight=False, soft_wrap=True)


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
        error(console, "error:", f"--seeds {text!r}: give comma-separated seeds of the study "
              f"({', '.join(map(str, study_seeds))})" + (f"; not in it: {unknown}" if unknown else ""))
        raise typer.Exit(2)
    return chosen


def _rerender(summary: str, report_only: bool, output: str | None) -> None:
    """``grae compare SUMMARY.json --report-only [-o DIR]``: the report rendered from the table alone."""
    from pathlib import Path

    from grae.compare.report import render
    from grae.compare.results import from_summary

    console = make_console(emoji=False)
    if not report_only:
        error(console, "error:", f"{summary}: a summary.json can only be re-rendered; add --report-only (or give the "
              "study's YAML to run it)")
        raise typer.Exit(2)
    try:
        results = from_summary(summary)
    except ValueError as err:
        error(console, "error:", err)
        raise typer.Exit(2) from None
    from grae.compare.rules.common import RuleError

    out = Path(output) if output else Path(summary).parent
    check_writable(console, out, "--output")
    try:
        report = render(results, out)
    except RuleError as err:
        error(console, "error:", err)
        raise typer.Exit(1) from None
    console.print(f"report: {report}", markup=False, highlight=False, soft_wrap=True)
