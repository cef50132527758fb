"""Noisy-verifier reward corrections (Cai et al. 2025): unbiasedness and composition."""

import pytest
import torch

from grae.advantage import backward_correct, forward_weights, get_estimator, with_reward_correction
from tolerances import assert_close_scaled


def test_backward_correction_is_unbiased():
    torch.manual_seed(0)
    rho0, rho1 = 0.1, 0.25
    clean = torch.bernoulli(torch.full((400_000,), 0.3))
    flip = torch.rand_like(clean)
    noisy = torch.where(clean == 1, (flip >= rho1).double(), (flip < rho0).double())
    corrected = backward_correct(noisy, rho0, rho1)
    # tol: means in [0, 1] of 400,000 Bernoulli draws (seeded): sd ≈ 1e-3 (the correction amplifies the noise), 4e-3
    assert corrected.mean().item() == pytest.approx(clean.mean().item(), abs=4e-3)


def test_forward_weights():
    r = torch.tensor([1.0, 0.0, float("nan")])
    w = forward_weights(r, 0.2)
    assert w[:2].tolist() == pytest.approx([0.2, -0.8]) and torch.isnan(w[2])
    out = with_reward_correction(get_estimator("reinforce"), mode="forward", rho1=0.2)(r, torch.tensor([0, 0, 0]))
    assert out.advantages.tolist() == pytest.approx([0.2, -0.8, 0.0])


def test_backward_correction_composes_with_any_mean_based_estimator():
    r, g = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 1, 1, 1])
    est = with_reward_correction(get_estimator("dr_grpo"), mode="backward", rho0=0.1, rho1=0.2)
    plain = get_estimator("dr_grpo")(r, g).advantages
    assert_close_scaled(est(r, g).advantages, plain / 0.7, rel=1e-5)  # affine map: centred advantage scales by 1/(1−ρ0−ρ1)
    corrected_grpo = with_reward_correction(get_estimator("grpo"), mode="backward", rho0=0.1, rho1=0.2)
    assert_close_scaled(corrected_grpo(r, g).advantages, get_estimator("grpo", eps=1e-12)(r, g).advantages, rel=1e-5)
    assert est.params["reward_correction"] == {"mode": "backward", "rho0": 0.1, "rho1": 0.2}


def test_correction_errors_name_the_problem():
    with pytest.raises(ValueError, match="rho0/rho1"):
        with_reward_correction(get_estimator("grpo"), mode="backward", rho0=0.6, rho1=0.5)
    with pytest.raises(ValueError, match="mode"):
        with_reward_correction(get_estimator("psr"), mode="forward", rho1=0.1)
    with pytest.raises(ValueError, match=r"rewards: .*\[0, 1\]"):
        with_reward_correction(get_estimator("agrae"), mode="backward", rho0=0.2)(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]))


def test_correction_delegates_state():
    est = with_reward_correction(get_estimator("avspo"), mode="backward", rho0=0.05)
    est(torch.tensor([0.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    state = est.state_dict()
    assert state["step"] == 1
    other = with_reward_correction(get_estimator("avspo"), mode="backward", rho0=0.05)
    other.load_state_dict(state)
    assert other.state_dict() == state
