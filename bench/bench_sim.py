"""Simulated training steps per second: P = 512 prompts × M = 64 trajectories, G = 8, one CPU thread.

    python bench/bench_sim.py [--steps 400]

Each estimator runs the same simulated training (grae.sim.run_sim, tabular and lowrank); the table
gives steps per second, measured side by side in one process.
"""

from __future__ import annotations

import argparse

import torch

from grae.sim import SimConfig, run_sim

ESTIMATORS = [("grpo", {}), ("agrae", {"alpha": 1.0}), ("agrae", {"alpha": 0.5}), ("negative_dominant", {"beta": 10.0}),
              ("nsr", {}), ("psr", {}), ("w_reinforce", {"lam": 0.1})]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| estimator | tabular steps/s | lowrank (r = 8, Adam) steps/s |\n|---|---|---|")
    for name, params in ESTIMATORS:
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        rates = []
        for parameterisation, optimizer, lr in [("tabular", "sgd", 0.1), ("lowrank", "adam", 0.01)]:
            cfg = SimConfig(estimator=name, estimator_params=params, steps=args.steps, eval_every=args.steps,
                            parameterisation=parameterisation, optimizer=optimizer, lr=lr)
            rates.append(run_sim(cfg).steps_per_second)
        print(f"| {label} | {rates[0]:.0f} | {rates[1]:.0f} |")


if __name__ == "__main__":
    main()
