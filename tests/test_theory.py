"""Paper Theorems 1 and 2 as executable checks in the tabular-softmax behaviour space."""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from grae.advantage import get_estimator
from grae.theory import behaviour_space_step, grpo_abs_advantage_sum
from tolerances import assert_close_scaled


def sample_group(seed, m=50, g=8, p_correct=0.3):
    """A behaviour space of m trajectories (first 40% correct), g samples drawn from softmax(h)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, generator=gen, dtype=torch.float64)
    sampled = torch.multinomial(torch.softmax(logits, 0), g, replacement=True, generator=gen)
    correct = sampled < int(0.4 * m)
    return logits, sampled, correct.double()


@given(st.integers(0, 10_000))
def test_theorem1_grpo_leaves_unsampled_trajectories_alone(seed):
    logits, sampled, rewards = sample_group(seed)
    adv = get_estimator("grpo")(rewards, torch.zeros(len(sampled), dtype=torch.long)).advantages
    delta = behaviour_space_step(logits, sampled, adv)
    unsampled = torch.ones(len(logits), dtype=torch.bool)
    unsampled[sampled] = False
    assert delta[unsampled].abs().max() <= 1e-12 * float(adv.abs().sum())  # C π_b: C = Σ A is float64 rounding


@pytest.mark.parametrize("name,params", [("agrae", {}), ("negative_dominant", {}), ("w_reinforce", {})])
@given(seed=st.integers(0, 10_000))
def test_theorem1_negative_mass_raises_every_unsampled_trajectory(name, params, seed):
    logits, sampled, rewards = sample_group(seed)
    assume(0 < rewards.mean() < 1)  # a collapsed group has A = 0 under every group-relative estimator
    adv = get_estimator(name, **params)(rewards, torch.zeros(len(sampled), dtype=torch.long)).advantages
    c = adv.sum()
    assert c < 0
    delta = behaviour_space_step(logits, sampled, adv)
    unsampled = torch.ones(len(logits), dtype=torch.bool)
    unsampled[sampled] = False
    pi = torch.softmax(logits, 0)
    assert (delta[unsampled] > 0).all()
    assert_close_scaled(delta[unsampled], -c * pi[unsampled], rel=1e-9)  # Δh_b = η|C|π_b


def test_theorem1_positive_dominant_lowers_unsampled_trajectories():
    logits, sampled, rewards = sample_group(3)
    rewards[:2] = torch.tensor([1.0, 0.0])  # make sure the group is mixed
    adv = get_estimator("positive_dominant")(rewards, torch.zeros(len(sampled), dtype=torch.long)).advantages
    delta = behaviour_space_step(logits, sampled, adv)
    unsampled = torch.ones(len(logits), dtype=torch.bool)
    unsampled[sampled] = False
    assert (delta[unsampled] < 0).all()


@pytest.mark.parametrize("g", [4, 8, 16])
def test_theorem2_grpo_abs_sum_peaks_at_half_and_is_symmetric(g):
    ids = torch.zeros(g, dtype=torch.long)
    sums = {}
    for c in range(1, g):
        r = torch.zeros(g, dtype=torch.float64)
        r[:c] = 1
        a = get_estimator("grpo", std_unbiased=False, eps=1e-12)(r, ids).advantages
        sums[c] = float(a.abs().sum())
        assert sums[c] == pytest.approx(grpo_abs_advantage_sum(c / g, g))  # 2G√(p(1−p))
        a_unb = get_estimator("grpo", eps=1e-12)(r, ids).advantages
        assert float(a_unb.abs().sum()) == pytest.approx(grpo_abs_advantage_sum(c / g, g, unbiased=True))
    assert max(sums, key=sums.get) == g // 2
    for c in range(1, g):
        assert sums[c] == pytest.approx(sums[g - c])


@pytest.mark.parametrize("g", [4, 8, 16])
def test_theorem2_dgpo_abs_sum_is_group_size(g):
    ids = torch.zeros(g, dtype=torch.long)
    for c in range(1, g):
        r = torch.zeros(g, dtype=torch.float64)
        r[:c] = 1
        a = get_estimator("dgpo")(r, ids).advantages  # single group: λ = B_v·softmax = 1
        assert float(a.abs().sum()) == pytest.approx(g)


def test_focused_variants_abs_sums_match_table1():
    g, ids = 8, torch.zeros(8, dtype=torch.long)
    for c in range(1, g):
        r = torch.zeros(g, dtype=torch.float64)
        r[:c] = 1
        p = c / g
        hard = get_estimator("hard_focused", std_unbiased=False, eps=1e-12)(r, ids).advantages
        easy = get_estimator("easy_focused", std_unbiased=False, eps=1e-12)(r, ids).advantages
        assert float(hard.abs().sum()) == pytest.approx(g * (1 - p) ** 0.5)  # G√(1−p)
        assert float(easy.abs().sum()) == pytest.approx(g * p**0.5)  # G√p
