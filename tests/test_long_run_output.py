"""A running study's status lines, third-party noise out of pipes, tables at 80 columns
in a pipe; final/ and the last checkpoint stored once, the run directory's size; the default thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grae.cli.quiet import QUIET_ENV, VERBOSE_ENV, quiet_third_party, take_verbose
from grae.compare.progress import Running, StatusLines, duration, job_line, last_metrics_row
from grae.train.disk import directory_size, human_bytes, share_identical_files
from grae.train.threads import DEFAULT_CPU_THREADS, choose_threads
from timeouts import scaled

# ---- grae compare's status lines ------------------------------------------------------------------------------


def _metrics(path, rows, torn: str = ""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)
    return path


def test_a_job_line_says_step_reward_elapsed_and_eta(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    job = Running("grpo/seed1", metrics, max_steps=100, started=1000.0)
    assert job_line(job, 1030.0) == ("grpo/seed1: loading / evaluating the base model, 30s", None)
    _metrics(metrics, [{"step": 1, "reward_mean": 0.25, "step_time": 2.0}])
    line, eta = job_line(job, 1040.0)  # first step seen: its own step_time is the rate
    assert line == "grpo/seed1: step 1/100 reward 0.250, 40s, ETA 3m18s" and eta == pytest.approx(198.0)
    _metrics(metrics, [{"step": s, "reward_mean": 0.5, "step_time": 2.0} for s in range(1, 11)], torn='{"step": 11, "re')
    line, eta = job_line(job, 1085.0)  # 9 steps in the 45 s since: 5 s a step, 90 steps left
    assert line == "grpo/seed1: step 10/100 reward 0.500, 1m25s, ETA 7m30s" and eta == pytest.approx(450.0)
    _metrics(metrics, [{"step": 100, "reward_mean": 0.75}])
    assert job_line(job, 1600.0) == ("grpo/seed1: step 100/100 reward 0.750, 10m00s, evaluating the trained model", None)


def test_the_study_line_counts_jobs_and_projects_the_rest(tmp_path):
    status = StatusLines(lambda line: None, total=6, already_done=1, parallel=2, started=0.0)
    status.start("a/seed0", _metrics(tmp_path / "a.jsonl", [{"step": 5, "reward_mean": 0.1, "step_time": 10.0}]), 10)
    status.running["a/seed0"].started = 0.0
    lines = status.lines(now=100.0)
    assert lines[0] == "  a/seed0: step 5/10 reward 0.100, 1m40s, ETA 50s"
    # no job of this sitting finished: the running one's 100 s + 50 s stands for a job; 4 waiting on 2 slots
    assert lines[-1] == "study: 1 of 6 jobs done, 1 running, 4 waiting; 1m40s elapsed, ETA 5m50s"
    status.finish("a/seed0", 120.0, ok=True)
    assert status.lines(now=130.0)[-1] == "study: 2 of 6 jobs done, 0 running, 4 waiting; 2m10s elapsed, ETA 4m00s"


def test_status_lines_are_printed_while_jobs_run(tmp_path):
    printed = []
    status = StatusLines(printed.append, total=1, already_done=0, parallel=1, every=0.05)
    status.begin()
    status.start("m/seed0", _metrics(tmp_path / "m.jsonl", [{"step": 2, "reward_mean": 0.5, "step_time": 1.0}]), 4)
    import time

    deadline = time.time() + scaled(10)
    while not any(line.startswith("study:") for line in printed) and time.time() < deadline:
        time.sleep(0.02)
    status.stop()
    assert any("m/seed0: step 2/4 reward 0.500" in line for line in printed)
    assert any(line.startswith("study: 0 of 1 jobs done, 1 running") for line in printed)


def test_last_metrics_row_and_duration(tmp_path):
    assert last_metrics_row(tmp_path / "none.jsonl") is None
    path = _metrics(tmp_path / "m.jsonl", [{"step": 1}, {"step": 2, "reward": 0.5}], torn='{"step"')
    assert last_metrics_row(path) == {"step": 2, "reward": 0.5}
    assert [duration(s) for s in (0, 59.4, 61, 3599, 3600, 7322)] == ["0s", "59s", "1m01s", "59m59s", "1h00m", "2h02m"]


# ---- piped output -----------------------------------------------------------------------------------------------


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


def test_third_party_noise_is_kept_out_of_pipes_unless_verbose(monkeypatch):
    import warnings

    for key in QUIET_ENV:  # set, then removed: monkeypatch puts back what was there
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    monkeypatch.setenv(VERBOSE_ENV, "0")
    with warnings.catch_warnings():
        assert quiet_third_party(_Stream(True)) is False and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ
        monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # what the user set stays
        assert quiet_third_party(_Stream(False)) is True
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
        with warnings.catch_warnings(record=True) as caught:  # grae's own warnings still show, no one else's
            warnings.warn_explicit("grae's", UserWarning, "x.py", 1, module="grae.data.local")
            warnings.warn_explicit("theirs", UserWarning, "y.py", 1, module="transformers.tokenization_utils")
        assert [str(w.message) for w in caught] == ["grae's"]
    assert take_verbose(["compare", "--verbose", "s.yaml"]) == ["compare", "s.yaml"] and os.environ[VERBOSE_ENV] == "1"
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    assert quiet_third_party(_Stream(False)) is False and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ


def test_a_piped_run_leaves_out_transformers_bars_and_verbose_brings_them_back(tmp_path):
    """A real `grae eval` in a pipe: no "Loading weights" bar; with --verbose (after the other options) it is there."""
    from tiny_model import build_random_tiny

    model = build_random_tiny(str(tmp_path / "tiny"))
    env = {k: v for k, v in os.environ.items() if k not in (*QUIET_ENV, VERBOSE_ENV)}
    outputs = []
    for extra in ([], ["--verbose"]):
        proc = subprocess.run([sys.executable, "-m", "grae.cli", "eval", model, "--tasks", "chain_sum", "--n", "1",
                               "--num-problems", "2", "--output", str(tmp_path / f"eval{len(extra)}"), *extra],
                              capture_output=True, text=True, timeout=scaled(120), env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        outputs.append(proc.stdout + proc.stderr)
    quiet, verbose = outputs
    assert "Loading weights" not in quiet and "Loading weights" in verbose
    assert "summary: " in quiet and "rows: " in quiet  # grae's own lines stay


# ---- disk ---------------------------------------------------------------------------------------------------------


def test_identical_files_are_stored_once_and_sizes_count_each_once(tmp_path):
    final, checkpoint = tmp_path / "final", tmp_path / "checkpoint-3"
    final.mkdir()
    checkpoint.mkdir()
    weights = os.urandom(50_000)
    (final / "model.safetensors").write_bytes(weights)
    (checkpoint / "model.safetensors").write_bytes(weights)
    (final / "config.json").write_text('{"a": 1}')
    (checkpoint / "config.json").write_text('{"a": 2}')  # same size, other bytes: kept apart
    (checkpoint / "optimizer.pt").write_bytes(b"x" * 1000)
    before = directory_size(tmp_path)
    assert share_identical_files(final, checkpoint) == 50_000
    assert os.path.samefile(final / "model.safetensors", checkpoint / "model.safetensors")
    assert not os.path.samefile(final / "config.json", checkpoint / "config.json")
    assert (final / "model.safetensors").read_bytes() == weights
    assert directory_size(tmp_path) == before - 50_000
    assert share_identical_files(final, checkpoint) == 50_000  # again: already one file, nothing rewritten
    import shutil

    shutil.rmtree(checkpoint)  # TRL rotating the checkpoint away keeps final/ whole
    assert (final / "model.safetensors").read_bytes() == weights
    assert [human_bytes(b) for b in (999, 1000, 38_200, 517_000_000, 1_100_000_000)] == [
        "999 B", "1.0 kB", "38.2 kB", "517 MB", "1.1 GB"]


# ---- threads ---------------------------------------------------------------------------------------------------


def test_the_thread_count_comes_from_the_flag_the_environment_or_the_cpu_default(monkeypatch):
    import grae.train.threads

    monkeypatch.setattr(grae.train.threads, "machine_cores", lambda: 4)  # the same on a machine with any core count
    assert choose_threads(3, cuda=False, environ={"OMP_NUM_THREADS": "2"}) == (3, "--threads")
    assert choose_threads(None, cuda=False, environ={"OMP_NUM_THREADS": "2"}) == (2, "OMP_NUM_THREADS")
    # above the cores, either source is capped at them, with words that say so
    assert choose_threads(6, cuda=False, environ={"OMP_NUM_THREADS": "2"}) == (
        4, "--threads 6 capped at this machine's 4 cores")
    assert choose_threads(None, cuda=False, environ={"OMP_NUM_THREADS": "5"}) == (
        4, "OMP_NUM_THREADS 5 capped at this machine's 4 cores")
    assert choose_threads(None, cuda=False, environ={"OMP_NUM_THREADS": "x"})[0] == DEFAULT_CPU_THREADS == 1
    assert choose_threads(None, cuda=True, environ={}) == (None, "torch's default on a GPU")
