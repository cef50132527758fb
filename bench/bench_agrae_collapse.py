"""Does A-GRAE collapse where GRPO does not, and does a remedy fix it? (issue 22 §3, in ``grae sim``)

Paired runs (the same base policy and seed for every arm) of GRPO, A-GRAE (α = 1, the paper's formula)
and A-GRAE with each opt-in remedy (``floor``, ``omega_ema``, ``collapse_guard``), at the simulator's
analogues of R1's learning rates 5e-5 and 1e-4 plus two stress levels. Writes ``results.json`` and
``report_tables.md`` into ``--out``; the decision rule is in studies/reports/agrae_collapse/README.md.

    flock /tmp/grae-cpu.lock env OMP_NUM_THREADS=1 python bench/bench_agrae_collapse.py --seeds 32 \
        --out studies/reports/agrae_collapse

Collapse (the R1 picture: batch reward → 0, ACR → 1): the final exact training success (pass@1 over the
training prompts, i.e. the expected ω) below half of the base policy's. ``degraded``: below the base.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from grae.io import atomic_write_json, atomic_write_text  # noqa: E402
from grae.sim.run import SimConfig, run_sim  # noqa: E402

ARMS = {
    "grpo": ("grpo", {}),
    "agrae": ("agrae", {"alpha": 1.0}),
    "agrae+floor": ("agrae", {"alpha": 1.0, "floor": 0.25}),
    "agrae+omega_ema": ("agrae", {"alpha": 1.0, "omega_ema": 0.9}),
    "agrae+guard": ("agrae", {"alpha": 1.0, "collapse_guard": 0.1}),
}
#: sim lr → the R1 learning rate it stands for (README: how the analogue was chosen)
LRS = {0.3: "5e-5", 0.6: "1e-4", 1.2: "stress 2e-4", 2.4: "stress 4e-4"}
SIM = dict(prompts=256, trajectories=64, correct=4, group_size=8, difficulty="beta:0.5,3", parameterisation="lowrank",
           rank=8, optimizer="adam", loss_agg="mean", steps=400, eval_every=25)


def run_one(arm: str, lr: float, seed: int) -> dict:
    name, params = ARMS[arm]
    r = run_sim(SimConfig(estimator=name, estimator_params=params, lr=lr, seed=seed, **SIM))
    base1, final1 = r.base[1], r.final[1]
    omegas = [h["omega"] for h in r.history[1:]]
    return {"arm": arm, "lr": lr, "seed": seed, "base_pass1": base1, "final_pass1": final1,
            "base_pass256": r.base[256], "final_pass256": r.final[256], "min_omega": min(omegas),
            "final_omega": omegas[-1], "collapsed": final1 < 0.5 * base1, "degraded": final1 < base1}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_one_sided(b: int, c: int) -> float:
    """P(X ≥ b) for X ~ Bin(b + c, 1/2): b = pairs where the arm collapsed and GRPO did not, c = the reverse."""
    n = b + c
    return 1.0 if n == 0 else sum(math.comb(n, i) for i in range(b, n + 1)) / 2**n


def paired_diff(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Mean of x − y and its 95% t-interval (normal 1.96 for n ≥ 30, else a t quantile table)."""
    d = [x - y for x, y in zip(xs, ys)]
    mean = statistics.fmean(d)
    if len(d) < 2:
        return mean, mean, mean
    t = {8: 2.365, 16: 2.131, 32: 2.040}.get(len(d), 1.96 if len(d) >= 30 else 2.3)
    half = t * statistics.stdev(d) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def summarise(rows: list[dict], seeds: int) -> tuple[dict, str]:
    table, lines = {}, []
    lines.append("| R1 lr (sim lr) | arm | collapsed | 95% CI | vs GRPO: b/c, p | degraded | vs GRPO: b/c, p | final pass@1 | "
                 "Δ pass@1 vs base | Δ pass@256 vs base | min ω (median) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for lr, label in LRS.items():
        by_arm = {arm: sorted((r for r in rows if r["lr"] == lr and r["arm"] == arm), key=lambda r: r["seed"]) for arm in ARMS}
        grpo = by_arm["grpo"]
        for arm, rs in by_arm.items():
            k = sum(r["collapsed"] for r in rs)
            b = sum(r["collapsed"] and not g["collapsed"] for r, g in zip(rs, grpo))
            c = sum(g["collapsed"] and not r["collapsed"] for r, g in zip(rs, grpo))
            p = mcnemar_one_sided(b, c)
            bd = sum(r["degraded"] and not g["degraded"] for r, g in zip(rs, grpo))
            cd = sum(g["degraded"] and not r["degraded"] for r, g in zip(rs, grpo))
            lo, hi = wilson(k, len(rs))
            d1 = statistics.fmean(100 * (r["final_pass1"] - r["base_pass1"]) for r in rs)
            d256 = statistics.fmean(100 * (r["final_pass256"] - r["base_pass256"]) for r in rs)
            cell = {"collapsed": k, "n": len(rs), "ci": [lo, hi], "b": b, "c": c, "p_vs_grpo": p,
                    "degraded_b": bd, "degraded_c": cd, "degraded_p_vs_grpo": mcnemar_one_sided(bd, cd),
                    "degraded": sum(r["degraded"] for r in rs), "final_pass1": statistics.fmean(r["final_pass1"] for r in rs),
                    "delta_pass1": d1, "delta_pass256": d256, "min_omega_median": statistics.median(r["min_omega"] for r in rs)}
            if arm != "agrae" and arm != "grpo":  # a remedy's cost against the paper's A-GRAE, paired by seed
                ag = by_arm["agrae"]
                cell["vs_agrae_pass1"] = paired_diff([100 * r["final_pass1"] for r in rs], [100 * r["final_pass1"] for r in ag])
                cell["vs_agrae_pass256"] = paired_diff([100 * r["final_pass256"] for r in rs],
                                                       [100 * r["final_pass256"] for r in ag])
            table[f"{lr}/{arm}"] = cell
            vs = "–" if arm == "grpo" else f"{b}/{c}, {p:.3g}"
            vsd = "–" if arm == "grpo" else f"{bd}/{cd}, {cell['degraded_p_vs_grpo']:.3g}"
            lines.append(f"| {label} ({lr}) | {arm} | {k}/{len(rs)} | [{lo:.2f}, {hi:.2f}] | {vs} | "
                         f"{cell['degraded']}/{len(rs)} | {vsd} | {cell['final_pass1']:.3f} | {d1:+.1f} | {d256:+.1f} | "
                         f"{cell['min_omega_median']:.3f} |")
    lines.append("")
    lines.append("Remedy cost against A-GRAE (paired by seed; mean [95% CI], points):")
    lines.append("")
    lines.append("| R1 lr (sim lr) | remedy | Δ final pass@1 | Δ final pass@256 |")
    lines.append("|---|---|---|---|")
    for lr, label in LRS.items():
        for arm in ARMS:
            cell = table[f"{lr}/{arm}"]
            if "vs_agrae_pass1" in cell:
                m1, l1, h1 = cell["vs_agrae_pass1"]
                m2, l2, h2 = cell["vs_agrae_pass256"]
                lines.append(f"| {label} ({lr}) | {arm} | {m1:+.2f} [{l1:+.2f}, {h1:+.2f}] | {m2:+.2f} [{l2:+.2f}, {h2:+.2f}] |")
    return table, "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--out", default="/tmp/agrae_collapse")
    ap.add_argument("--summarise", action="store_true", help="re-read OUT/results.json and rewrite the tables only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.summarise:
        with open(os.path.join(args.out, "results.json")) as f:
            saved = json.load(f)
        table, md = summarise(saved["runs"], saved["seeds"])
        atomic_write_json(os.path.join(args.out, "results.json"), {**saved, "summary": table})
        atomic_write_text(os.path.join(args.out, "report_tables.md"), md)
        print(md)
        return
    rows, t0 = [], time.perf_counter()
    for lr in LRS:
        for arm in ARMS:
            for seed in range(args.seeds):
                rows.append(run_one(arm, lr, seed))
        print(f"lr {lr}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    table, md = summarise(rows, args.seeds)
    seconds = time.perf_counter() - t0
    atomic_write_json(os.path.join(args.out, "results.json"),
                      {"sim": SIM, "arms": ARMS, "lrs": {str(k): v for k, v in LRS.items()}, "seeds": args.seeds,
                       "seconds": seconds, "summary": table, "runs": rows})
    atomic_write_text(os.path.join(args.out, "report_tables.md"), md)
    print(md)
    print(f"{len(rows)} runs in {seconds:.0f} s")


if __name__ == "__main__":
    main()
