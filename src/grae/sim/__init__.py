"""``grae sim``: a training simulator of the behaviour-space model, to map where estimators' effects live.

Per prompt a softmax policy over M whole trajectories, K of them correct (:mod:`grae.sim.model`);
any registered estimator, unchanged, and ``grae.loss`` train it (:mod:`grae.sim.run`); pass@k for
k = 1 … 256 is exact, from the policy's probabilities. ``docs/sim.md`` explains the model and the maps.
"""

from grae.sim.model import Difficulty, SimPolicy, exact_pass_at_k
from grae.sim.run import SimConfig, SimResult, build_policy, run_sim, simulate_step

__all__ = ["Difficulty", "SimConfig", "SimPolicy", "SimResult", "build_policy", "exact_pass_at_k", "run_sim",
           "simulate_step"]
