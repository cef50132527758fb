"""Bayesian Boundary Gating (``bbg``) as the third-party reading gives it: the utility's closed form against a
Monte-Carlo expectation over Beta draws, the gate's values at n = 8, k = 16 from the product formula, the
estimator's invariants (hypothesis) and a 2-step ``grae train`` on the tiny model."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.advantage import get_estimator
from grae.advantage.bbg import boundary_utility, boundary_weight
from strategies import reward_batches
from timeouts import scaled


def product_utility(m: int, n: int, k: int) -> Fraction:
    """u(m; n, k) = k · ∏_{j=1}^{k−1} (n − m + j)/(n + 1 + j), exactly, from the reading's product formula."""
    u = Fraction(k)
    for j in range(1, k):
        u *= Fraction(n - m + j, n + 1 + j)
    return u


@pytest.mark.parametrize(("m", "n", "k"), [(0, 8, 16), (1, 8, 16), (3, 8, 16), (5, 8, 4), (2, 4, 8), (8, 8, 2)])
def test_closed_form_is_the_beta_expectation(m, n, k):
    """E_{p ~ Beta(m+1, n−m+1)}[k (1 − p)^(k−1)] by 400,000 Beta draws against the closed form (and the product)."""
    draws = np.random.default_rng(m * 100 + n * 10 + k).beta(m + 1, n - m + 1, size=400_000)
    values = k * (1 - draws) ** (k - 1)
    mc, se = values.mean(), values.std(ddof=1) / math.sqrt(values.size)
    closed = float(boundary_utility(torch.tensor([float(m)], dtype=torch.float64),
                                    torch.tensor([float(n)], dtype=torch.float64), k))
    # tol: 5 standard errors of the Monte-Carlo mean (a wrong Beta parameter or exponent moves it by ≥ 10 %)
    assert abs(mc - closed) < 5 * se + 1e-12, (mc, se, closed)
    # tol: lgamma in float64 against the exact rational product, relative 1e-12
    assert closed == pytest.approx(float(product_utility(m, n, k)), rel=1e-12)


def test_gate_values_at_n8_k16():
    """w(m) = u(m)/u(1), 0 where u(m) < τ(n + 1) = 0.09: computed here from the product formula for m = 0..8."""
    n, k, tau = 8, 16, Fraction(1, 100)
    expected = []
    for m in range(n + 1):
        u = product_utility(m, n, k)
        expected.append(0.0 if u < tau * (n + 1) else float(u / product_utility(1, n, k)))
    got = boundary_weight(torch.arange(9, dtype=torch.float64), torch.full((9,), 8.0, dtype=torch.float64), k, 0.01)
    # tol: float64 lgamma against exact fractions
    assert got.tolist() == pytest.approx(expected, rel=1e-12, abs=0)
    assert expected[:4] == pytest.approx([69 / 24, 1.0, 7 / 22, 1 / 11], rel=1e-12)  # 2.875, 1, 0.3182, 0.0909
    assert [w > 0 for w in expected] == [True] * 4 + [False] * 5  # m >= 4 gated off (the reading's example)


def test_advantages_by_hand_at_n8():
    """Groups of 8 with m = 0, 1, 3, 4 successes: m = 0 gets −w(0) = −2.875 per sample (signed REINFORCE),
    m = 1 and 3 GRPO's advantage × w(m), m = 4 is gated off (advantage 0, weight 0)."""
    groups = [[0] * 8, [1] + [0] * 7, [1] * 3 + [0] * 5, [1] * 4 + [0] * 4]
    r = torch.tensor([x for g in groups for x in g], dtype=torch.float64)
    g = torch.arange(4).repeat_interleave(8)
    out = get_estimator("bbg")(r, g)
    grpo = get_estimator("grpo")(r, g).advantages.double()
    a = out.advantages.double().view(4, 8)
    # tol: float32 outputs of float64 arithmetic
    assert a[0].tolist() == pytest.approx([-69 / 24] * 8, rel=1e-6)
    assert a[1].tolist() == pytest.approx(grpo.view(4, 8)[1].tolist(), rel=1e-6)
    assert a[2].tolist() == pytest.approx((grpo.view(4, 8)[2] / 11).tolist(), rel=1e-6)
    assert a[3].tolist() == [0.0] * 8
    assert out.weights.view(4, 8).tolist() == [[1.0] * 8] * 3 + [[0.0] * 8]
    assert out.metrics["bbg/frac_groups_gated"] == 0.25


def _reference(r: torch.Tensor, g: torch.Tensor, k: int, tau: float, threshold: float = 0.5):
    """``(weight per sample, zero-success per sample)`` written from the definition, group by group."""
    w = torch.zeros_like(r, dtype=torch.float64)
    zero = torch.zeros_like(r, dtype=torch.bool)
    for gid in g.unique():
        member = (g == gid) & ~torch.isnan(r)
        n = int(member.sum())
        if n == 0:
            continue
        m = int((r[member] > threshold).sum())
        u = float(product_utility(m, n, k))
        w[member] = 0.0 if u < tau * (n + 1) else u / float(product_utility(1, n, k))
        zero[member] = m == 0
    return w, zero


@given(reward_batches(nan=True), st.sampled_from([1, 2, 4, 16]), st.sampled_from([0.0, 0.01, 0.1]))
def test_invariants(batch, k, tau):
    """Shape and finiteness; weight 0 and advantage 0 wherever gated (and on missing rewards); elsewhere the
    base's (GRPO's) advantage scaled by the group's weight, and −w(0) in groups without a success."""
    r, g = batch
    out = get_estimator("bbg", k_ref=k, tau=tau)(r, g)
    assert out.advantages.shape == r.shape and out.weights.shape == r.shape
    assert bool(torch.isfinite(out.advantages).all()) and bool(torch.isfinite(out.weights).all())
    w, zero = _reference(r, g, k, tau)
    gated = w == 0
    assert bool((out.weights[gated] == 0).all()) and bool((out.advantages[gated] == 0).all())
    kept = ~gated
    assert bool((out.weights[kept] == 1).all())
    base = get_estimator("grpo")(r, g).advantages.double()
    expected = torch.where(zero, -w, w * base)
    # tol: float32 outputs; the weights are ≤ k and GRPO's |Â| ≤ √G, so 1e-5 relative to the larger
    assert torch.allclose(out.advantages.double(), expected, rtol=1e-5, atol=1e-5)


@given(st.integers(1, 64), st.integers(1, 64))
def test_weight_falls_with_successes(n, k):
    """For every group size n and k: the weight never rises with the successes m (u falls with m), w(1) = 1."""
    m = torch.arange(n + 1, dtype=torch.float64)
    w = boundary_weight(m, torch.full_like(m, float(n)), k, 0.0)
    assert bool((w[1:] <= w[:-1] * (1 + 1e-12)).all())
    assert float(w[1]) == pytest.approx(1.0, rel=1e-12)


def test_refusals():
    with pytest.raises(ValueError, match="k_ref"):
        get_estimator("bbg", k_ref=0)
    with pytest.raises(ValueError, match="tau"):
        get_estimator("bbg", tau=-0.1)
    with pytest.raises(ValueError, match="base: unknown estimator"):
        get_estimator("bbg", base="nope")
    with pytest.raises(ValueError, match="base: 'unlikeliness' requires estimator context"):
        get_estimator("bbg", base="unlikeliness")


def test_listed_by_grae_estimators():
    done = subprocess.run([sys.executable, "-m", "grae.cli", "estimators"], capture_output=True, text=True,
                          timeout=scaled(120), env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(row for row in done.stdout.splitlines() if "│ bbg" in row or row.startswith("bbg") or " bbg " in row)
    assert "k_ref=16" in line and "tau=0.01" in line


def test_two_steps_of_grae_train_on_the_tiny_model(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    out_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(out_dir),
           "--max-steps", "2", "--task.train_size", "64", "--trl.per_device_train_batch_size", "8",
           "--trl.num_generations", "4", "--trl.max_completion_length", "4", "--eval.enabled", "false",
           "--estimator", "bbg", "--estimator_params.k_ref", "8"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=scaled(300), cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    from grae.train.metrics_file import read_metrics

    rows = read_metrics(out_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all("grae/bbg/frac_groups_gated" in r or "bbg/frac_groups_gated" in r for r in rows), rows[0].keys()
    assert (out_dir / "final" / "config.json").exists()
