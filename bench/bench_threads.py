"""Seconds per training step of ``grae train`` (the tiny default) at 1 and 2 torch threads, alone and
beside one competing busy process — the measurement behind the default thread count (issue 47 §9).

Run it with the whole machine (both cores, nothing else of yours running)::

    flock /tmp/cpu.lock python bench/bench_threads.py --steps 20

Each case is one ``grae train --max-steps STEPS --eval.enabled false --report false`` in a fresh run
directory with ``OMP_NUM_THREADS`` set (which grae's own default defers to); its
s/step is the median ``step_time`` of ``metrics.jsonl`` over the steps after the first (the first
includes warm-up). The competitor is ``python -c "while True: pass"``, unpinned, started before the run
and ended after it. Prints one line per case and a JSON line with every number, with the cores that
processes outside this bench kept busy meanwhile (``/proc/stat`` less this bench's children): a case
measured "alone" is alone only where that is near 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_case(threads: int, busy: bool, steps: int, root: Path) -> dict:
    out = root / f"t{threads}-{'busy' if busy else 'alone'}"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    busy0, ours0 = _busy_seconds(), _children_seconds()
    try:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "grae.cli", "train", "--max-steps", str(steps), "--eval.enabled", "false",
                        "--report", "false", "--no-progress", "--output-dir", str(out)],
                       env=env, check=True, stdout=subprocess.DEVNULL, timeout=600)
        wall = time.perf_counter() - t0
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    others = max(0.0, (_busy_seconds() - busy0) - (_children_seconds() - ours0)) / wall
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    times = [r["step_time"] for r in rows if r.get("step_time") is not None][1:]
    return {"threads": threads, "competitor": busy, "steps": steps, "s_per_step": round(statistics.median(times), 3),
            "s_per_step_max": round(max(times), 3), "wall_s": round(wall, 1),
            "other_processes_cores": round(others, 2)}


def _busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (``/proc/stat``: every state but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _children_seconds() -> float:
    """CPU seconds of this bench's ended children (the runs and the competitor)."""
    usage = os.times()
    return usage.children_user + usage.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for busy in (False, True):
            for threads in (1, 2):
                r = one_case(threads, busy, args.steps, Path(tmp))
                results.append(r)
                print(f"threads={threads} competitor={'yes' if busy else 'no '} {r['s_per_step']:.3f} s/step "
                      f"(max {r['s_per_step_max']:.3f}; {r['wall_s']:.0f} s wall for {args.steps} steps; other processes used "
                      f"{r['other_processes_cores']:.2f} cores)", flush=True)
    print(json.dumps({"cpu": _cpu(), "cores": os.cpu_count(), "results": results}))


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
