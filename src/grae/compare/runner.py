"""Run compare jobs as ``grae train`` subprocesses, ``parallel`` at a time, skipping finished ones.

Each job is an ordinary run directory (``jobs/<method>/seed<s>``). A job is finished when its
``eval/summary.json`` exists; an unfinished one is restarted with ``--resume``, so an interrupted
compare continues where it stopped. compare claims each job folder as its run's owner
(:func:`grae.train.rundir.claim`) before writing into it, so a folder that holds another run is
refused, naming the differing keys. The base model's held-out evaluation is identical for every job
(same model weights, problems, sampling seed): it is computed once, and its rows (with the record of
the weights they came from) are copied into each job, whose own evaluation then finds every sample
on disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from grae.compare.grid import CompareConfig, Job
from grae.io import atomic_write_text


def job_command(job: Job, config_path: Path) -> list[str]:
    return [sys.executable, "-m", "grae.cli", "train", str(config_path), "--resume", "--no-progress"]


def frontier_command(cfg: CompareConfig, config_path: Path) -> list[str]:
    """Evaluate a finished job at the study's frontier fractions (:mod:`grae.compare.frontier`)."""
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in (cfg.frontier_eval or {}).items()]
    return [sys.executable, "-m", "grae.compare.frontier", str(config_path), *map(str, cfg.frontier), *extra]


def frontier_done(cfg: CompareConfig, job: Job) -> bool:
    """Every frontier step of ``job`` has its rows (or its weights are gone: nothing left to evaluate)."""
    from grae.compare.frontier import curve_path, frontier_steps, rows_path
    from grae.train.callbacks import snapshot_path

    max_steps = cfg.train_config(job).max_steps
    for step in set(frontier_steps(max_steps, cfg.frontier).values()):
        weights = job.output_dir / "final" if step == max_steps else snapshot_path(job.output_dir, step)
        rows = rows_path(job.output_dir, step)
        if (weights / "config.json").exists() and not curve_path(rows).exists():
            return False
    return True


def run_jobs(cfg: CompareConfig, *, log=print) -> dict[str, float]:
    """Run every unfinished job; returns wall seconds per job that ran (finished ones are skipped)."""
    jobs = cfg.jobs()
    pending = [j for j in jobs if not j.done or (cfg.frontier and not frontier_done(cfg, j))]
    log(f"{len(jobs) - len(pending)} of {len(jobs)} jobs already finished; running {len(pending)}")
    if not pending:
        return {}
    base_rows = share_base_evaluation(cfg, pending, log)
    if cfg.frontier and cfg.frontier_eval:
        base_frontier_evaluation(cfg, pending[0], log)
    threads = max(1, (os.cpu_count() or 1) // max(1, cfg.parallel))
    seconds: dict[str, float] = {}

    def run(job: Job) -> None:
        from grae.eval.runner import settings_path
        from grae.train.config import to_dict
        from grae.train.rundir import claim, release

        config_path = job.output_dir / "job.yaml"
        config = cfg.train_config(job)
        claim(job.output_dir, to_dict(config), resume=True, overwrite=False)  # this job's run, or refused
        release(job.output_dir)  # the job's grae train process holds the directory while it runs
        atomic_write_text(config_path, yaml.safe_dump(to_dict(config), sort_keys=False))
        if base_rows is not None:
            target = job.output_dir / "eval" / "before.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                shutil.copyfile(settings_path(base_rows), settings_path(target))
                shutil.copyfile(base_rows, target)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        t0 = time.perf_counter()
        with open(job.output_dir / "train.log", "a") as logfile:
            proc: subprocess.CompletedProcess = subprocess.CompletedProcess([], 0)
            if not job.done:
                proc = subprocess.run(job_command(job, config_path), stdout=logfile, stderr=subprocess.STDOUT, env=env)
            if proc.returncode == 0 and cfg.frontier:  # the checkpoints at the frontier's fractions
                logfile.flush()
                proc = subprocess.run(frontier_command(cfg, config_path), stdout=logfile, stderr=subprocess.STDOUT,
                                      env=env)
        seconds[f"{job.method}/seed{job.seed}"] = time.perf_counter() - t0
        status = "done" if proc.returncode == 0 and job.done else f"FAILED (exit {proc.returncode}, see {logfile.name})"
        log(f"{job.method} seed {job.seed}: {status} in {seconds[f'{job.method}/seed{job.seed}']:.0f}s")

    with ThreadPoolExecutor(max_workers=max(1, cfg.parallel)) as pool:
        list(pool.map(run, pending))
    failed = [j for j in pending if not j.done or (cfg.frontier and not frontier_done(cfg, j))]
    if failed:
        raise RuntimeError(f"{len(failed)} job(s) failed: " + ", ".join(f"{j.method}/seed{j.seed}" for j in failed))
    return seconds


def share_base_evaluation(cfg: CompareConfig, pending: list[Job], log) -> Path | None:
    """Evaluate the base model once (resumable) into ``<output_dir>/base/before.jsonl``.

    Only valid when every job uses the same model, task, and eval settings; otherwise None.
    """
    configs = [cfg.train_config(j) for j in pending]
    first = configs[0]
    if not first.eval.enabled or any((c.model, c.task, c.eval) != (first.model, first.task, first.eval) for c in configs):
        return None
    path = cfg.output_dir / "base" / "before.jsonl"
    _evaluate_base(first, path, lambda line: log("base " + line))
    return path


def base_frontier_evaluation(cfg: CompareConfig, job: Job, log) -> Path:
    """The base model with the frontier's held-out settings (``frontier_eval``), resumable, into
    ``<output_dir>/base/frontier.jsonl``: the 0 % point of every frontier path."""
    from grae.compare.frontier import frontier_eval_config

    config = frontier_eval_config(cfg.train_config(job), cfg.frontier_eval)
    path = cfg.output_dir / "base" / "frontier.jsonl"
    _evaluate_base(config, path, lambda line: log("base frontier " + line))
    return path


def _evaluate_base(config, path: Path, log) -> None:
    """Held-out evaluation of ``config.model`` (untrained) with ``config``'s eval settings into ``path``, resumable."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval.identity import model_identity
    from grae.presets import resolve_model
    from grae.train.run import evaluate_heldout

    task = get_task(config.task.name, **config.task.params)
    model_path = resolve_model(config.model)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    evaluate_heldout(config, model, tokenizer, task.heldout(config.eval.num_problems), task, path, log,
                     identity=model_identity(config.model, model_path))
