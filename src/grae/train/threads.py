"""How many torch threads ``grae train`` computes with, and why (printed in the run's header).

On a CPU, torch's default is one OpenMP thread per core. OpenMP threads wait for each other at every
parallel region by spinning, so when another process holds one of the cores each region waits for a thread
that is not running: on a 2-core machine with other processes busy, the tiny default's step took
9.7–13.8 s at 2 threads and 1.5–1.7 s at 1 thread (``bench/bench_threads.py``; docs/tiny.md, "Threads"), while
2 threads gain ≈ 20 % on an idle machine. So on a CPU grae uses :data:`DEFAULT_CPU_THREADS` unless told otherwise:
``--threads N``, or ``OMP_NUM_THREADS`` in the environment (``grae compare`` sets it per job). On a GPU
torch's default stands (the CPU threads only feed it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: torch threads on a CPU when neither --threads nor OMP_NUM_THREADS says (the measurement: module docstring)
DEFAULT_CPU_THREADS = 1


def choose_threads(requested: int | None, *, cuda: bool, environ: Mapping[str, str] | None = None,
                   ) -> tuple[int | None, str]:
    """(threads to set, where the number comes from); None threads: leave torch's default (a GPU run)."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        return _capped(requested, "--threads")
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return _capped(int(given), "OMP_NUM_THREADS")
    if cuda:
        return None, "torch's default on a GPU"
    return DEFAULT_CPU_THREADS, "grae's CPU default; --threads N to change"


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform says it, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _capped(threads: int, source: str) -> tuple[int, str]:
    """``threads`` from ``source``, capped at :func:`machine_cores` with the words that say so (more threads than
    cores only wait for each other: module docstring)."""
    cores = machine_cores()
    if threads > cores:
        return cores, f"{source} {threads} capped at this machine's {cores} core{'s' if cores != 1 else ''}"
    return threads, source


def apply_threads(requested: int | None, *, cuda: bool) -> str:
    """Set torch's intra-op threads as :func:`choose_threads` says; the header's words: ``1 torch thread
    (grae's CPU default; --threads N to change)``."""
    import torch

    threads, why = choose_threads(requested, cuda=cuda)
    if threads is not None:
        torch.set_num_threads(threads)
    n = torch.get_num_threads()
    return f"{n} torch thread{'s' if n != 1 else ''} ({why})"
