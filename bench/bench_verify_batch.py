"""The math verifier at batch scale: a batch of 256 completions, 10% of them hostile (answers that make
math_verify run past its time-out), verified the old way (one by one, every time-out paid again) and
the new way (``verify_math_batch``: the whole worker pool at once, identical pairs once, time-outs
cached), side by side in one process; the table reports both times and their ratio.

    python bench/bench_verify_batch.py [--n 256] [--hostile-frac 0.1] [--timeout 1.0] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from grae import rewards as R
from grae.rewards import verify

#: answers math_verify cannot finish within a second (tests/test_rewards.py HOSTILE)
HOSTILE = ["\\boxed{10^{10^{10}}}", "\\boxed{1000000!}", "The answer is 9^{9^{9^{9}}}"]


def batch(n: int, hostile_frac: float) -> tuple[list[str], list[str]]:
    """Every ``1/hostile_frac``-th completion hostile; the others ordinary answers that need math_verify
    (not the exact fast path), correct and wrong."""
    every = max(1, round(1 / hostile_frac)) if hostile_frac > 0 else n + 1
    completions, golds = [], []
    for i in range(n):
        if i % every == 0:
            completions.append(HOSTILE[(i // every) % len(HOSTILE)])
            golds.append("7")
            continue
        a = i % 17 + 2
        completions.append(f"so \\boxed{{\\frac{{\\sqrt{{{a * a}}}}}{{{a + (i % 3 == 0)}}}}}")
        golds.append("1" if i % 3 else f"\\frac{{{a}}}{{{a + 1}}}")
    return completions, golds


def measure(completions, golds, timeout, new: bool) -> tuple[float, dict]:
    R.clear_cache()
    R.reset_stats()
    verify.CACHE_TIMEOUTS = new
    t0 = time.perf_counter()
    if new:
        scores = R.verify_math_batch(completions, golds, timeout=timeout)
    else:
        scores = [R.verify_math(c, g, timeout=timeout) for c, g in zip(completions, golds)]
    seconds = time.perf_counter() - t0
    verify.CACHE_TIMEOUTS = True
    return seconds, {"scores": scores, **R.stats()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--hostile-frac", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2, help="math_verify worker processes")
    args = parser.parse_args()
    R.configure(max_workers=args.workers)
    R.warmup(args.workers)
    completions, golds = batch(args.n, args.hostile_frac)
    hostile = sum(c in HOSTILE for c in completions)
    old_s, old = measure(completions, golds, args.timeout, new=False)
    new_s, new = measure(completions, golds, args.timeout, new=True)
    assert old["scores"] == new["scores"], "the batch path changed a score"
    print(f"{args.n} completions, {hostile} hostile ({len(set(c for c in completions if c in HOSTILE))} distinct), "
          f"time-out {args.timeout:g}s, {args.workers} workers")
    print(f"{'':24s}{'seconds':>10s}{'time-outs':>11s}")
    print(f"{'one by one, no cache':24s}{old_s:10.2f}{old['timeouts']:11d}")
    print(f"{'verify_math_batch':24s}{new_s:10.2f}{new['timeouts']:11d}")
    print(f"speed-up: {old_s / new_s:.1f}x")


if __name__ == "__main__":
    main()
