"""passk (Chen et al. 2025) and pkpo (Walder & Karkhanis 2025) against brute-force k-subset enumeration."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.advantage import get_estimator
from strategies import reward_batches
from tolerances import assert_close_scaled


def groups_of(r: torch.Tensor, g: torch.Tensor):
    for gid in g.unique().tolist():
        idx = (g == gid).nonzero().flatten().tolist()
        yield idx, [float(r[i]) for i in idx]


def brute_passk(values: list[float], k: int) -> list[float]:
    """Chen et al.'s definition: every k-subset is rewarded with its max, normalised by the subsets'
    mean and population std; a sample's advantage is the mean over the subsets that contain it."""
    n = len(values)
    k = min(k, n)
    subsets = list(itertools.combinations(range(n), k))
    subset_reward = np.array([max(values[j] for j in s) for s in subsets])
    sigma = subset_reward.std()
    if sigma < 1e-12:
        return [0.0] * n
    normalised = (subset_reward - subset_reward.mean()) / sigma
    return [float(np.mean([a for s, a in zip(subsets, normalised) if i in s])) for i in range(n)]


def mean_max(values: list[float], m: int) -> float:
    return float(np.mean([max(s) for s in itertools.combinations(values, m)]))


def brute_pkpo(values: list[float], k: int, baseline: str) -> list[float]:
    n = len(values)
    if n == 1:
        return [0.0]
    k = min(k, n - 1 if baseline == "loo" else n)
    share = [sum(max(values[j] for j in s) for s in itertools.combinations(range(n), k) if i in s) / math.comb(n, k)
             for i in range(n)]
    out = []
    for i in range(n):
        others = values[:i] + values[i + 1:]
        if baseline == "none":
            b = 0.0
        elif baseline == "loo":
            b = k / (n - 1) * mean_max(others, k)
        elif k > 1:
            b = k / n * mean_max(others, k - 1)
        else:
            b = mean_max(others, 1) / n
        out.append(share[i] - b)
    return out


@given(reward_batches(binary=True, max_groups=4, max_size=8), st.integers(1, 9))
def test_passk_matches_subset_enumeration(batch, k):
    r, g = batch
    a = get_estimator("passk", k=k)(r, g).advantages
    for idx, values in groups_of(r, g):
        # tol: float64 advantages of rewards in [0, 1], differences of pass@k estimates in [−1, 1]: rounding ≤ 1e-14
        assert a[idx].tolist() == pytest.approx(brute_passk(values, k), abs=1e-9)


def test_passk_closed_form_by_hand():
    # n = 8, c = 4, k = 4: R̄ = 1 − 1/70, σ = √(R̄(1 − R̄)); wrong: C(3,3)/C(7,3) = 1/35 of subsets fail
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1])
    a = get_estimator("passk", k=4)(r, torch.zeros(8, dtype=torch.long)).advantages
    mean = 1 - 1 / 70
    sigma = math.sqrt(mean * (1 - mean))
    assert float(a[0]) == pytest.approx((1 - mean) / sigma)
    assert float(a[1]) == pytest.approx((1 - mean - 1 / 35) / sigma)


def test_passk_with_k1_is_grpo_with_population_std():
    r = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0, 1, 1])
    g = torch.tensor([0] * 6 + [1] * 4)
    ours = get_estimator("passk", k=1)(r, g).advantages
    grpo = get_estimator("grpo", eps=1e-300, std_unbiased=False)(r, g).advantages
    assert_close_scaled(ours, grpo.to(ours.dtype), rel=1e-6)


@pytest.mark.parametrize("baseline", ["loo_minus_one", "loo", "none"])
@given(batch=reward_batches(binary=False, max_groups=4, max_size=7), k=st.integers(1, 8))
def test_pkpo_matches_subset_enumeration(baseline, batch, k):
    r, g = batch
    a = get_estimator("pkpo", k=k, baseline=baseline)(r, g).advantages
    for idx, values in groups_of(r, g):
        # tol: float64 advantages of rewards in [0, 1], differences of pass@k estimates in [−1, 1]: rounding ≤ 1e-14
        assert a[idx].tolist() == pytest.approx(brute_pkpo(values, k, baseline), abs=1e-9)


def test_pkpo_loo_minus_one_gives_wrong_samples_zero_on_binary_rewards():
    r = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    a = get_estimator("pkpo", k=4)(r, torch.zeros(8, dtype=torch.long)).advantages
    assert (a[1:] == 0).all() and float(a[0]) == pytest.approx(4 / 8)


def test_pkpo_k_annealing_schedule_and_resume():
    est = get_estimator("pkpo", k=8, k_final=1, anneal_steps=4)
    r, g = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0]), torch.zeros(8, dtype=torch.long)
    ks = [est(r, g).metrics["pkpo/k"] for _ in range(6)]
    assert ks == [8, 6, 5, 3, 1, 1]  # round(8 − 7·t/4), then held at k_final
    resumed = get_estimator("pkpo", k=8, k_final=1, anneal_steps=4)
    probe = get_estimator("pkpo", k=8, k_final=1, anneal_steps=4)
    probe.load_state_dict({"step": 2})
    resumed.load_state_dict(probe.state_dict())
    assert resumed(r, g).metrics["pkpo/k"] == 5
    with pytest.raises(ValueError, match="state_dict.step"):
        resumed.load_state_dict({"step": -1})


@pytest.mark.parametrize("params,field", [({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"baseline": "x"}, "baseline"),
                                          ({"k_final": 0}, "k_final"), ({"anneal_steps": 0}, "anneal_steps")])
def test_pkpo_parameters_are_checked(params, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        get_estimator("pkpo", **params)


def test_passk_refuses_bad_k():
    with pytest.raises(ValueError, match="^k:"):
        get_estimator("passk", k=0)
