"""Policy losses against hand-computed values and their defining properties."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.loss import agg_loss, entropy_from_logits, kl_penalty, policy_loss
from tolerances import assert_close_scaled

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1.0]])
LOSS = torch.tensor([[1.0, 2, 3, 99], [4, 5, 99, 99], [6, 7, 8, 9]])


def test_agg_modes_hand_values():
    assert agg_loss(LOSS, MASK, "token-mean").item() == pytest.approx(45 / 9)
    assert agg_loss(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx((2 + 4.5 + 7.5) / 3)
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx((6 + 9 + 30) / 3)
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(45 / (3 * 4))
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(45 / 30)
    assert agg_loss(LOSS, MASK, "token-mean", denominator=90.0).item() == pytest.approx(0.5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_weight_zero_sample_leaves_numerator_and_denominator(mode):
    w = torch.tensor([1.0, 0.0, 1.0])
    dropped = agg_loss(LOSS, MASK, mode, weights=w, norm_length=4)
    without = agg_loss(LOSS[[0, 2]], MASK[[0, 2]], mode, norm_length=4)
    assert dropped.item() == pytest.approx(without.item())


def test_unknown_agg_mode_lists_valid():
    with pytest.raises(ValueError, match="loss_agg_mode: .*token-mean"):
        agg_loss(LOSS, MASK, "mean")


def test_on_policy_gradient_is_minus_advantage_weighted_score():
    """At ratio 1 the clipped surrogate's gradient is −A ∇log π (token-mean)."""
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.2, 0.1]])).requires_grad_(True)
    adv = torch.tensor([1.0, -2.0])
    loss, m = policy_loss(logp, logp.detach(), adv, torch.ones(2, 2))
    loss.backward()
    assert_close_scaled(logp.grad, -adv[:, None].expand(2, 2) / 4, rel=1e-6)
    assert m["clipfrac"] == 0 and m["ratio_mean"] == pytest.approx(1.0)


def test_asymmetric_clip_and_clip_fractions():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 1.25, 0.5, 0.75]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, m = policy_loss(logp, old, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.28)
    # token 0: ratio 1.5 > 1.28, A>0 → clipped at 1.28; token 1: 1.25 within; token 2: 0.5 < 0.8, A<0 → clipped 0.8;
    # token 3: 0.75 < 0.8 → clipped 0.8
    expected = (-1.28 - 1.25 + 0.8 + 0.8) / 4
    assert loss.item() == pytest.approx(expected)
    assert m["clipfrac_high"].item() == pytest.approx(0.25)
    assert m["clipfrac_low"].item() == pytest.approx(0.5)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 2] == 0 and logp.grad[0, 3] == 0 and logp.grad[0, 1] != 0


def test_dual_clip_caps_negative_advantage_loss():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[10.0, 2.0]]))
    adv = torch.tensor([[-1.0, -1.0]])
    loss, m = policy_loss(logp, old, adv, torch.ones(1, 2), dual_clip=3.0)
    assert loss.item() == pytest.approx((3.0 + 2.0) / 2)  # min(max(10, 1.2), 3) and max(2, 1.2)
    assert m["dual_clipfrac"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, old, adv, torch.ones(1, 2), dual_clip=0.5)


def test_sequence_ratio_is_geometric_mean_and_clips_per_sequence():
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.3, -0.1, 0.1], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0.0]])
    adv = torch.tensor([1.0, 1.0])
    loss, m = policy_loss(logp, old, adv, mask, ratio_level="sequence", clip_low=0.2, agg="seq-mean-token-mean")
    s0 = math.exp(0.1)  # mean log-ratio 0.1; the masked 9.0 of sample 1 is ignored (s1 = 1)
    assert loss.item() == pytest.approx(-(s0 + 1.0) / 2)
    loss_clip, _ = policy_loss(logp, old, adv, mask, ratio_level="sequence", clip_low=3e-4, clip_high=4e-4,
                               agg="seq-mean-token-mean")
    assert loss_clip.item() == pytest.approx(-(1 + 4e-4 + 1.0) / 2)


def test_sequence_ratio_gradient_is_gspo():
    """∇ of GSPO-token with sequence-level A equals ∇ of A·s_i (Zheng et al. 2025, Eq. 13 vs Eq. 7)."""
    torch.manual_seed(0)
    logp = (0.1 * torch.randn(3, 5)).requires_grad_(True)
    old = 0.1 * torch.randn(3, 5)
    mask = torch.ones(3, 5)
    adv = torch.tensor([0.5, -1.0, 2.0])
    loss, _ = policy_loss(logp, old, adv, mask, ratio_level="sequence", clip_low=10.0, agg="seq-mean-token-mean")
    (g1,) = torch.autograd.grad(loss, logp)
    s = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1))
    (g2,) = torch.autograd.grad(-(adv * s).mean(), logp)
    assert_close_scaled(g1, g2, rel=1e-5)


@given(st.floats(-3, 3), st.floats(-3, 3))
def test_kl_estimators(logp_value, ref_value):
    logp, ref = torch.tensor([[logp_value]]), torch.tensor([[ref_value]])
    delta = ref_value - logp_value
    # tol: one float32 element, no reduction: inputs in [−3, 3] round by ≤ 2.4e-7 when stored, so k1 moves by
    # ≤ 5e-7 and k2 (≤ 18) by ≤ 3e-6; k3's rel carries its scale (≤ e^6), its abs floor is for k3 ≈ 0
    assert kl_penalty(logp, ref, "k1", clamp=None).item() == pytest.approx(-delta, abs=1e-6)
    assert kl_penalty(logp, ref, "k2", clamp=None).item() == pytest.approx(delta**2 / 2, abs=1e-5)
    k3 = kl_penalty(logp, ref, "k3", clamp=None).item()
    assert k3 == pytest.approx(math.exp(delta) - delta - 1, rel=1e-5, abs=1e-6) and k3 >= -1e-7


def test_k3_is_unbiased_for_kl():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(6), 0)
    q = torch.softmax(torch.randn(6), 0)
    samples = torch.multinomial(p, 400_000, replacement=True)
    est = kl_penalty(p.log()[samples][None], q.log()[samples][None], "k3", clamp=None).mean()
    exact = (p * (p.log() - q.log())).sum()
    assert est.item() == pytest.approx(exact.item(), rel=0.02)


def test_entropy_from_logits():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    h = entropy_from_logits(logits)
    assert h[0, 0].item() == pytest.approx(math.log(4))
    assert h[0, 1].item() == pytest.approx(0.0, abs=1e-6)  # tol: an entropy in [0, log 4]; this one is ~1e-41
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(logits[..., 0], logits[..., 0], "k4")
