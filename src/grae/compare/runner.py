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


def run_jobs(cfg: CompareConfig, *, log=print) -> dict[str, float]:
    """Run every unfinished job; returns wall seconds per job that ran (finished ones are skipped)."""
    jobs = cfg.jobs()
    pending = [j for j in jobs if not j.done]
    log(f"{len(jobs) - len(pending)} of {len(jobs)} jobs already finished; running {len(pending)}")
    if not pending:
        return {}
    base_rows = share_base_evaluation(cfg, pending, log)
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
            proc = subprocess.run(job_command(job, config_path), stdout=logfile, stderr=subprocess.STDOUT, env=env)
        seconds[f"{job.method}/seed{job.seed}"] = time.perf_counter() - t0
        status = "done" if proc.returncode == 0 and job.done else f"FAILED (exit {proc.returncode}, see {logfile.name})"
        log(f"{job.method} seed {job.seed}: {status} in {seconds[f'{job.method}/seed{job.seed}']:.0f}s")

    with ThreadPoolExecutor(max_workers=max(1, cfg.parallel)) as pool:
        list(pool.map(run, pending))
    failed = [j for j in pending if not j.done]
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
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.presets import resolve_model
    from grae.train.run import evaluate_heldout

    path = cfg.output_dir / "base" / "before.jsonl"
    task = get_task(first.task.name, **first.task.params)
    model_path = resolve_model(first.model)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    from grae.eval.identity import model_identity

    evaluate_heldout(first, model, tokenizer, task.heldout(first.eval.num_problems), task, path,
                     lambda line: log("base " + line), identity=model_identity(first.model, model_path))
    return path
