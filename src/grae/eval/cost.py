"""What a ``grae eval`` run will cost, said before it generates.

``grae eval MODEL`` with its defaults on MATH-500 is 500 problems × n = 256 = 128,000 samples of up to
4,096 tokens: hours on a GPU, weeks on a CPU. Before the first generate call :func:`estimate` counts the
samples still to draw (rows on disk are resumed), the token budget (samples × ``max_tokens``) and the
generate calls, and on the hf backend times one warm-up call (:func:`measure_decoding`: the first
prompt × the call's sequences, at most :data:`WARMUP_TOKENS` new tokens) for the prefill and the seconds
per decoding step at that batch, in this process, with its threads. The estimated time is then

    Σ over tasks  calls × (prefill + L × step)

where a call's length L is ``max_tokens`` (an upper estimate: a call ends when its longest sample does),
or, when every sequence of the warm-up call ended before :data:`WARMUP_TOKENS` (short answers, as the tiny
model's), the steps that call took. Later steps cost somewhat more than the warm-up's as the context grows.
On a CPU, above :data:`CPU_CONFIRM_SECONDS` the command asks for ``--yes`` or a smaller run (:func:`refusal`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: on a CPU, an evaluation estimated above this many seconds runs only with --yes (or a "yes" at the prompt)
CPU_CONFIRM_SECONDS = 3600.0
#: new tokens of the warm-up call (at most: it ends when every sequence has ended)
WARMUP_TOKENS = 16


@dataclass
class TaskCost:
    """One task's share: problems, samples per problem, samples still to draw, per-sample token budget, calls."""

    name: str
    problems: int
    n: int
    samples: int
    max_tokens: int
    calls: int


@dataclass
class CostEstimate:
    """The whole evaluation: per-task shares, how generation runs, and the warm-up's timings (None: not
    measured, e.g. on vLLM or when nothing is left to draw)."""

    tasks: list[TaskCost]
    backend: str
    device: str
    batch_size: int
    threads: int
    prefill_s: float | None = None
    step_s: float | None = None
    warmup_steps: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(t.samples for t in self.tasks)

    @property
    def tokens(self) -> int:
        """The token budget: every sample still to draw × its ``max_tokens``."""
        return sum(t.samples * t.max_tokens for t in self.tasks)

    @property
    def ended_early(self) -> bool:
        """Whether every sequence of the warm-up call ended before its :data:`WARMUP_TOKENS`."""
        return 0 < self.warmup_steps < WARMUP_TOKENS

    def call_steps(self, task: TaskCost) -> int:
        """Decoding steps per generate call: the warm-up call's when it ended early, else the budget."""
        return min(task.max_tokens, self.warmup_steps) if self.ended_early else task.max_tokens

    @property
    def seconds(self) -> float | None:
        """Estimated seconds (:func:`call_steps` steps per call); None without a warm-up."""
        if self.step_s is None:
            return None
        return sum(t.calls * ((self.prefill_s or 0.0) + self.call_steps(t) * self.step_s) for t in self.tasks)

    def line(self) -> str:
        """One line: problems × samples × token budget, the batch/threads in use, and the estimated time."""
        shares = "; ".join(f"{t.name}: {t.problems:,} problems × n = {t.n}" for t in self.tasks)
        budgets = sorted({t.max_tokens for t in self.tasks})
        budget = f"{budgets[0]:,}" if len(budgets) == 1 else f"{budgets[0]:,}–{budgets[-1]:,}"
        how = f"{self.backend} on {self.device}, batch {self.batch_size}, {self.threads} thread{'s' * (self.threads != 1)}"
        seconds = self.seconds
        if seconds is None:
            when = "time not measured" + (f" ({self.notes[0]})" if self.notes else "")
        else:
            ended = (f"its call ended after {self.warmup_steps} tokens" if self.ended_early
                     else "a call may run to the whole budget")
            when = (f"estimated {'' if self.ended_early else 'up to '}{duration(seconds)} (warm-up: "
                    f"{self.step_s * 1000:.0f} ms per decoding step, {(self.prefill_s or 0.0) * 1000:.0f} ms prefill; "
                    f"{ended})")
        return (f"cost: {shares} → {self.samples:,} samples to draw × up to {budget} tokens = {self.tokens:,} tokens "
                f"({how}); {when}")


def duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.4 h``, ``12 days``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def measure_decoding(sampler: Any, prompt: str, batch: int, tokens: int = WARMUP_TOKENS,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, int] | None:
    """``(prefill seconds, seconds per decoding step, steps)`` of one generate call of ``batch`` copies of
    ``prompt`` with ``tokens`` new tokens, timed from the sampler's per-step hook (``on_step``, hf backend);
    None for a sampler without one. The call is seeded inside ``fork_rng``: the samples drawn after it are
    the same as without it."""
    from .backends import SamplingSettings

    if not hasattr(sampler, "on_step"):
        return None
    stamps: list[float] = []
    settings, hook = sampler.settings, sampler.on_step
    sampler.settings = SamplingSettings(settings.temperature, settings.top_p, tokens)
    sampler.on_step = lambda *_: stamps.append(clock())
    start = clock()
    try:
        sampler.generate([prompt], batch, seed=0)
    finally:
        sampler.settings, sampler.on_step = settings, hook
    if not stamps:
        return None
    if len(stamps) == 1:  # the call ended after one token: no step to tell from the prefill
        return 0.0, stamps[0] - start, 1
    step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    return max(0.0, stamps[0] - start - step), step, len(stamps)


def refusal(estimate: CostEstimate, *, yes: bool, limit: float | None = None) -> str | None:
    """The one line that stops an evaluation estimated above ``limit`` seconds (default
    :data:`CPU_CONFIRM_SECONDS`) on a CPU without ``--yes``, naming ``--yes`` and the flags that shrink it;
    None when it may start."""
    limit = CPU_CONFIRM_SECONDS if limit is None else limit
    seconds = estimate.seconds
    if yes or estimate.device != "cpu" or seconds is None or seconds <= limit:
        return None
    biggest = max(estimate.tasks, key=lambda t: t.samples * t.max_tokens)
    bound = "" if estimate.ended_early else "up to "
    return (f"estimated {bound}{duration(seconds)} on this CPU (above {duration(limit)}): {estimate.samples:,} samples × "
            f"up to {biggest.max_tokens:,} tokens; add --yes to run it, or shrink it with --num-problems "
            f"(now {biggest.problems:,}), --n (now {biggest.n}) or --max-tokens (now {biggest.max_tokens:,})")
