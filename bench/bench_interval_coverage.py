"""Coverage of compare's seeds × problems interval (grae.compare.stats.two_level_bootstrap) in simulated
studies with a known truth (issue 21 §5).

A study: S seeds × P problems. Problem j has base log-odds b_j ~ N(mu, sd_problem); seed i shifts every
problem by a_i ~ N(0, sd_seed) and problem j by its own seed × problem interaction c_ij ~ N(0, sd_inter);
per-problem pass rate q_ij = sigmoid(b_j + a_i + c_ij), and the study sees the unbiased pass@k of n
samples per (seed, problem). Paired differences: a baseline study with no seed effect on the same
problems, and the method minus the baseline. The truth (the population mean over seeds and problems)
is computed by Monte Carlo with 400,000 draws. A nominal 95% interval should cover 93–97%.

    python bench/bench_interval_coverage.py [--reps 2000] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from grae.compare.stats import two_level_bootstrap
from grae.metrics import pass_at_k_many

CASES = {  # name: (seeds, sd_seed, sd_inter)
    "seed-dominated, 3 seeds": (3, 0.6, 0.3),
    "seed-dominated, 5 seeds": (5, 0.6, 0.3),
    "moderate, 5 seeds": (5, 0.2, 0.3),
    "seed-free, 5 seeds": (5, 0.0, 0.0),
}
PROBLEMS, N, MU, SD_PROBLEM = 200, 256, -1.5, 1.5
KS = (1, 256)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def truth(sd_seed: float, sd_inter: float, rng, draws: int = 400_000) -> dict[int, float]:
    """Population pass@k for infinitely many samples of n: E[1 - C(n-c, k)/C(n, k)] = E[1 - (1-q)^k]
    only for k = 1 and k = n up to the finite-n correction; use the exact unbiased estimator's mean,
    which for pass@k with n samples equals E[1 - prod] = E[1 - (1-q)^k] only when k = 1, so simulate."""
    q = sigmoid(rng.normal(MU, SD_PROBLEM, draws) + rng.normal(0, sd_seed, draws) + rng.normal(0, sd_inter, draws))
    c = rng.binomial(N, q)
    return {k: float(pass_at_k_many(np.full(draws, N), c, k).mean()) for k in KS}


def study(n_seeds: int, sd_seed: float, sd_inter: float, rng, b=None):
    b = rng.normal(MU, SD_PROBLEM, PROBLEMS) if b is None else b
    q = sigmoid(b[None] + rng.normal(0, sd_seed, (n_seeds, 1)) + rng.normal(0, sd_inter, (n_seeds, PROBLEMS)))
    c = rng.binomial(N, q)
    return np.stack([pass_at_k_many(np.full(c.shape, N), c, k) for k in KS], axis=-1), b  # [S, P, K]


def coverage(reps: int, seed: int = 0) -> list[tuple[str, str, float, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for name, (n_seeds, sd_seed, sd_inter) in CASES.items():
        target = truth(sd_seed, sd_inter, rng)
        hit = np.zeros(len(KS))
        width = np.zeros(len(KS))
        for _ in range(reps):
            values, _ = study(n_seeds, sd_seed, sd_inter, rng)
            for i, iv in enumerate(two_level_bootstrap(values)):
                hit[i] += iv.lo <= target[KS[i]] <= iv.hi
                width[i] += iv.hi - iv.lo
        out += [(name, f"pass@{k}", hit[i] / reps, width[i] / reps) for i, k in enumerate(KS)]
    return out


def paired_coverage(reps: int, seed: int = 1) -> list[tuple[str, str, float, float]]:
    """method − baseline on shared problems: the method's seeds vary, the baseline has none."""
    rng = np.random.default_rng(seed)
    out = []
    for name, (n_seeds, sd_seed, sd_inter) in CASES.items():
        target_m, target_b = truth(sd_seed, sd_inter, rng), truth(0.0, 0.0, rng)
        hit = np.zeros(len(KS))
        for _ in range(reps):
            method, b = study(n_seeds, sd_seed, sd_inter, rng)
            base, _ = study(1, 0.0, 0.0, rng, b)
            diff = method - base  # the baseline's one evaluation paired with every seed
            for i, iv in enumerate(two_level_bootstrap(diff)):
                hit[i] += iv.lo <= target_m[KS[i]] - target_b[KS[i]] <= iv.hi
        out += [(name, f"paired pass@{k}", hit[i] / reps, float("nan")) for i, k in enumerate(KS)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = coverage(args.reps) + paired_coverage(args.reps)
    print(f"| case | metric | coverage of nominal 95% ({args.reps} studies) | mean width |")
    print("|---|---|---|---|")
    for name, metric, cov, width in rows:
        print(f"| {name} | {metric} | {100 * cov:.1f}% | {'' if width != width else f'{100 * width:.2f}'} |")
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
