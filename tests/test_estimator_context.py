"""Context estimators against independent references, and the context contract of the base class.

unlikeliness is checked against a per-group loop with explicit sorting. (passk and pkpo, defined over
k-subsets, are checked against brute-force enumeration in tests/test_passk_estimators.py.)
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.advantage import CONTEXT_FIELDS, check_context_supported, get_estimator
from strategies import reward_batches


def ref_unlikeliness(rewards, group_ids, logprob, beta, eps=1e-6):
    shaped = list(rewards)
    for g in set(group_ids):
        idx = [i for i, x in enumerate(group_ids) if x == g]
        size = len(idx)
        correct = sorted((i for i in idx if rewards[i] > 0), key=lambda i: -logprob[i])  # likeliest first
        for i in correct:
            ties = [p for p, j in enumerate(correct) if logprob[j] == logprob[i]]
            rank = sum(ties) / len(ties)
            shaped[i] = rewards[i] * (1 - beta * (size - rank) / size)
    out = [0.0] * len(rewards)
    for g in set(group_ids):
        idx = [i for i, x in enumerate(group_ids) if x == g]
        vals = [shaped[i] for i in idx]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
        for i in idx:
            out[i] = (shaped[i] - mean) / (std + eps)
    return out


@settings(max_examples=40, deadline=None)
@given(reward_batches(binary=True, min_size=1, max_size=8, max_groups=4), st.data())
def test_unlikeliness_matches_reference_with_ties(batch, data):
    r, g = batch
    lp = torch.tensor(data.draw(st.lists(st.sampled_from([-3.0, -2.0, -1.5, -1.0, -0.5]), min_size=len(r),
                                         max_size=len(r))), dtype=torch.float64)
    got = get_estimator("unlikeliness", beta=0.25)(r, g, context={"logprob_mean": lp}).advantages
    assert got.tolist() == pytest.approx(ref_unlikeliness(r.tolist(), g.tolist(), lp.tolist(), 0.25), abs=1e-9)


def test_unlikeliness_favours_the_unlikely_correct_sample_and_beta0_is_grpo():
    r, g = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    lp = torch.tensor([-0.1, -2.0, -1.0, -1.0])
    a = get_estimator("unlikeliness")(r, g, context={"logprob_mean": lp}).advantages
    assert a[1] > a[0] > 0 > a[2]
    b = get_estimator("unlikeliness", beta=0.0)(r, g, context={"logprob_mean": lp}).advantages
    assert torch.allclose(b, get_estimator("grpo")(r, g).advantages)


def test_context_contract_is_uniform():
    r, g = torch.tensor([1.0, 0.0]), torch.zeros(2, dtype=torch.long)
    est = get_estimator("unlikeliness")
    with pytest.raises(ValueError, match=r"context\.logprob_mean: estimator 'unlikeliness' requires it"):
        est(r, g)
    with pytest.raises(ValueError, match=r"context\.logprob_mean: shape \(3,\)"):
        est(r, g, context={"logprob_mean": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"context\.logprob_mean: contains NaN"):
        est(r, g, context={"logprob_mean": torch.tensor([0.0, float("nan")])})
    # an estimator that declares nothing ignores extra context: same call, same result
    grpo = get_estimator("grpo")
    assert torch.equal(grpo(r, g).advantages, grpo(r, g, context={"logprob_mean": torch.zeros(2)}).advantages)
    assert set(est.requires) <= set(CONTEXT_FIELDS)
    check_context_supported(est, {"logprob_mean"}, "engine X")
    with pytest.raises(ValueError, match="estimator: 'unlikeliness' requires context logprob_mean, which engine X"):
        check_context_supported(est, set(), "engine X")
