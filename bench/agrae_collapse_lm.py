"""Collapse rates of LM runs from their training logs (issue 22 §3 on the LM; the simulator's version is
``bench_agrae_collapse.py``, whose rule and statistics this reuses).

Reads ``JOBS/<arm>/seed<s>/metrics.jsonl`` (a ``grae compare`` job pool) of finished runs. Per run: the base training
success b0 = mean batch reward over steps 1..``--base-steps`` (lr warm-up: still the base policy), the final
training success = mean batch reward over the last ``--final-frac`` of the logged steps, the lowest
20-step mean; **collapsed** if final < 0.5 × b0, **degraded** if final < b0. Each arm is paired with the
first arm by seed (one-sided exact McNemar test).

    python bench/agrae_collapse_lm.py runs/studies/agrae_collapse_r1/jobs --arms grpo agrae
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from bench_agrae_collapse import mcnemar_one_sided, wilson  # noqa: E402

from grae.train.rundir import read_metrics  # noqa: E402


def run_summary(metrics: list[dict], base_steps: int, final_frac: float, window: int = 20) -> dict:
    rewards = [float(r["reward_mean"]) for r in sorted(metrics, key=lambda r: int(r["step"])) if "reward_mean" in r]
    if len(rewards) < base_steps + window:
        raise ValueError(f"{len(rewards)} logged steps: too few for a base of {base_steps} and a {window}-step window")
    b0 = statistics.fmean(rewards[:base_steps])
    tail = rewards[-max(1, round(final_frac * len(rewards))):]
    final = statistics.fmean(tail)
    lowest = min(statistics.fmean(rewards[i:i + window]) for i in range(len(rewards) - window + 1))
    acr = [float(r["acr"]) for r in metrics if "acr" in r]
    return {"steps": len(rewards), "base": b0, "final": final, "lowest_window": lowest,
            "final_acr": statistics.fmean(acr[-len(tail):]) if acr else None,
            "collapsed": final < 0.5 * b0, "degraded": final < b0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jobs", type=Path)
    ap.add_argument("--arms", nargs="+", required=True, help="the first is the reference (GRPO)")
    ap.add_argument("--base-steps", type=int, default=10)
    ap.add_argument("--final-frac", type=float, default=0.1)
    args = ap.parse_args()
    runs: dict[str, dict[int, dict]] = {}
    for arm in args.arms:
        runs[arm] = {}
        for seed_dir in sorted((args.jobs / arm).glob("seed*")):
            if not (seed_dir / "report.md").exists():  # written when `grae train` ends: a run still going is left out
                print(f"{arm}/{seed_dir.name}: not finished, left out", file=sys.stderr)
                continue
            metrics = read_metrics(seed_dir / "metrics.jsonl")
            if metrics:
                runs[arm][int(seed_dir.name[4:])] = run_summary(metrics, args.base_steps, args.final_frac)
    ref = runs[args.arms[0]]
    print("| arm | seed | steps | base b0 | final | lowest 20-step mean | final ACR | collapsed | degraded |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm, by_seed in runs.items():
        for seed, r in sorted(by_seed.items()):
            acr = "–" if r["final_acr"] is None else f"{r['final_acr']:.2f}"
            print(f"| {arm} | {seed} | {r['steps']} | {r['base']:.3f} | {r['final']:.3f} | {r['lowest_window']:.3f} | "
                  f"{acr} | {'yes' if r['collapsed'] else 'no'} | {'yes' if r['degraded'] else 'no'} |")
    print()
    print("| arm | collapsed | 95% CI (Wilson) | vs first arm: b/c, one-sided McNemar p | degraded | b/c, p |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for arm, by_seed in runs.items():
        seeds = sorted(set(by_seed) & set(ref))
        k = sum(by_seed[s]["collapsed"] for s in seeds)
        b = sum(by_seed[s]["collapsed"] and not ref[s]["collapsed"] for s in seeds)
        c = sum(ref[s]["collapsed"] and not by_seed[s]["collapsed"] for s in seeds)
        kd = sum(by_seed[s]["degraded"] for s in seeds)
        bd = sum(by_seed[s]["degraded"] and not ref[s]["degraded"] for s in seeds)
        cd = sum(ref[s]["degraded"] and not by_seed[s]["degraded"] for s in seeds)
        lo, hi = wilson(k, len(seeds))
        summary[arm] = {"collapsed": k, "degraded": kd, "n": len(seeds), "b": b, "c": c, "p": mcnemar_one_sided(b, c),
                        "runs": by_seed}
        vs = "–" if arm == args.arms[0] else f"{b}/{c}, {mcnemar_one_sided(b, c):.3g}"
        vsd = "–" if arm == args.arms[0] else f"{bd}/{cd}, {mcnemar_one_sided(bd, cd):.3g}"
        print(f"| {arm} | {k}/{len(seeds)} | [{lo:.2f}, {hi:.2f}] | {vs} | {kd}/{len(seeds)} | {vsd} |")
    print()
    print(json.dumps({a: {k: v for k, v in s.items() if k != "runs"} for a, s in summary.items()}))


if __name__ == "__main__":
    main()
