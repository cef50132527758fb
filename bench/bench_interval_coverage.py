"""Coverage of grae compare's 95% interval on simulated studies with a known truth (grae.compare.coverage).

    python bench/bench_interval_coverage.py [--repetitions 1500]
    python bench/bench_interval_coverage.py --bounded [--repetitions 1000]

Prints, per scenario, the fraction of studies whose interval covers the truth for a method's mean and for a
paired difference, at pass@1, pass@16 and pass@256 (200 problems × 256 samples), and the mean width.
``--bounded``: a method's mean only, the symmetric crossed interval beside the one reports show for a
proportion (``grae.compare.stats.proportion_interval``, inside [0, 1]), on every scenario and on the
near-the-bounds ones (20 problems × 16 samples, pass@1 and pass@8), with the share of symmetric intervals
that leave [0, 1].
"""

import argparse
import time

import numpy as np

from grae.compare.coverage import BOUNDARY_SCENARIOS, PILOT_SCENARIOS, SCENARIOS, coverage
from grae.compare.stats import crossed_interval, proportion_interval

KS = (1, 16, 256)


def outside(values, level=0.95):
    return [iv.lo < 0 or iv.hi > 1 for iv in crossed_interval(values, level)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=1500)
    parser.add_argument("--bounded", action="store_true", help="symmetric vs bounded interval of a method's mean")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.bounded:
        bounded(args.repetitions)
    else:
        print("| scenario | what | " + " | ".join(f"cover@{k}" for k in KS) + " | "
              + " | ".join(f"width@{k}" for k in KS) + " |")
        print("|---|---|" + "---:|" * (2 * len(KS)))
        for sc in SCENARIOS + PILOT_SCENARIOS:
            for paired in (False, True):
                cov, width = coverage(sc, KS, repetitions=args.repetitions, paired=paired, seed=7)
                what = "paired difference" if paired else "method mean"
                print(f"| {sc.name} | {what} | " + " | ".join(f"{c:.3f}" for c in cov) + " | "
                      + " | ".join(f"{100 * w:.2f}" for w in width) + " |", flush=True)
    print(f"\n{args.repetitions} repetitions per row, {time.perf_counter() - start:.0f} s")


def bounded(repetitions: int) -> None:
    print("| scenario | k | symmetric: cover | bounded: cover | symmetric: width | bounded: width | symmetric outside [0, 1] |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for sc in BOUNDARY_SCENARIOS + SCENARIOS + PILOT_SCENARIOS:
        ks = (1, 8) if sc in BOUNDARY_SCENARIOS else KS
        plain, plain_width = coverage(sc, ks, repetitions=repetitions, paired=False, seed=7)
        fit, fit_width = coverage(sc, ks, repetitions=repetitions, paired=False, seed=7, interval=proportion_interval)
        with np.errstate(invalid="ignore"):  # the escape 'intervals' have infinite widths (unused)
            escaped = coverage(sc, ks, repetitions=repetitions, paired=False, seed=7,
                               interval=lambda v, level: [_Escape(o) for o in outside(v, level)])[0]
        for i, k in enumerate(ks):
            print(f"| {sc.name} | {k} | {plain[i]:.3f} | {fit[i]:.3f} | {100 * plain_width[i]:.2f} | "
                  f"{100 * fit_width[i]:.2f} | {escaped[i]:.3f} |", flush=True)


class _Escape:
    """An 'interval' that covers every truth exactly when the symmetric interval left [0, 1]: coverage() then
    counts the share of studies whose symmetric interval did."""

    def __init__(self, out: bool):
        self.lo, self.hi = (-np.inf, np.inf) if out else (np.inf, -np.inf)


if __name__ == "__main__":
    main()
