"""Regime maps from the simulator (issue 13): where pass@k at large k ends above or below the base.

    python studies/sim_maps.py            # ≈ 5 min on one core → studies/reports/sim/{maps.json, *.png, README table}
    python studies/sim_maps.py steps      # ≈ 2 min: adds the steps sweep to maps.json and prints its table

For GRPO and each asymmetric estimator, the exact change in pass@64 and pass@256 after training
(grae.sim, same base policy per seed), over difficulty × learning rate, for the tabular policy (SGD)
and the low-rank shared-strategy policy (Adam); a G sweep at one setting; a steps sweep (Δ after 100 to
800 steps on the hardest prompts at the middle learning rate); 2 seeds each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from grae.sim import SimConfig, run_sim

OUT = Path(__file__).resolve().parent / "reports" / "sim"
ESTIMATORS = [("grpo", {}), ("agrae", {"alpha": 1.0}), ("agrae", {"alpha": 0.5}), ("negative_dominant", {"beta": 10.0}),
              ("nsr", {}), ("w_reinforce", {"lam": 0.1})]
DIFFICULTIES = ["beta:0.3,3", "beta:1,3", "beta:1,1", "beta:3,1"]  # mean p0 0.09, 0.25, 0.5, 0.75
SETTINGS = {"tabular": ("sgd", [0.03, 0.1, 0.3]), "lowrank": ("adam", [0.003, 0.01, 0.03])}
SEEDS = [0, 1]
COMMON = dict(prompts=256, trajectories=64, correct=4, steps=200, eval_every=200)


def label(name, params):
    return name + "".join(f"({k}={v})" for k, v in params.items())


def delta(cfg_kwargs) -> dict[str, float]:
    out = {"d64": [], "d256": [], "d1": []}
    for seed in SEEDS:
        r = run_sim(SimConfig(seed=seed, **cfg_kwargs))
        for k in (1, 64, 256):
            out[f"d{k}"].append(r.final[k] - r.base[k])
    return {key: float(np.mean(v)) for key, v in out.items()}


STEPS = [100, 200, 400, 800]


def steps_sweep() -> dict[str, dict[str, float]]:
    """Δ pass@1/64/256 against the base after each of STEPS, hardest difficulty, middle learning rate."""
    out = {}
    for parameterisation, (optimizer, lrs) in SETTINGS.items():
        for name, params in ESTIMATORS:
            runs = [run_sim(SimConfig(seed=seed, **dict(COMMON, steps=STEPS[-1], eval_every=STEPS[0]), estimator=name,
                                      estimator_params=params, difficulty=DIFFICULTIES[0],
                                      parameterisation=parameterisation, optimizer=optimizer, lr=lrs[1]))
                    for seed in SEEDS]
            for steps in STEPS:
                key = f"steps={steps}|{parameterisation}|{label(name, params)}"
                rows = [next(row for row in r.history if row["step"] == steps) for r in runs]
                out[key] = {f"d{k}": float(np.mean([row["pass@k"][k] - r.base[k] for row, r in zip(rows, runs)]))
                            for k in (1, 64, 256)}
                print(key, {k: round(v, 4) for k, v in out[key].items()}, flush=True)
    return out


def print_steps_table(maps: dict) -> None:
    for parameterisation, (_, lrs) in SETTINGS.items():
        print(f"\n**{parameterisation}, {DIFFICULTIES[0]}, lr = {lrs[1]}: Δ pass@256 (points) after "
              f"{' / '.join(map(str, STEPS))} steps**\n\n| estimator | Δ pass@256 | Δ pass@1 |\n|---|---|---|")
        for name, params in ESTIMATORS:
            cells = [maps[f"steps={s}|{parameterisation}|{label(name, params)}"] for s in STEPS]
            print(f"| {label(name, params)} | " + " / ".join(f"{100 * c['d256']:+.1f}" for c in cells) + " | "
                  + " / ".join(f"{100 * c['d1']:+.1f}" for c in cells) + " |")


def main() -> None:
    torch.set_num_threads(1)
    if sys.argv[1:] == ["steps"]:
        saved = json.loads((OUT / "maps.json").read_text())
        saved["maps"].update(steps_sweep())
        saved["steps_sweep"] = {"command": "python studies/sim_maps.py steps", "steps": STEPS}
        (OUT / "maps.json").write_text(json.dumps(saved, indent=1))
        print_steps_table(saved["maps"])
        return
    OUT.mkdir(parents=True, exist_ok=True)
    maps = {}
    for parameterisation, (optimizer, lrs) in SETTINGS.items():
        for name, params in ESTIMATORS:
            for difficulty in DIFFICULTIES:
                for lr in lrs:
                    key = f"{parameterisation}|{label(name, params)}|{difficulty}|{lr}"
                    maps[key] = delta(dict(COMMON, estimator=name, estimator_params=params, difficulty=difficulty,
                                           parameterisation=parameterisation, optimizer=optimizer, lr=lr))
                    print(key, {k: round(v, 4) for k, v in maps[key].items()}, flush=True)
    for g in (4, 8, 16):
        for name, params in ESTIMATORS:
            key = f"G={g}|{label(name, params)}"
            maps[key] = delta(dict(COMMON, estimator=name, estimator_params=params, difficulty="beta:1,3",
                                   parameterisation="lowrank", optimizer="adam", lr=0.01, group_size=g))
            print(key, {k: round(v, 4) for k, v in maps[key].items()}, flush=True)
    (OUT / "maps.json").write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "common": COMMON,
                                               "seeds": SEEDS, "maps": maps}, indent=1))
    plot(maps)


def plot(maps: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for parameterisation, (_, lrs) in SETTINGS.items():
        fig, axes = plt.subplots(1, len(ESTIMATORS), figsize=(3.2 * len(ESTIMATORS), 3.2), sharey=True)
        for ax, (name, params) in zip(axes, ESTIMATORS):
            grid = np.array([[100 * maps[f"{parameterisation}|{label(name, params)}|{d}|{lr}"]["d256"] for lr in lrs]
                             for d in DIFFICULTIES])
            image = ax.imshow(grid, cmap="RdBu", vmin=-10, vmax=10, aspect="auto")
            for (i, j), value in np.ndenumerate(grid):
                ax.text(j, i, f"{value:+.1f}", ha="center", va="center", fontsize=7)
            ax.set_title(label(name, params), fontsize=8)
            ax.set_xticks(range(len(lrs)), [str(lr) for lr in lrs], fontsize=7)
            ax.set_yticks(range(len(DIFFICULTIES)), DIFFICULTIES, fontsize=7)
            ax.set_xlabel("lr", fontsize=7)
        fig.suptitle(f"Δ pass@256 (points) after 200 steps vs base — {parameterisation}", fontsize=9)
        fig.colorbar(image, ax=axes, shrink=0.8)
        fig.savefig(OUT / f"delta_pass256_{parameterisation}.png", dpi=120, bbox_inches="tight")
        plt.close(fig)


if __name__ == "__main__":
    main()
