"""The collapse rule (bench/agrae_collapse_lm.py, bench/bench_agrae_collapse.py): exact
McNemar tail probabilities, Wilson intervals and the per-run collapse/degraded flags."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from agrae_collapse_lm import run_summary  # noqa: E402
from bench_agrae_collapse import mcnemar_one_sided, wilson  # noqa: E402


def test_mcnemar_reference_values():
    assert mcnemar_one_sided(5, 0) == 1 / 32           # five pairs, all one way: the smallest 5-seed p
    assert mcnemar_one_sided(4, 0) == 1 / 16           # four cannot reach p < 0.05
    assert mcnemar_one_sided(4, 1) == 6 / 32           # P(X >= 4), X ~ Bin(5, 1/2)
    assert mcnemar_one_sided(0, 0) == 1.0


@given(st.integers(0, 30), st.integers(0, 30))
def test_mcnemar_is_a_binomial_tail(b, c):
    n = b + c
    p = mcnemar_one_sided(b, c)
    assert 0 < p <= 1
    if n:
        assert math.isclose(p + sum(math.comb(n, i) for i in range(b)) / 2**n, 1.0)


def test_wilson_reference_values():
    lo, hi = wilson(0, 32)
    # tol: Wilson bounds in [0, 1], the reference values written to 4 decimals
    assert lo == 0.0 and hi == pytest.approx(0.1072, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)


def _log(rewards):
    return [{"step": i + 1, "reward_mean": r, "acr": 1.0 - r} for i, r in enumerate(rewards)]


def test_run_summary_flags_a_collapse_and_not_a_recovery():
    collapse = _log([0.3] * 10 + [0.3 - 0.3 * i / 100 for i in range(100)] + [0.0] * 290)
    r = run_summary(collapse, base_steps=10, final_frac=0.1)
    assert r["collapsed"] and r["degraded"] and r["final"] == 0.0 and r["final_acr"] == 1.0
    dip_and_recover = _log([0.3] * 10 + [0.05] * 100 + [0.6] * 290)
    r = run_summary(dip_and_recover, base_steps=10, final_frac=0.1)
    assert not r["collapsed"] and not r["degraded"] and r["lowest_window"] == pytest.approx(0.05)
    slide = _log([0.3] * 10 + [0.2] * 390)            # below the base, above half of it
    r = run_summary(slide, base_steps=10, final_frac=0.1)
    assert r["degraded"] and not r["collapsed"]


def test_run_summary_refuses_a_too_short_log():
    with pytest.raises(ValueError, match="too few"):
        run_summary(_log([0.3] * 12), base_steps=10, final_frac=0.1)
