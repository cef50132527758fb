"""Verifiable rewards for RLVR.

* :func:`verify_math` - binary math correctness via math_verify, with a hard per-call timeout that works
  from any thread (persistent worker processes), a sympy-free fast path, and a hostile-input policy
  (length caps, never raises).
* :func:`score_procedural` - reasoning-gym ``score_answer``, binarised (``== 1.0``).
* :func:`extract_math_answer`, :func:`extract_procedural_answer`, :func:`extract_boxed`, ... - answer
  extraction.
* :func:`format_reward`, :func:`overlong_penalty` (DAPO Eq. 13) - shaping terms.
* TRL adapters: :func:`accuracy_reward`, :func:`make_reward_fn`, :func:`make_format_reward_fn`,
  :func:`make_overlong_reward_fn`; fault isolation: :func:`safe_reward`.
* :func:`stats` / :func:`reset_stats` - counters (calls, timeouts, errors, ...).

See docs/tasks.md.
"""

from grae.rewards._pool import WorkerStartError
from grae.rewards._stats import reset_stats, stats
from grae.rewards.adapters import (
    FormatReward,
    OverlongReward,
    TaskReward,
    accuracy_reward,
    make_format_reward_fn,
    make_overlong_reward_fn,
    make_reward_fn,
)
from grae.rewards.extract import (
    MAX_SCAN_CHARS,
    clean_answer,
    completion_text,
    extract_answer_tag,
    extract_boxed,
    extract_final_answer_line,
    extract_math_answer,
    extract_procedural_answer,
)
from grae.rewards.procedural import score_procedural
from grae.rewards.safe import AsyncSafeReward, RewardFunctionError, SafeReward, safe_reward
from grae.rewards.shaping import format_reward, overlong_penalty
from grae.rewards.verify import DEFAULT_TIMEOUT, MAX_ANSWER_CHARS, clear_cache, verify_math, verify_math_batch


def warmup(workers: int = 1) -> None:
    """Start ``workers`` math_verify worker processes now and wait until they are ready (~0.5-2 s each),
    so that the first :func:`verify_math` calls of a run do not pay the start-up."""
    from grae.rewards import _pool

    _pool.get_pool().warmup(workers)


def configure(
    *, max_workers: int | None = None, memory_mb: int | None = None, startup_timeout: float | None = None
) -> None:
    """Reconfigure the math_verify worker pool (stops the current idle workers).

    Args:
        max_workers: number of worker processes (default ``min(4, os.cpu_count())``); concurrent
            ``verify_math`` slow-path calls beyond this wait for a free worker.
        memory_mb: address-space cap per worker in MiB (default 3072; 0 = no cap).
        startup_timeout: seconds a new worker may take to become ready (default 120).
    """
    from grae.rewards import _pool

    _pool.configure(max_workers=max_workers, memory_mb=memory_mb, startup_timeout=startup_timeout)


def shutdown() -> None:
    """Stop idle math_verify workers (they are restarted on demand; also runs at interpreter exit)."""
    from grae.rewards import _pool

    _pool.shutdown()


__all__ = [
    "AsyncSafeReward",
    "DEFAULT_TIMEOUT",
    "FormatReward",
    "MAX_ANSWER_CHARS",
    "MAX_SCAN_CHARS",
    "OverlongReward",
    "RewardFunctionError",
    "SafeReward",
    "TaskReward",
    "WorkerStartError",
    "accuracy_reward",
    "clean_answer",
    "clear_cache",
    "completion_text",
    "configure",
    "extract_answer_tag",
    "extract_boxed",
    "extract_final_answer_line",
    "extract_math_answer",
    "extract_procedural_answer",
    "format_reward",
    "make_format_reward_fn",
    "make_overlong_reward_fn",
    "make_reward_fn",
    "overlong_penalty",
    "reset_stats",
    "safe_reward",
    "score_procedural",
    "shutdown",
    "stats",
    "verify_math",
    "verify_math_batch",
    "warmup",
]
