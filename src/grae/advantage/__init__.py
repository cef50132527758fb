"""Advantage estimators: one registry, one call signature.

>>> from grae.advantage import get_estimator, names
>>> est = get_estimator("agrae", alpha=1.0)
>>> out = est(rewards, group_ids)        # rewards [N], group_ids [N]
>>> out.advantages, out.weights, out.metrics

Every estimator module reads like its paper's equations; see docs/estimators.md for the table.
"""

# Importing the modules registers their estimators.
from grae.advantage import (  # noqa: F401
    agrae,
    avspo,
    bbg,
    dgpo,
    grpo,
    ngrpo,
    outcome_explore,
    passk,
    pkpo,
    reinforce,
    rloo,
    symmetry,
    unlikeliness,
    zero_success,
)
from grae.advantage.base import (
    CONTEXT_FIELDS,
    AdvantageResult,
    Estimator,
    EstimatorLike,
    check_context_supported,
    describe,
    get_estimator,
    names,
    register,
)
from grae.advantage.corrections import (
    CorrectedEstimator,
    backward_correct,
    forward_weights,
    with_reward_correction,
)

__all__ = [
    "CONTEXT_FIELDS",
    "AdvantageResult",
    "CorrectedEstimator",
    "Estimator",
    "EstimatorLike",
    "backward_correct",
    "check_context_supported",
    "describe",
    "forward_weights",
    "get_estimator",
    "names",
    "register",
    "with_reward_correction",
]
