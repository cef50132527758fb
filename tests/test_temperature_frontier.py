"""The base's temperature frontier F and each arm's signed distance Δ_F to it
(grae.compare.temperature_frontier)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grae.compare.temperature_frontier import (
    TEMPERATURES,
    exact_counts,
    pareto_front,
    temperature_frontier,
    trace_frontier,
)
from tolerances import assert_close_scaled

# Hand-computed case (k = 2, two problems): pass@2 of p is 1 − (1 − p)².
#   T = 0.5: p = (0.4, 0.2): pass@1 0.30, pass@2 (0.64 + 0.36)/2 = 0.50   below F (beaten by T = 1.0 at both)
#   T = 1.0: p = (0.5, 0.3): pass@1 0.40, pass@2 (0.75 + 0.51)/2 = 0.63   on F
#   T = 0.7: p = (0.9, 0.1): pass@1 0.50, pass@2 (0.99 + 0.19)/2 = 0.59   on F
BASE = {0.5: [0.4, 0.2], 1.0: [0.5, 0.3], 0.7: [0.9, 0.1]}
# An arm, two seeds: p = (0.7, 0.3) and (0.5, 0.3): pass@1 0.45, pass@2 (0.91 + 0.51 + 0.75 + 0.51)/4 = 0.67.
# F(0.45) = (0.63 + 0.59)/2 = 0.61 (half-way between T = 1.0 and T = 0.7), so Δ_F = 0.67 − 0.61 = +0.06.
# Its cells (w = 0.5, slope β = (0.59 − 0.63)/0.1 = −0.4; the path at w per problem: pass@2 (0.87, 0.35), pass@1
# (0.7, 0.2)): d = y − y_path − β (x − x_path):
#   seed 0: 0.91 − 0.87 + 0.4·0 = 0.04;   0.51 − 0.35 + 0.4·0.1 = 0.20
#   seed 1: 0.75 − 0.87 + 0.4·(−0.2) = −0.20;   0.20
ARM = [[0.7, 0.3], [0.5, 0.3]]


def test_reference_values_of_the_frontier_and_an_arms_distance():
    frontier, distances = temperature_frontier(BASE, {"arm": ARM}, k=2)
    assert [(p.temperature, p.on_frontier) for p in frontier.points] == [(0.5, False), (0.7, True), (1.0, True)]
    assert_close_scaled([[p.pass1, p.passk] for p in frontier.points], [[0.30, 0.50], [0.50, 0.59], [0.40, 0.63]],
                        rel=1e-12)  # tol: float64 arithmetic on exact decimals
    assert frontier.best().temperature == 0.7 and frontier.at(0.45) == pytest.approx(0.61, abs=1e-12)  # tol: float64
    d = distances["arm"]
    assert_close_scaled(d.values, [[0.04, 0.20], [-0.20, 0.20]], rel=1e-12)  # tol: float64 arithmetic
    assert d.interval.mean == pytest.approx(0.06, abs=1e-12)  # tol: float64 arithmetic
    assert d.interval.lo < 0.06 < d.interval.hi and d.seeds == [0, 1]
    assert d.per_seed == pytest.approx({0: 0.12, 1: 0.0}, abs=1e-12)  # tol: float64; each seed against the same F


def test_an_arm_beyond_the_ends_of_F_is_compared_with_its_nearest_end_point():
    frontier, distances = temperature_frontier(BASE, {"sharp": [[0.95, 0.15]], "flat": [[0.2, 0.2]]}, k=2)
    # sharp: pass@1 0.55 > 0.50 (F's last point), pass@2 (0.9975 + 0.2775)/2 = 0.6375, F there = 0.59
    assert distances["sharp"].interval.mean == pytest.approx(0.6375 - 0.59, abs=1e-12)  # tol: float64
    # flat: pass@1 0.20 < 0.40 (F's first point), pass@2 0.36, F there = 0.63
    assert distances["flat"].interval.mean == pytest.approx(0.36 - 0.63, abs=1e-12)  # tol: float64


def test_the_default_grid_and_refusals():
    assert TEMPERATURES == (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
    assert pareto_front([(0.5, 0.5), (0.5, 0.5), (0.4, 0.4)]) == [True, False, False]
    with pytest.raises(ValueError, match="one temperature at least"):
        trace_frontier({}, 2)
    with pytest.raises(ValueError, match="3 question ids for 2"):
        exact_counts(np.array([0.1, 0.2]), ["a", "b", "c"])


probabilities = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def base_curves(draw):
    """The base's p on P problems at 2-6 temperatures (any shape: a frontier need not be monotone in T)."""
    problems = draw(st.integers(1, 6))
    temps = draw(st.lists(st.sampled_from(TEMPERATURES), min_size=2, max_size=6, unique=True))
    return {t: np.array(draw(st.lists(probabilities, min_size=problems, max_size=problems))) for t in temps}


@given(base_curves(), st.sampled_from([1, 2, 16, 128]))
def test_the_base_at_any_temperature_lies_on_F_or_below_it_and_on_F_exactly_where_efficient(base, k):
    frontier, distances = temperature_frontier(base, {t: p[None] for t, p in base.items()}, k=k)
    for point in frontier.points:
        d = distances[point.temperature].interval.mean
        if point.on_frontier:
            assert abs(d) <= 1e-12  # tol: float64 rounding of a difference of equal means
        else:
            assert d <= 1e-12  # tol: float64 rounding; a dominated temperature lies below F
    f = frontier.frontier
    assert all(a.pass1 < b.pass1 and a.passk > b.passk for a, b in zip(f, f[1:]))  # F trades pass@1 for pass@k


@given(base_curves(), st.floats(0.0, 1.0), st.sampled_from([2, 16]))
def test_a_point_on_F_has_distance_zero_and_the_cells_mean_is_the_points_distance(base, where, k):
    frontier, _ = temperature_frontier(base, {}, k=k)
    f = frontier.frontier
    x = f[0].pass1 + where * (f[-1].pass1 - f[0].pass1)
    from grae.compare.frontier_report import above_frontier

    assert abs(above_frontier((x, frontier.at(x)), [(p.pass1, p.passk) for p in f], extend=True)) <= 1e-12  # tol: fp
    arm = np.clip(base[f[0].temperature] * (1 - where) + where * 0.5, 0, 1)[None]
    _, distances = temperature_frontier(base, {"arm": arm}, k=k)
    x_arm, y_arm = float(arm.mean()), float((1 - (1 - arm) ** k).mean())
    assert distances["arm"].interval.mean == pytest.approx(y_arm - frontier.at(x_arm), abs=1e-9)  # tol: float64 sums


def test_the_base_of_the_tiny_model_traced_exactly_lies_on_its_own_frontier():
    from grae.compare.temperature_frontier import base_temperature_p
    from grae.data import get_task
    from grae.eval.backends import load_hf
    from grae.eval.gold import gold_probs

    model, tok, _ = load_hf("tiny", device="cpu", dtype="float32")
    task = get_task("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2, prompt_style="plain")
    examples = task.heldout(30)
    base = base_temperature_p(model, tok, examples, task, (0.3, 0.6, 1.0, 1.2))
    assert_close_scaled(base[0.6], gold_probs(model, tok, examples, task, temperature=0.6), rel=1e-6)  # tol: same fp32 ops
    frontier, distances = temperature_frontier(base, {t: p[None] for t, p in base.items()}, k=16,
                                               question_ids=[e["question_id"] for e in examples])
    assert frontier.points[0].pass1 > frontier.points[-1].pass1  # colder: sharper
    assert frontier.points[0].passk < frontier.points[-1].passk  # hotter: wider
    for point in frontier.points:
        assert distances[point.temperature].interval.mean <= 1e-12  # tol: float64 rounding
