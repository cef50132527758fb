"""What a running study says while it runs: a line per running job (its step, reward, elapsed time and
ETA, read from the job's ``metrics.jsonl``) and a study total, printed every few seconds by
:class:`StatusLines` beside :func:`grae.compare.runner.run_jobs`.

A job's ETA is its elapsed time per trained step times the steps left; before its first logged step (the
model loads, the base is evaluated) and after its last (held-out evaluation of the trained model) the line
says which phase it is in. The study's ETA is the mean time of its finished jobs of this sitting times the
jobs left, divided by the jobs run at once, after the running jobs' own ETAs; before any has finished, a
running job's elapsed time plus its ETA stands in for a job's time.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def last_metrics_row(path: Path, tail: int = 65536) -> dict | None:
    """The last whole JSON row of a ``metrics.jsonl`` (None when it has none yet); reads only its end."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line, or the cut first one
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            return row
    return None


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class Running:
    """A job being run: its name, its ``metrics.jsonl``, its step budget and when this sitting started it."""

    name: str
    metrics: Path
    max_steps: int
    started: float
    #: (time, step) when this sitting first saw a logged step of the job: the rate is measured from there
    seen: tuple[float, int] | None = None


def job_line(job: Running, now: float) -> tuple[str, float | None]:
    """``"grpo/seed1: step 120/500 reward 0.412, 2m31s, ETA 7m50s"`` and the ETA in seconds (None when unknown).

    The rate is the wall time per step since the first step this sitting saw (so loading, the base evaluation
    and a resumed job's earlier steps are not in it); until a second step is seen, the step's own
    ``step_time``."""
    elapsed = now - job.started
    row = last_metrics_row(job.metrics)
    if row is None:
        return f"{job.name}: loading / evaluating the base model, {duration(elapsed)}", None
    step = int(row["step"])
    if job.seen is None:
        job.seen = (now, step)
    reward = row.get("reward_mean", row.get("reward"))
    text = f"{job.name}: step {step}/{job.max_steps}" + (f" reward {reward:.3f}" if isinstance(reward, (int, float)) else "")
    if step >= job.max_steps:
        return f"{text}, {duration(elapsed)}, evaluating the trained model", None
    seen_at, seen_step = job.seen
    step_time = row.get("step_time")
    per_step = ((now - seen_at) / (step - seen_step) if step > seen_step
                else float(step_time) if isinstance(step_time, (int, float)) and step_time > 0 else None)
    eta = per_step * (job.max_steps - step) if per_step is not None else None
    return f"{text}, {duration(elapsed)}" + (f", ETA {duration(eta)}" if eta is not None else ""), eta


@dataclass
class StatusLines:
    """Prints, every ``every`` seconds while jobs run, one line per running job and a study total through ``log``
    (``every`` ≤ 0: never). The runner calls :meth:`begin`, ``start``/``finish`` around each job, and :meth:`stop`."""

    log: Callable[[str], None]
    total: int
    already_done: int
    parallel: int
    every: float = 60.0
    running: dict[str, Running] = field(default_factory=dict)
    finished_seconds: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def begin(self) -> None:
        """Start printing (a daemon thread) until :meth:`stop`."""
        if self._thread is None and self.every > 0:
            self._thread = threading.Thread(target=self._loop, name="grae-compare-status", daemon=True)
            self._thread.start()

    def start(self, name: str, metrics: Path, max_steps: int) -> None:
        with self._lock:
            self.running[name] = Running(name, metrics, max_steps, time.monotonic())

    def finish(self, name: str, seconds: float, ok: bool) -> None:
        with self._lock:
            self.running.pop(name, None)
            if ok:
                self.finished_seconds.append(seconds)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def lines(self, now: float | None = None) -> list[str]:
        """The lines one print shows: each running job's, then the study's."""
        now = time.monotonic() if now is None else now
        with self._lock:
            running = list(self.running.values())
            finished = list(self.finished_seconds)
        out, etas, totals = [], [], []
        for job in running:
            line, eta = job_line(job, now)
            out.append("  " + line)
            etas.append(eta)
            if eta is not None:
                totals.append(now - job.started + eta)
        done = self.already_done + len(finished)
        left = self.total - done - len(running)  # not started yet
        per_job = sum(finished) / len(finished) if finished else sum(totals) / len(totals) if totals else None
        eta = None
        if per_job is not None and all(e is not None for e in etas):
            eta = max(etas, default=0.0) + per_job * max(0, left) / max(1, self.parallel)
        out.append(f"study: {done} of {self.total} jobs done, {len(running)} running, {max(0, left)} waiting; "
                   f"{duration(now - self.started)} elapsed" + (f", ETA {duration(eta)}" if eta is not None else ""))
        return out

    def _loop(self) -> None:
        while not self._stopped.wait(self.every):
            for line in self.lines():
                self.log(line)
