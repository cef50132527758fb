"""Run compare jobs as ``grae train`` subprocesses, ``parallel`` at a time, skipping finished ones.

Each job is an ordinary run directory (``jobs/<method>/seed<s>``). A job is finished when its
``eval/summary.json`` exists; an unfinished one is restarted with ``--resume``, so an interrupted
compare continues where it stopped. compare claims each job folder as its run's owner
(:func:`grae.train.rundir.claim`) before writing into it, so a folder that holds another run is
refused, naming the differing keys. The base model's held-out evaluation is identical for every job
(same model weights, problems, sampling seed): it is computed once, and its rows (with the record of
the weights they came from) are copied into each job, whose own evaluation then finds every sample
on disk.

With the study key ``eval:`` (:class:`grae.compare.grid.CompareConfig`) compare also evaluates every
finished job's final model and the base with those settings (exact pass@k with ``exact: true``); a
finished job is then never retrained, only re-evaluated.

A sitting stops as a whole: each job's processes run in their own session (the terminal's Ctrl-C reaches
compare alone), and compare passes a SIGINT or SIGTERM it receives on to every running job once — each
``grae train`` finishes its step, saves a checkpoint and exits — starts no further job, waits for them
and ends with :class:`SittingStopped` (no job is left running, none holds its folder, each resumes on the
next sitting). A second signal is passed on too: the jobs then stop at once (``grae train``'s rule).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from grae.compare.grid import CompareConfig, Job
from grae.compare.machines import check_sitting, this_machine
from grae.compare.probes import base_probe_evaluation, probes_command, probes_done
from grae.compare.progress import StatusLines
from grae.io import atomic_write_json, atomic_write_text


def job_command(job: Job, config_path: Path) -> list[str]:
    """A job's ``grae train``. Without the format-only oracle of its own (``eval.oracle``): the study pairs its
    arms against the base's once (``paired_against: oracle``), where every job would compute it again."""
    return [sys.executable, "-m", "grae.cli", "train", str(config_path), "--resume", "--no-progress",
            "--eval.oracle", "false"]


def frontier_command(cfg: CompareConfig, config_path: Path, job: Job) -> list[str]:
    """Evaluate a finished job at the study's frontier fractions (:mod:`grae.compare.frontier`), and at
    100 % with ``eval``."""
    extra = [f"--{k.replace('_', '-')}" if v is True else
             f"--{k.replace('_', '-')}={json.dumps(v) if isinstance(v, dict) else v}"
             for k, v in (cfg.evaluation() or {}).items() if v is not False]
    return [sys.executable, "-m", "grae.compare.frontier", str(config_path), *map(str, cfg.evaluated_fractions(job)),
            *extra]


def frontier_done(cfg: CompareConfig, job: Job) -> bool:
    """Every step compare evaluates ``job`` at has its rows, evaluated with the study's settings (or its
    weights are gone: nothing left to evaluate)."""
    from grae.compare.frontier import frontier_steps, rows_path, step_done, step_settings
    from grae.train.callbacks import snapshot_path

    fractions = cfg.evaluated_fractions(job)
    if not fractions:
        return True
    config = cfg.train_config(job)
    settings = step_settings(config, cfg.evaluation())
    for step in set(frontier_steps(config.max_steps, fractions).values()):
        weights = job.output_dir / "final" if step == config.max_steps else snapshot_path(job.output_dir, step)
        if (weights / "config.json").exists() and not step_done(rows_path(job.output_dir, step), settings):
            return False
    return True


def finished(cfg: CompareConfig, job: Job) -> bool:
    """``job`` is trained and evaluated wherever compare evaluates it (and probed, with ``mechanism``): no sitting
    would run it again."""
    return job.done and frontier_done(cfg, job) and probes_done(cfg, job)


def unfinished(cfg: CompareConfig) -> list[Job]:
    """The study's jobs a sitting would still run."""
    return [j for j in cfg.jobs() if not finished(cfg, j)]


class SittingStopped(RuntimeError):
    """A sitting stopped by SIGINT/SIGTERM: every running job was passed the signal and has ended (each keeps
    its newest checkpoint), no further job started."""

    def __init__(self, signum: int, stopped: list[str]):
        self.signum, self.stopped = signum, stopped
        name = signal.Signals(signum).name
        jobs = f"{len(stopped)} running job{'s' * (len(stopped) != 1)} ({', '.join(stopped)}) stopped" if stopped \
            else "no job was running"
        super().__init__(f"{name}: the sitting stopped as a whole, {jobs}, no further job started and none is left "
                         "running; rerun the same grae compare to resume (each stopped job continues from its "
                         "newest checkpoint)")


class JobProcesses:
    """The sitting's running job processes: each started in its own session, each passed on the signals the
    sitting receives (:meth:`stopping`); once one arrived no further process starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        #: the first signal received, or None
        self.signum: int | None = None

    def run(self, cmd: list[str], **kwargs) -> int | None:
        """``cmd``'s exit code, or None when the sitting is stopping (not started)."""
        with self._lock:
            if self.signum is not None:
                return None
            proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
            self._running.add(proc)
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._running.discard(proc)

    def pass_on(self, signum: int, _frame=None) -> None:
        with self._lock:
            self.signum = self.signum if self.signum is not None else signum
            running = list(self._running)
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    @contextlib.contextmanager
    def stopping(self) -> Iterator[None]:
        """SIGINT and SIGTERM passed on to the running processes while inside (main thread only: elsewhere
        Python cannot take signals, and the caller's own handling stands)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {sig: signal.signal(sig, self.pass_on) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)


def run_jobs(cfg: CompareConfig, *, log=print, seeds: list[int] | None = None,
             on_finished: Callable[[str], None] | None = None, status_every: float = 0.0) -> dict[str, float]:
    """Run every unfinished job (of ``seeds`` only, when given: a sitting that shares the study's seeds
    with another machine); returns wall seconds per job that ran (finished ones are skipped).
    ``on_finished("<method>/seed<s>")`` is called as each job finishes (one at a time), so a sitting stopped
    later still has a record of it. Every ``status_every`` seconds (> 0) a line per running job (step, reward,
    elapsed, ETA) and a study total are logged (:class:`grae.compare.progress.StatusLines`). A SIGINT/SIGTERM stops
    the sitting as a whole (module docstring): :class:`SittingStopped`."""
    jobs = cfg.jobs()
    evaluated = cfg.evaluated_fractions()
    left = unfinished(cfg)
    pending = [j for j in left if seeds is None or j.seed in seeds]
    pending.sort(key=lambda j: cfg.seeds.index(j.seed))  # seed by seed: a study cut short holds whole seeds
    log(f"{len(jobs) - len(left)} of {len(jobs)} jobs already finished; running {len(pending)}"
        + (f" (seeds {', '.join(map(str, seeds))} only)" if seeds is not None else ""))
    if evaluated and cfg.evaluation():  # the base model with the study's own settings (resumable)
        base_frontier_evaluation(cfg, jobs[0], log)
    if "temperature_frontier" in cfg.paired_against:
        base_temperature_evaluation(cfg, jobs[0], log)
    if cfg.mechanism:
        base_probe_evaluation(cfg, jobs[0], log)
    if not pending:
        return {}
    trains = [j for j in pending if not (j.output_dir / "final").exists()]  # not those only left to evaluate
    check_sitting(cfg, [j.seed for j in trains], this_machine())
    base_rows = share_base_evaluation(cfg, pending, log)
    threads = max(1, (os.cpu_count() or 1) // max(1, cfg.parallel))
    seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    finished_lock = threading.Lock()
    in_sitting = sum(seeds is None or j.seed in seeds for j in jobs)
    status = StatusLines(log, total=in_sitting, already_done=in_sitting - len(pending), parallel=max(1, cfg.parallel),
                         every=status_every)
    processes = JobProcesses()
    stopped: list[str] = []

    def run(job: Job) -> None:
        if processes.signum is not None:
            return
        try:
            run_one(job)
        except Exception as err:  # noqa: BLE001 - one job's failure (a claim refused, a write failed) ends only that job
            status.finish(f"{job.method}/seed{job.seed}", 0.0, False)
            errors[f"{job.method}/seed{job.seed}"] = " ".join(f"{type(err).__name__}: {err}".split())
            log(f"{job.method} seed {job.seed}: FAILED ({errors[f'{job.method}/seed{job.seed}']})")

    def run_one(job: Job) -> None:
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
        name = f"{job.method}/seed{job.seed}"
        status.start(name, job.output_dir / "metrics.jsonl", config.max_steps)
        t0 = time.perf_counter()
        with open(job.output_dir / "train.log", "a") as logfile:
            code: int | None = 0
            if not job.done:
                code = processes.run(job_command(job, config_path), stdout=logfile, stderr=subprocess.STDOUT, env=env)
            if code == 0 and cfg.evaluated_fractions(job):  # the frontier's checkpoints (and 100 % with eval)
                logfile.flush()
                code = processes.run(frontier_command(cfg, config_path, job), stdout=logfile, stderr=subprocess.STDOUT,
                                     env=env)
            if code == 0 and cfg.mechanism:  # the mechanism rows' probes (grae.compare.probes)
                logfile.flush()
                code = processes.run(probes_command(cfg, config_path), stdout=logfile, stderr=subprocess.STDOUT, env=env)
        seconds[name] = time.perf_counter() - t0
        done = code == 0 and job.done
        status.finish(name, seconds[name], done)
        if not done and processes.signum is not None:
            stopped.append(name)
            log(f"{job.method} seed {job.seed}: stopped ({signal.Signals(processes.signum).name}; exit {code}) after "
                f"{seconds[name]:.0f}s; the next sitting resumes it")
            return
        log(f"{job.method} seed {job.seed}: {'done' if done else f'FAILED (exit {code}, see {logfile.name})'}"
            f" in {seconds[name]:.0f}s")
        if done and on_finished is not None:
            with finished_lock:
                on_finished(name)

    status.begin()
    try:
        with processes.stopping(), ThreadPoolExecutor(max_workers=max(1, cfg.parallel)) as pool:
            list(pool.map(run, pending))
    finally:
        status.stop()
    if processes.signum is not None:
        raise SittingStopped(processes.signum, sorted(stopped))
    failed = [j for j in pending if not finished(cfg, j)]
    if failed:
        raise JobsFailed(failed, sum(seeds is None or j.seed in seeds for j in jobs), errors)
    return seconds


class JobsFailed(RuntimeError):
    """Some of a study's jobs failed; the others finished and are kept. The message is one line: how many,
    which, the first one's log (and its last line) and how to retry."""

    def __init__(self, failed: list[Job], total: int, errors: dict[str, str] | None = None):
        self.failed = failed
        first = failed[0]
        name = f"{first.method}/seed{first.seed}"
        log = first.output_dir / "train.log"
        why = (errors or {}).get(name) or last_line(log)
        names = ", ".join(f"{j.method}/seed{j.seed}" for j in failed)
        super().__init__(f"{len(failed)} of {total} jobs failed ({names}); {name}'s log: {log}"
                         + (f" (last line: {why})" if why else "")
                         + (f"; the other {total - len(failed)} jobs' results are kept" if total > len(failed) else "")
                         + "; rerunning grae compare retries only the jobs that did not finish")


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a log file ('' when it has none or cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " ".join(lines[-1].split()) if lines else ""


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
    """The base model with the study's own held-out settings (``frontier_eval`` or ``eval``), resumable,
    into ``<output_dir>/base/frontier.jsonl``: the 0 % point of every frontier path (and with ``eval``
    the report's base model)."""
    from grae.compare.frontier import counts_record, curve_path, frontier_eval_config, is_exact, step_done, step_settings
    from grae.eval.records import read_rows
    from grae.eval.stats import count_problems

    config = frontier_eval_config(cfg.train_config(job), cfg.evaluation())
    path = cfg.output_dir / "base" / "frontier.jsonl"
    settings = step_settings(cfg.train_config(job), cfg.evaluation())
    if not step_done(path, settings):
        _evaluate_base(config, path, lambda line: log("base frontier " + line), exact=is_exact(cfg.evaluation()))
        atomic_write_json(curve_path(path), {"step": 0, "settings": settings,
                                             **counts_record(count_problems(read_rows(path)))})
    return path


def base_temperature_evaluation(cfg: CompareConfig, job: Job, log) -> Path:
    """The base model's exact p per held-out problem at each temperature of the study's grid, into
    ``<output_dir>/base/temperature_frontier.json`` (grae.eval.temperature_frontier; kept while its settings hold)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.compare.frontier import frontier_eval_config
    from grae.data import get_task
    from grae.eval.identity import model_identity
    from grae.eval.temperature_frontier import TEMPERATURES, base_temperature_p, temperature_record
    from grae.presets import resolve_model

    config = frontier_eval_config(cfg.train_config(job), cfg.evaluation())
    path = cfg.output_dir / "base" / "temperature_frontier.json"
    model_path = resolve_model(config.model)
    settings = {"temperatures": list(cfg.temperatures or TEMPERATURES), "top_p": config.eval.top_p,
                "max_tokens": config.eval.max_tokens, "num_problems": config.eval.num_problems,
                "identity": model_identity(config.model, model_path)}
    if path.exists() and json.loads(path.read_text()).get("settings") == settings:
        return path
    task = get_task(config.task.name, **config.task.params)
    examples = task.heldout(config.eval.num_problems)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    log(f"base temperature frontier: {len(examples)} problems × {len(settings['temperatures'])} temperatures, exact")
    p = base_temperature_p(model, tokenizer, examples, task, settings["temperatures"], top_p=settings["top_p"],
                           max_tokens=settings["max_tokens"])
    atomic_write_json(path, temperature_record([str(e["question_id"]) for e in examples], p, settings))
    return path


def _evaluate_base(config, path: Path, log, *, exact: bool = False) -> None:
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
                     identity=model_identity(config.model, model_path), exact=exact)
