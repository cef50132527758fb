"""One study shared across machines: ``grae compare --seeds`` runs only those seeds' jobs (the rest are left
pending for another machine's sitting) and ``--parallel`` sets the jobs at once without changing any job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.cli import compare_cmd  # noqa: E402
from grae.compare import runner  # noqa: E402
from grae.compare.grid import load_compare_config  # noqa: E402


def write_study(tmp_path: Path) -> Path:
    study = {"base": "chain-sum", "methods": {"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}},
             "seeds": [1, 2, 3], "baseline": "grpo", "output_dir": str(tmp_path / "study"), "frontier": [],
             "parallel": 1}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def fake_training(monkeypatch) -> list[str]:
    """Replace the job subprocess with one that finishes the job at once; returns the jobs it ran."""
    ran: list[str] = []

    def finish(command, **kwargs):
        job_dir = Path(command[4]).parent
        (job_dir / "eval").mkdir(parents=True, exist_ok=True)
        (job_dir / "eval" / "summary.json").write_text(json.dumps({}))
        ran.append(f"{job_dir.parent.name}/{job_dir.name}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(runner.JobProcesses, "run", lambda self, command, **kwargs: finish(command, **kwargs).returncode)
    return ran


def test_run_jobs_with_seeds_runs_only_those_and_leaves_the_rest_pending(tmp_path, monkeypatch):
    cfg = load_compare_config(write_study(tmp_path))
    ran = fake_training(monkeypatch)
    lines: list[str] = []
    runner.run_jobs(cfg, log=lines.append, seeds=[2, 3])
    assert sorted(ran) == ["grpo/seed2", "grpo/seed3", "nsr/seed2", "nsr/seed3"]
    assert lines[0] == "0 of 6 jobs already finished; running 4 (seeds 2, 3 only)"
    assert [job.done for job in cfg.jobs() if job.seed == 1] == [False, False]
    runner.run_jobs(cfg, log=lines.append)  # the other machine's sitting: only what is left
    assert sorted(ran[4:]) == ["grpo/seed1", "nsr/seed1"]
    assert any(line.startswith("4 of 6 jobs already finished; running 2") for line in lines)


def test_cli_parallel_and_seeds_reach_the_runner_and_bad_values_name_the_flag(tmp_path, monkeypatch):
    study = write_study(tmp_path)
    seen: dict = {}
    original_run_jobs = runner.run_jobs

    def run_jobs(cfg, *, log, seeds=None, on_finished=None, status_every=0.0):
        seen.update(parallel=cfg.parallel, seeds=seeds)
        raise runner.JobsFailed(cfg.jobs()[:1], len(cfg.jobs()))  # stop before the report: nothing trained

    monkeypatch.setattr(runner, "run_jobs", run_jobs)
    app = typer.Typer()
    compare_cmd.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps the command name
    cli = CliRunner()
    result = cli.invoke(app, ["compare", str(study), "--parallel", "6", "--seeds", "3,1"])
    assert result.exit_code == 1 and seen == {"parallel": 6, "seeds": [3, 1]}
    assert load_compare_config(study).parallel == 1  # the study file is not changed
    ran = fake_training(monkeypatch)
    monkeypatch.setattr(runner, "run_jobs", original_run_jobs)
    result = cli.invoke(app, ["compare", str(study), "--seeds", "2"])  # seeds 1 and 3 left: no report yet
    assert result.exit_code == 0 and sorted(ran) == ["grpo/seed2", "nsr/seed2"], result.output
    assert "report: not written: 4 of 6 jobs" in " ".join(result.output.split())
    assert not (tmp_path / "study" / "report.md").exists()
    rows = [json.loads(line) for line in (tmp_path / "study" / "invocations.jsonl").read_text().splitlines()]
    assert sorted(r["jobs_run"][0] for r in rows[:2]) == ["grpo/seed2", "nsr/seed2"] and rows[2]["jobs_run"] == []
    for bad in ("4", "1,x", ""):
        result = cli.invoke(app, ["compare", str(study), "--seeds", bad])
        assert result.exit_code == 2 and "--seeds" in result.output, bad
    result = cli.invoke(app, ["compare", str(study), "--parallel", "0"])
    assert result.exit_code == 2 and "--parallel" in result.output


def test_a_sitting_that_fails_still_records_the_jobs_it_finished(tmp_path, monkeypatch):
    """Each job is recorded as it finishes: a sitting that ends in a failed job (or is stopped) keeps the
    record of the others, which the report's budget counts (grae.compare.report.invocations_line)."""
    study = write_study(tmp_path)
    ran = fake_training(monkeypatch)
    finish = runner.JobProcesses.run

    def fail_nsr(self, command, **kwargs):
        if "/nsr/" in command[4]:
            return 1
        return finish(self, command, **kwargs)

    monkeypatch.setattr(runner.JobProcesses, "run", fail_nsr)
    app = typer.Typer()
    compare_cmd.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["compare", str(study), "--seeds", "1"])
    assert result.exit_code == 1 and ran == ["grpo/seed1"], result.output
    rows = [json.loads(line) for line in (tmp_path / "study" / "invocations.jsonl").read_text().splitlines()]
    assert [r["jobs_run"] for r in rows] == [["grpo/seed1"]]
