"""Clip-Cov / KL-Cov (Cui et al., arXiv:2505.22617) against verl's own compute_policy_loss_clip_cov / _kl_cov:
the same loss value and gradient on random batches (verl is the independent reference; the draw of
Clip-Cov is reproduced by seeding the global RNG for both)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grae.loss import policy_loss
from tolerances import assert_close_scaled

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is the `verl` extra")


def batch(seed, n=6, t=50):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g, dtype=torch.float64) * 3
    logp = (old + 0.3 * torch.randn(n, t, generator=g, dtype=torch.float64)).clamp(max=0)
    adv = torch.randn(n, generator=g, dtype=torch.float64)[:, None].expand(n, t).contiguous() * 3
    mask = (torch.arange(t)[None, :] < torch.randint(1, t + 1, (n, 1), generator=g)).double()
    return old, logp, adv, mask


def verl_config(ratio, lb=1.0, ub=5.0, kl_coef=0.1):
    policy = SimpleNamespace(clip_cov_ratio=ratio, clip_cov_lb=lb, clip_cov_ub=ub, kl_cov_ratio=ratio, ppo_kl_coef=kl_coef)
    return SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, policy_loss=policy, global_batch_info={})


@pytest.mark.parametrize("mode", ["clip_cov", "kl_cov"])
@pytest.mark.parametrize("seed,ratio", [(0, 2e-4), (1, 0.02), (2, 0.1), (3, 0.5)])
def test_cov_losses_equal_verls(mode, seed, ratio):
    old, logp, adv, mask = batch(seed)
    verl_fn = core_algos.compute_policy_loss_clip_cov if mode == "clip_cov" else core_algos.compute_policy_loss_kl_cov
    lp_v = logp.clone().requires_grad_(True)
    torch.manual_seed(100 + seed)
    expected, _ = verl_fn(old, lp_v, adv, mask, loss_agg_mode="token-mean", config=verl_config(ratio))
    expected.backward()
    lp_g = logp.clone().requires_grad_(True)
    torch.manual_seed(100 + seed)
    got, metrics = policy_loss(lp_g, old, adv, mask, clip_low=0.2, clip_high=0.28,
                               cov={"mode": mode, "ratio": ratio, "lb": 1.0, "ub": 5.0, "kl_coef": 0.1})
    got.backward()
    assert_close_scaled(got, expected, rel=1e-10)
    assert_close_scaled(lp_g.grad, lp_v.grad, rel=1e-10)
    assert float(metrics["cov_frac"]) > 0  # the batches are built so that tokens get selected
    n_valid = int(mask.sum())
    if mode == "kl_cov":
        assert float(metrics["cov_frac"]) * n_valid == pytest.approx(max(int(ratio * n_valid), 1))
    assert 0 <= float(metrics["cov_frac"]) <= max(int(ratio * n_valid), 1) / n_valid + 1e-12


def test_cov_loss_changes_the_loss_and_refuses_what_it_cannot_do():
    old, logp, adv, mask = batch(5)
    plain, _ = policy_loss(logp, old, adv, mask)
    kl, m = policy_loss(logp, old, adv, mask, cov={"mode": "kl_cov", "ratio": 0.1, "kl_coef": 1.0})
    # tol: asserts a difference far beyond the default tolerance (kl_cov adds a KL term of order 0.1)
    assert float(m["cov_frac"]) > 0 and not torch.allclose(plain, kl)
    with pytest.raises(ValueError, match="^cov.mode: unknown 'cov'"):
        policy_loss(logp, old, adv, mask, cov={"mode": "cov"})
    with pytest.raises(ValueError, match="^cov: Clip-Cov/KL-Cov are token-level"):
        policy_loss(logp, old, adv, mask, ratio_level="sequence", cov={"mode": "kl_cov"})
    with pytest.raises(ValueError, match=r"^cov.ratio: must be in \(0, 1\]"):
        policy_loss(logp, old, adv, mask, cov={"mode": "clip_cov", "ratio": 0.0})


# -- GraeTrainer and grae train ---------------------------------------------------------------------------

pytest.importorskip("trl", reason="the TRL engine is the `train` extra")
from test_trl_engine import make_trainer, model_dir  # noqa: E402, F401  (fixture)


def test_grae_trainer_trains_with_kl_cov_and_logs_the_selected_fraction(model_dir, tmp_path):  # noqa: F811
    trainer = make_trainer(model_dir, tmp_path, "grpo", steps=1, cov_loss={"mode": "kl_cov", "ratio": 0.25})
    assert trainer.grae_loss_agg_mode == "token-mean"  # cov_loss implies grae's loss
    trainer.train()
    logged = [e["grae/cov_frac"] for e in trainer.state.log_history if "grae/cov_frac" in e]
    assert logged and 0 < logged[0] <= 0.25 + 1e-6


def test_cov_loss_misconfigurations_are_refused(model_dir, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match=r"^cov_loss: expected \{mode: clip_cov \| kl_cov"):
        make_trainer(model_dir, tmp_path, "grpo", cov_loss={"mode": "entropy"})
    with pytest.raises(ValueError, match="^cov_loss: unknown key"):
        make_trainer(model_dir, tmp_path, "grpo", cov_loss={"mode": "kl_cov", "coef": 1.0})
    with pytest.raises(ValueError, match="cov_loss with dual_clip: not supported"):
        make_trainer(model_dir, tmp_path, "grpo", cov_loss={"mode": "clip_cov"}, dual_clip=3.0)
    from grae.train.config import ConfigError, load_config

    assert load_config("chain-sum", {"cov_loss": {"mode": "clip_cov"}}).cov_loss == {"mode": "clip_cov"}
    with pytest.raises(ConfigError, match=r"^cov_loss\.ratio: must be in \(0, 1\]"):
        load_config("chain-sum", {"cov_loss": {"mode": "kl_cov", "ratio": 2.0}})
