"""Coverage of grae compare's 95% interval on simulated studies with a known truth (grae.compare.coverage).

    python bench/bench_interval_coverage.py [--repetitions 1500]

Prints, per scenario, the fraction of studies whose interval covers the truth for a method's mean and for a
paired difference, at pass@1, pass@16 and pass@256 (200 problems × 256 samples), and the mean width.
"""

import argparse
import time

from grae.compare.coverage import PILOT_SCENARIOS, SCENARIOS, coverage

KS = (1, 16, 256)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=1500)
    args = parser.parse_args()
    start = time.perf_counter()
    print("| scenario | what | " + " | ".join(f"cover@{k}" for k in KS) + " | " + " | ".join(f"width@{k}" for k in KS) + " |")
    print("|---|---|" + "---:|" * (2 * len(KS)))
    for sc in SCENARIOS + PILOT_SCENARIOS:
        for paired in (False, True):
            cov, width = coverage(sc, KS, repetitions=args.repetitions, paired=paired, seed=7)
            what = "paired difference" if paired else "method mean"
            print(f"| {sc.name} | {what} | " + " | ".join(f"{c:.3f}" for c in cov) + " | "
                  + " | ".join(f"{100 * w:.2f}" for w in width) + " |", flush=True)
    print(f"\n{args.repetitions} repetitions per row, {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
