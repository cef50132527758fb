"""Pass@k-family and context estimators against independent references.

passk and pkpo are defined over k-subsets: the reference enumerates every k-subset of each group
(itertools.combinations) — nothing shared with the closed forms in grae. unlikeliness is checked
against a per-group loop with explicit sorting. Plus the context contract of the base class.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.advantage import CONTEXT_FIELDS, check_context_supported, get_estimator
from strategies import reward_batches


def brute_passk(rewards, group_ids, k):
    """Chen et al.: every k-subset S gets max(S); A of S = (max − mean)/std (population, over subsets);
    a sample's advantage = mean of A over the subsets that contain it."""
    out = [0.0] * len(rewards)
    for g in set(group_ids):
        idx = [i for i, x in enumerate(group_ids) if x == g]
        subsets = list(itertools.combinations(idx, k))
        vals = [max(rewards[i] for i in s) for s in subsets]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for i in idx:
            mine = [(v - mean) / std if std > 0 else 0.0 for s, v in zip(subsets, vals) if i in s]
            out[i] = sum(mine) / len(mine)
    return out


def brute_pkpo(rewards, group_ids, k, baseline):
    """Walder & Karkhanis: s_i = (1/C(n,k)) Σ_{S∋i} [max(S) − (max(S∖i) if loo−1 else 0)], max(∅) = 0."""
    out = [0.0] * len(rewards)
    for g in set(group_ids):
        idx = [i for i, x in enumerate(group_ids) if x == g]
        subsets = list(itertools.combinations(idx, k))
        for i in idx:
            total = 0.0
            for s in subsets:
                if i in s:
                    rest = [rewards[j] for j in s if j != i]
                    total += max(rewards[j] for j in s) - (max(rest, default=0.0) if baseline == "loo_minus_one" else 0.0)
            out[i] = total / len(subsets)
    return out


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


def test_passk_paper_closed_form_worked_example():
    # n = 8, c = 3, k = 4: R̄ = 1 − C(5,4)/C(8,4) = 13/14, σ = √(13/14 · 1/14),
    # correct (1 − R̄)/σ, wrong (1 − R̄ − C(4,3)/C(7,3))/σ.
    r = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0])
    out = get_estimator("passk", k=4)(r, torch.zeros(8, dtype=torch.long)).advantages.double()
    mean = 13 / 14
    sigma = math.sqrt(mean * (1 - mean))
    assert out[0].item() == pytest.approx((1 - mean) / sigma, abs=1e-6)
    assert out[1].item() == pytest.approx((1 - mean - 4 / 35) / sigma, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(reward_batches(binary=True, min_size=4, max_size=8, max_groups=4), st.integers(1, 4))
def test_passk_equals_brute_force_over_k_subsets(batch, k):
    r, g = batch
    got = get_estimator("passk", k=k)(r, g).advantages
    assert got.tolist() == pytest.approx(brute_passk(r.tolist(), g.tolist(), k), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(reward_batches(binary=True, min_size=4, max_size=8, max_groups=4), st.integers(1, 4),
       st.sampled_from(["loo_minus_one", "none"]))
def test_pkpo_equals_brute_force_over_k_subsets(batch, k, baseline):
    r, g = batch
    got = get_estimator("pkpo", k=k, baseline=baseline)(r, g).advantages
    assert got.tolist() == pytest.approx(brute_pkpo(r.tolist(), g.tolist(), k, baseline), abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(reward_batches(binary=True, min_size=2, max_size=8, max_groups=4))
def test_pkpo_mean_transform_is_the_unbiased_passk_gradient_weight(batch):
    # Σ_i s_i over a group = k · (unbiased pass@k estimate): each subset's max is counted k times.
    r, g = batch
    for gid in g.unique().tolist():
        sel = g == gid
        n, c, k = int(sel.sum()), int(r[sel].sum()), 2
        if n < k:
            continue
        s = get_estimator("pkpo", k=k, baseline="none")(r[sel], g[sel]).advantages.double()
        passk = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert float(s.sum()) == pytest.approx(k * passk, abs=1e-9)


def test_passk_k1_is_grpo_with_population_std():
    r = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1, 0, 0])
    g = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    a = get_estimator("passk", k=1)(r, g).advantages
    b = get_estimator("grpo", std_unbiased=False, eps=1e-300)(r, g).advantages
    assert torch.allclose(a, b, atol=1e-6)


def test_pkpo_anneals_k_and_the_step_survives_state_dict():
    est = get_estimator("pkpo", k=8, k_end=1, anneal_steps=7)
    r, g = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0]), torch.zeros(8, dtype=torch.long)
    ks = [est(r, g).metrics["pkpo/k"] for _ in range(3)]
    assert ks == [8.0, 7.0, 6.0]
    again = get_estimator("pkpo", k=8, k_end=1, anneal_steps=7)
    again.load_state_dict(est.state_dict())
    assert again(r, g).metrics["pkpo/k"] == 5.0
    assert [again(r, g).metrics["pkpo/k"] for _ in range(5)] == [4.0, 3.0, 2.0, 1.0, 1.0]


@pytest.mark.parametrize("name", ["passk", "pkpo"])
def test_passk_family_refuses_nonbinary_rewards_and_small_groups(name):
    g = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="rewards: .*binary"):
        get_estimator(name)(torch.tensor([0.5, 0, 1, 0]), g)
    with pytest.raises(ValueError, match="k: .*k = 4 exceeds"):
        get_estimator(name, k=4)(torch.tensor([1.0, 0, 1]), g[:3])


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
