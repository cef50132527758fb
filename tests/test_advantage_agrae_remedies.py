"""A-GRAE's opt-in remedies for the ω → 0 loop: floor, EMA ω, collapse guard (defaults = the paper)."""

from __future__ import annotations

import pytest
import torch

from grae.advantage import get_estimator
from tolerances import assert_close_scaled

G8 = torch.zeros(8, dtype=torch.long)
LOW = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])  # ω = 1/8
HIGH = torch.tensor([1.0, 1, 1, 1, 1, 1, 0, 0])  # ω = 3/4


def eq12(rewards):
    """A-GRAE with Eq. 13 off: the sample-level advantages the group level then scales."""
    return get_estimator("agrae", group_level=False)(rewards, G8).advantages


@pytest.mark.parametrize("floor", [0.0, 0.25, 0.5])
def test_floor_bounds_the_positive_factor(floor):
    a = get_estimator("agrae", floor=floor)(LOW, G8).advantages
    base = eq12(LOW)
    factor = max(floor, 1 / 8)
    assert_close_scaled(a, torch.where(base > 0, base * factor, base), rel=1e-5)


def test_collapse_guard_reverts_to_grpo_only_below_the_threshold():
    guarded = get_estimator("agrae", collapse_guard=0.2)
    assert_close_scaled(guarded(LOW, G8).advantages, get_estimator('grpo')(LOW, G8).advantages, rel=1e-5)
    assert_close_scaled(guarded(HIGH, G8).advantages, get_estimator('agrae')(HIGH, G8).advantages, rel=1e-5)


def test_ema_omega_drives_the_suppression_and_survives_state_dict():
    est = get_estimator("agrae", omega_ema=0.9)
    assert est(HIGH, G8).metrics["agrae/suppression"] == pytest.approx(0.75)  # ω̄_0 = ω_0
    resumed = get_estimator("agrae", omega_ema=0.9)
    resumed.load_state_dict(est.state_dict())
    out = resumed(LOW, G8)
    avg = 0.9 * 0.75 + 0.1 * 0.125
    assert out.metrics["agrae/suppression"] == pytest.approx(avg)
    base = eq12(LOW)  # Eq. 12 still reads this batch's ω
    assert_close_scaled(out.advantages, torch.where(base > 0, base * avg, base), rel=1e-5)


def test_defaults_are_the_paper_formula_and_stateless():
    est = get_estimator("agrae")
    assert est.state_dict() == {}
    base = eq12(LOW)
    assert_close_scaled(est(LOW, G8).advantages, torch.where(base > 0, base / 8, base), rel=1e-5)


@pytest.mark.parametrize("params, field", [({"floor": 1.5}, "floor"), ({"omega_ema": 1.0}, "omega_ema"),
                                           ({"collapse_guard": 0.0}, "collapse_guard")])
def test_remedy_params_out_of_range_name_the_field(params, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        get_estimator("agrae", **params)
