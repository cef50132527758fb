"""pass@k exactness and the batch diagnostics."""

from fractions import Fraction
from math import comb

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grae.advantage import get_estimator
from grae.metrics import advantage_collapse_rate, pass_at_k, pass_at_k_curve, pass_at_k_many, powers_of_two


def exact_pass_at_k(n, c, k):
    return 1 - Fraction(comb(n - c, k), comb(n, k))


@given(st.integers(1, 3000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_binomial_form(nck):
    n, c, k = nck
    # tol: pass@k in [0, 1], float64: rel and abs 1e-12 both far above rounding (1e-16)
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12, rel=1e-12)


def test_pass_at_k_edge_cases():
    assert pass_at_k(256, 0, 256) == 0.0
    assert pass_at_k(256, 1, 256) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    for bad in [(0, 0, 1), (4, 5, 1), (4, 2, 5), (4, 2, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    with pytest.raises(TypeError):
        pass_at_k(4.0, 2, 1)


@given(st.lists(st.integers(0, 64), min_size=1, max_size=50), st.sampled_from([1, 2, 8, 64]))
def test_vectorised_matches_scalar(cs, k):
    n = np.full(len(cs), 64)
    many = pass_at_k_many(n, cs, k)
    assert many.tolist() == [pass_at_k(64, c, k) for c in cs]


def test_curve_and_powers():
    assert powers_of_two(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert powers_of_two(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    curve = pass_at_k_curve([4, 4], [1, 4])
    assert curve == {1: pytest.approx((0.25 + 1) / 2), 2: pytest.approx((0.5 + 1) / 2), 4: 1.0}


def test_acr_and_diagnostics():
    r = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, float("nan"), 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3])
    assert advantage_collapse_rate(r, g) == pytest.approx(3 / 4)  # group 3 has one valid sample
    m = get_estimator("grpo")(r, g).metrics
    assert m["acr"] == pytest.approx(3 / 4)
    assert m["frac_all_correct"] == pytest.approx(2 / 4) and m["frac_all_wrong"] == pytest.approx(1 / 4)
    assert m["omega"] == pytest.approx(6 / 13)
    assert m["adv_pos_mass"] == pytest.approx(m["adv_neg_mass"])  # GRPO symmetry
    assert m["adv_abs_sum_p[0.25,0.50)"] == pytest.approx(2 * (3 ** 0.5) * (0.25 * 0.75) ** 0.5 * 2, rel=1e-4)
    neg = get_estimator("negative_dominant")(r, g).metrics
    assert neg["adv_pos_mass"] == pytest.approx(m["adv_pos_mass"] / 10)
