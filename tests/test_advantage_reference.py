"""Each estimator against its paper equation: worked values and loop references on random batches."""


import pytest
import torch
from hypothesis import given

import reference_estimators as ref
from grae.advantage import get_estimator
from strategies import reward_batches
from tolerances import assert_close_scaled

G8 = torch.zeros(8, dtype=torch.long)


def group_with(correct: int, size: int = 8) -> torch.Tensor:
    r = torch.zeros(size, dtype=torch.float64)
    r[:correct] = 1.0
    return r


def batch_with_omega(correct: int, omega: float, groups: int = 10, size: int = 8):
    """Group 0 has ``correct`` of ``size`` right; the other groups fill the batch up to mean ω."""
    total = round(omega * groups * size)
    rest = total - correct
    rewards = [group_with(correct, size)]
    for _ in range(groups - 1):
        c = min(size - 1, max(1, rest // max(1, groups - 1 - len(rewards) + 1)))
        c = min(c, rest)
        rewards.append(group_with(c, size))
        rest -= c
    assert rest == 0, "construction failed"
    r = torch.cat(rewards)
    assert abs(float(r.mean()) - omega) < 1e-12  # tol: a mean of 0/1 floats in float64: k/n rounded once
    return r, torch.arange(groups).repeat_interleave(size)


# -- worked values (G = 8, unbiased std, α = 1), by hand to 3 decimals ---------------------------------

def test_grpo_worked_value():
    a = get_estimator("grpo")(group_with(1), G8).advantages
    # tol: worked values, written to 3 decimals
    assert a[0].item() == pytest.approx(2.475, abs=5e-4)
    assert a[1].item() == pytest.approx(-0.354, abs=5e-4)


@pytest.mark.parametrize("correct,expected", [(1, (0.593, -0.282)), (4, (0.198, -0.661)), (7, (0.122, -2.847))])
def test_agrae_worked_values(correct, expected):
    rewards, gids = batch_with_omega(correct, 0.3)
    out = get_estimator("agrae", alpha=1.0)(rewards, gids)
    assert out.metrics["agrae/omega"] == pytest.approx(0.3)
    a = out.advantages[:8]
    # tol: the paper's worked values (its table), written to 3 decimals
    assert a[0].item() == pytest.approx(expected[0], abs=5e-4)  # a correct sample
    assert a[7].item() == pytest.approx(expected[1], abs=5e-4)  # a wrong sample


def test_agrae_worked_values_high_omega():
    # algorithms.md §1.9, paper column ω = 0.7: 1 correct → (1.993, −0.407); 7 correct → (0.198, −1.976)
    for correct, expected in [(1, (1.993, -0.407)), (7, (0.198, -1.976))]:
        rewards, gids = batch_with_omega(correct, 0.7)
        a = get_estimator("agrae")(rewards, gids).advantages[:8]
        assert (a[0].item(), a[7].item()) == pytest.approx(expected, abs=5e-4)  # tol: the paper's 3 decimals


def test_ngrpo_worked_value():
    a = get_estimator("ngrpo")(group_with(1), G8).advantages
    assert (a[0].item(), a[1].item()) == pytest.approx((1.764, -0.504), abs=5e-4)  # tol: 3 decimals, as written
    # all wrong: every sample −1/3 (algorithms.md §4.1); all correct: 0
    # tol: float64 of order 1; the std's ε (1e-6) moves −1/3 by 1e-6/3 (-0.3333323), 1e-5 admits it and
    # nothing else; identical rewards centre to exactly 0 (the 1e-9 bound only guards the sign of a rounding)
    assert get_estimator("ngrpo")(group_with(0), G8).advantages.tolist() == pytest.approx([-1 / 3] * 8, abs=1e-5)
    assert get_estimator("ngrpo")(group_with(8), G8).advantages.abs().max().item() < 1e-9


def test_avspo_worked_value():
    # r_max = 1, G = 8, ACR = 0.5 → K = 6 virtual {1, 5/6, …, 1/6}: all-wrong A = −0.70, all-right A = +0.62
    rewards = torch.cat([group_with(0), group_with(8), group_with(3), group_with(5)])
    gids = torch.arange(4).repeat_interleave(8)
    out = get_estimator("avspo")(rewards, gids)
    assert out.metrics["avspo/acr"] == 0.5 and out.metrics["avspo/active"] == 0.0  # ACR = τ: not strictly above
    est = get_estimator("avspo", tau_init=0.4)
    out = est(rewards, gids)
    assert out.metrics["avspo/mean_virtual"] == 6.0
    # tol: the worked values of the comment above, written to 2 decimals
    assert out.advantages[0].item() == pytest.approx(-0.70, abs=5e-3)
    assert out.advantages[8].item() == pytest.approx(0.62, abs=5e-3)
    # non-collapsed groups keep GRPO's advantages
    grpo = get_estimator("grpo")(rewards, gids).advantages
    assert_close_scaled(out.advantages[16:], grpo[16:], rel=1e-9)


# -- loop references on random batches with non-contiguous, unequal groups ----------------------

def close(a, b):
    """Within 1e-9 relative to the reference's largest magnitude (at least 1: rewards in [0, 1], float64)."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return torch.allclose(a, b, rtol=1e-9, atol=1e-9 * max(1.0, float(b.abs().max()) if b.numel() else 1.0))


@given(reward_batches())
def test_grpo_matches_reference(batch):
    r, g = batch
    assert close(get_estimator("grpo")(r, g).advantages, ref.grpo(r.tolist(), g.tolist()))
    assert close(get_estimator("grpo", std_unbiased=False, eps=1e-4)(r, g).advantages,
                 ref.grpo(r.tolist(), g.tolist(), eps=1e-4, unbiased=False))
    assert close(get_estimator("dr_grpo")(r, g).advantages, ref.grpo(r.tolist(), g.tolist(), scale=False))


@given(reward_batches())
def test_rloo_matches_reference(batch):
    r, g = batch
    assert close(get_estimator("rloo")(r, g).advantages, ref.rloo(r.tolist(), g.tolist()))


@given(reward_batches())
def test_agrae_matches_reference(batch):
    r, g = batch
    for alpha in (1.0, 0.5, 0.25):
        assert close(get_estimator("agrae", alpha=alpha)(r, g).advantages, ref.agrae(r.tolist(), g.tolist(), alpha=alpha))
    assert close(get_estimator("agrae", sample_level=False)(r, g).advantages,
                 ref.agrae(r.tolist(), g.tolist(), sample_level=False))
    assert close(get_estimator("agrae", group_level=False)(r, g).advantages, ref.agrae(r.tolist(), g.tolist(), group_level=False))
    assert close(get_estimator("agrae", scale="none")(r, g).advantages, ref.agrae(r.tolist(), g.tolist(), scale=False))


@given(reward_batches())
def test_symmetry_variants_match_reference(batch):
    r, g = batch
    rl, gl = r.tolist(), g.tolist()
    assert close(get_estimator("hard_focused")(r, g).advantages, ref.focused(rl, gl, "hard"))
    assert close(get_estimator("easy_focused")(r, g).advantages, ref.focused(rl, gl, "easy"))
    assert close(get_estimator("positive_dominant")(r, g).advantages, ref.dominant(rl, gl, "positive"))
    assert close(get_estimator("negative_dominant", beta=4.0)(r, g).advantages, ref.dominant(rl, gl, "negative", beta=4.0))


@given(reward_batches())
def test_signed_reinforce_match_reference(batch):
    r, g = batch
    for kind, params in [("psr", {}), ("nsr", {}), ("w_reinforce", {"lam": 0.3})]:
        out = get_estimator(kind, **params)(r, g)
        adv, w = ref.signed_reinforce(r.tolist(), kind, **params)
        assert close(out.advantages, adv) and close(out.weights, w)


@given(reward_batches())
def test_ngrpo_matches_reference(batch):
    r, g = batch
    assert close(get_estimator("ngrpo")(r, g).advantages, ref.ngrpo(r.tolist(), g.tolist()))
    assert close(get_estimator("ngrpo", max_reward=2.0, num_virtual=3)(r, g).advantages,
                 ref.ngrpo(r.tolist(), g.tolist(), max_reward=2.0, m=3))


@given(reward_batches(min_groups=2))
def test_avspo_matches_reference(batch):
    r, g = batch
    for tau in (0.1, 0.5, 0.9):
        est = get_estimator("avspo", tau_init=tau)
        expected, acr = ref.avspo_step(r.tolist(), g.tolist(), tau)
        out = est(r, g)
        assert out.metrics["avspo/acr"] == pytest.approx(acr)
        assert close(out.advantages, expected)


@given(reward_batches())
def test_dgpo_matches_reference(batch):
    r, g = batch
    out = get_estimator("dgpo")(r, g)
    adv, w = ref.dgpo(r.tolist(), g.tolist())
    assert close(out.advantages, adv) and close(out.weights, w)


# -- estimator-specific behaviour ---------------------------------------------------------------

def test_avspo_threshold_follows_reward_change():
    est = get_estimator("avspo")  # τ0 = 0.5, η = 0.01
    collapsed = torch.cat([group_with(0), group_with(0), group_with(0), group_with(4)])  # ACR 0.75, ω = 0.125
    gids = torch.arange(4).repeat_interleave(8)
    est(collapsed, gids)
    assert est.state_dict() == {"tau": 0.5, "prev_reward_mean": 0.125, "step": 1}  # no Δ on the first step
    better = torch.cat([group_with(0), group_with(0), group_with(8), group_with(4)])  # ACR 0.75, ω = 0.375
    est(better, gids)
    assert est.tau == pytest.approx(0.5 + 0.01 * (0.75 - 0.5))  # improved → move toward ACR
    worse = torch.cat([group_with(0), group_with(0), group_with(0), group_with(4)])
    tau = est.tau
    est(worse, gids)
    assert est.tau == pytest.approx(tau - 0.01 * (0.75 - tau))  # got worse → move away from ACR


def test_avspo_threshold_is_clipped():
    est = get_estimator("avspo", eta=1.0, tau_init=0.5)
    gids = torch.arange(2).repeat_interleave(4)
    rewards = [torch.tensor([0, 0, 0, 0, 1, 0, 0, 0.0]), torch.tensor([1, 1, 1, 1, 1, 0, 0, 0.0])]
    for step in range(6):
        est(rewards[step % 2], gids)
        assert 0.1 <= est.tau <= 0.9


def test_avspo_state_roundtrip():
    gids = torch.arange(3).repeat_interleave(4)
    batches = [torch.bernoulli(torch.full((12,), p)) for p in (0.2, 0.5, 0.1, 0.7, 0.3)]
    a = get_estimator("avspo", eta=0.2)
    for b in batches[:3]:
        a(b, gids)
    b = get_estimator("avspo", eta=0.2)
    b.load_state_dict(a.state_dict())
    for batch in batches[3:]:
        assert torch.equal(a(batch, gids).advantages, b(batch, gids).advantages)
    assert a.state_dict() == b.state_dict()


def test_agrae_suppresses_positives_early_and_not_late():
    gids = torch.arange(2).repeat_interleave(8)
    early = torch.cat([group_with(1), group_with(0)])  # ω = 1/16
    out = get_estimator("agrae")(early, gids)
    assert out.metrics["agrae/suppression"] == pytest.approx(1 / 16)
    assert float(out.advantages.sum()) < 0  # Σ A* < 0: group-level symmetry broken toward negatives
    late = torch.cat([group_with(8), group_with(7)])  # ω = 15/16, α = 0.5 → no suppression
    out = get_estimator("agrae", alpha=0.5)(late, gids)
    assert out.metrics["agrae/suppression"] == 1.0


def test_dgpo_abs_sum_equals_group_size():
    rewards = torch.cat([group_with(1), group_with(4), group_with(7, size=10), group_with(0, size=5)])
    gids = torch.tensor([3] * 8 + [9] * 8 + [-1] * 10 + [5] * 5)
    out = get_estimator("dgpo", question_weighting=False)(rewards, gids)
    for gid, size in [(3, 8), (9, 8), (-1, 10)]:
        assert out.advantages[gids == gid].abs().sum().item() == pytest.approx(size)
    assert out.weights[gids == 5].sum() == 0 and out.advantages[gids == 5].abs().sum() == 0
    weighted = get_estimator("dgpo")(rewards, gids)
    # harder question (fewer correct) gets the larger λ, and Σλ over valid groups = B_v
    lam = {gid: weighted.advantages[gids == gid].abs().sum().item() / size for gid, size in [(3, 8), (9, 8), (-1, 10)]}
    assert lam[3] > lam[9] > lam[-1]
    assert sum(lam.values()) == pytest.approx(3.0)


def test_psr_drops_wrong_samples():
    out = get_estimator("psr")(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert out.advantages.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert out.weights.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert out.metrics["frac_dropped"] == 0.5


def test_rloo_is_scaled_grpo_centring():
    r, g = group_with(3), G8
    rloo = get_estimator("rloo")(r, g).advantages
    centred = get_estimator("dr_grpo")(r, g).advantages
    assert_close_scaled(rloo, centred * 8 / 7, rel=1e-12)
