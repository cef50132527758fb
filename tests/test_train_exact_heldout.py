"""grae train's exact held-out report (grae.train.exact_heldout, grae.train.exact_heldout_text): pass@k per stratum,
the base's temperature frontier F and Δ_F, strategy mass, the sentence, and the files it reads; with the frontier's
computation in the eval layer and compare's names for it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import t as student_t

from grae.eval.crossed import Interval
from grae.eval.stats import Estimate, passk_estimates
from grae.eval.temperature_frontier import TEMPERATURES, TemperaturePoint, exact_counts, temperature_record
from grae.train.exact_heldout import (
    ALL,
    BOOTSTRAP,
    KS,
    PARTS_FILES,
    TEMPERATURES_FILE,
    ExactHeldout,
    StratumReport,
    exact_heldout,
    exact_inputs,
    frontier_side,
    parts_record,
    read_exact_inputs,
)
from grae.train.exact_heldout_text import console_lines, gain_sentence, markdown, stratum_name
from tolerances import assert_close_scaled

# Hand-computed case (k = 1, 2; two problems "a", "b"): pass@2 of p is 1 − (1 − p)².
#   T = 0.5: p = (0.4, 0.2): pass@1 0.30, pass@2 (0.64 + 0.36)/2 = 0.50   below F
#   T = 1.0: p = (0.5, 0.3): pass@1 0.40, pass@2 (0.75 + 0.51)/2 = 0.63   on F (the base as evaluated)
#   T = 0.7: p = (0.9, 0.1): pass@1 0.50, pass@2 (0.99 + 0.19)/2 = 0.59   on F, the best pass@1
# Trained: p = (0.6, 0.3): pass@1 0.45, pass@2 (0.84 + 0.51)/2 = 0.675.
#   k = 1: F is the one point (0.50, 0.50), flat: F(0.45) = 0.50, Δ_F@1 = 0.45 − 0.50 = −0.05;
#          cells y − y_end = (0.6 − 0.9, 0.3 − 0.1) = (−0.3, +0.2).
#   k = 2: F(0.45) = (0.63 + 0.59)/2 = 0.61, Δ_F@2 = 0.675 − 0.61 = +0.065; w = 0.5, β = (0.59 − 0.63)/0.1 = −0.4,
#          the path at w per problem: pass@2 (0.87, 0.35), pass@1 (0.7, 0.2), so the cells d = y − y_path − β(x − x_path)
#          are 0.84 − 0.87 + 0.4·(0.6 − 0.7) = −0.07 and 0.51 − 0.35 + 0.4·(0.3 − 0.2) = +0.20.
#   One model: Δ_F's interval is mean ± t_{0.975, P−1} · sd(cells)/√P.
IDS = ["a", "b"]
GRID = {0.5: [0.4, 0.2], 1.0: [0.5, 0.3], 0.7: [0.9, 0.1]}
BASE, TRAINED = [0.5, 0.3], [0.6, 0.3]


def _t_interval(cells):
    cells = np.asarray(cells)
    half = student_t.ppf(0.975, len(cells) - 1) * cells.std(ddof=1) / np.sqrt(len(cells))
    return cells.mean() - half, cells.mean() + half


def test_reference_values_of_one_stratum():
    report = exact_heldout(exact_inputs(IDS, BASE, TRAINED, GRID), ks=(1, 2), delta_ks=(1, 2))
    assert list(report.strata) == [ALL]
    s = report.strata[ALL]
    assert s.problems == 2 and s.best.temperature == 0.7 and not s.best_at_edge
    assert_close_scaled([s.base[1].value, s.base[2].value, s.trained[1].value, s.trained[2].value],
                        [0.40, 0.63, 0.45, 0.675], rel=1e-12)  # tol: float64 arithmetic on exact decimals
    assert_close_scaled([s.change[1].value, s.change[2].value], [0.05, 0.045], rel=1e-12)  # tol: float64
    assert_close_scaled([s.at_best[1].value, s.at_best[2].value], [0.50, 0.59], rel=1e-12)  # tol: float64
    assert_close_scaled([s.frontier[1], s.frontier[2]], [0.50, 0.61], rel=1e-12)  # tol: float64
    for k, cells in ((1, [-0.3, 0.2]), (2, [-0.07, 0.20])):
        lo, hi = _t_interval(cells)
        assert_close_scaled([s.delta_f[k].mean, s.delta_f[k].lo, s.delta_f[k].hi], [np.mean(cells), lo, hi],
                            rel=1e-9)  # tol: float64 arithmetic and scipy's t quantile
    assert s.mass == {}


def test_the_cells_and_intervals_are_the_held_out_tables():
    report = exact_heldout(exact_inputs(IDS, BASE, TRAINED, GRID), ks=(1, 2), delta_ks=(1,), seed=7)
    expected = passk_estimates(exact_counts(np.array(TRAINED), IDS), [1, 2], bootstrap=BOOTSTRAP, seed=7)
    assert report.strata[ALL].trained == expected


def test_each_stratum_has_its_own_frontier():
    # in: problems a, b (the hand case); ex: c, d where the base's best pass@1 is at T = 1.0, not T = 0.7
    grid = {0.5: [0.4, 0.2, 0.1, 0.1], 1.0: [0.5, 0.3, 0.3, 0.3], 0.7: [0.9, 0.1, 0.2, 0.2]}
    inputs = exact_inputs(["a", "b", "c", "d"], [0.5, 0.3, 0.3, 0.3], [0.6, 0.3, 0.1, 0.3], grid)
    report = exact_heldout(inputs, {"totals=in_range": ["a", "b"], "totals=excursion": ["c", "d"]}, ks=(1, 2),
                           delta_ks=(1, 2))
    assert list(report.strata) == [ALL, "totals=in_range", "totals=excursion"]
    inside, outside = report.strata["totals=in_range"], report.strata["totals=excursion"]
    assert inside.best.temperature == 0.7 and outside.best.temperature == 1.0
    assert inside.delta_f[2].mean == pytest.approx(0.065, abs=1e-12)  # tol: float64; the hand case above
    # excursions: trained pass@1 0.2 < F's only point's 0.3 at k = 1, so Δ_F@1 = 0.2 − 0.3
    assert outside.delta_f[1].mean == pytest.approx(-0.1, abs=1e-12)  # tol: float64 arithmetic
    assert report.strata[ALL].problems == 4 and outside.problems == 2


def test_strategy_mass_before_and_after():
    before = [[0.4, 0.1], [0.2, 0.1]]
    after = [[0.55, 0.05], [0.3, 0.0]]
    inputs = exact_inputs(IDS, BASE, TRAINED, GRID, labels=["L", "G"], base_parts=before, trained_parts=after)
    s = exact_heldout(inputs, ks=(1,), delta_ks=(1,)).strata[ALL]
    assert list(s.mass) == ["L", "G"]
    (l_before, l_after, l_change), (g_before, g_after, g_change) = s.mass["L"], s.mass["G"]
    assert_close_scaled([l_before.value, l_after.value, l_change.value], [0.30, 0.425, 0.125], rel=1e-12)  # tol: fp64
    assert_close_scaled([g_before.value, g_after.value, g_change.value], [0.10, 0.025, -0.075], rel=1e-12)  # tol: fp64
    with pytest.raises(ValueError, match="parts of shape"):
        exact_inputs(IDS, BASE, TRAINED, GRID, labels=["L"], base_parts=before, trained_parts=after)


def test_refusals():
    with pytest.raises(ValueError, match="one temperature at least"):
        exact_heldout(exact_inputs(IDS, BASE, TRAINED, {}))


probabilities = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def runs(draw):
    """The base's p on P problems at 2-5 grid temperatures, and a trained model's p on them."""
    problems = draw(st.integers(2, 6))
    temps = draw(st.lists(st.sampled_from(TEMPERATURES), min_size=2, max_size=5, unique=True))
    p = st.lists(probabilities, min_size=problems, max_size=problems)
    return {t: np.array(draw(p)) for t in temps}, np.array(draw(p))


@settings(max_examples=40, deadline=None)
@given(runs(), st.data())
def test_the_base_at_a_grid_temperature_gains_nothing_beyond_F(run, data):
    grid, _ = run
    t = data.draw(st.sampled_from(sorted(grid)))
    ids = [str(i) for i in range(len(grid[t]))]
    s = exact_heldout(exact_inputs(ids, grid[t], grid[t], grid), ks=KS, delta_ks=KS).strata[ALL]
    for k in KS:
        assert s.delta_f[k].mean <= 1e-12  # tol: float64 rounding; the base at any T lies on F or below it


@settings(max_examples=40, deadline=None)
@given(runs())
def test_delta_F_at_k_1_is_the_gain_over_the_best_pass1_on_the_grid(run):
    grid, trained = run
    ids = [str(i) for i in range(len(trained))]
    s = exact_heldout(exact_inputs(ids, trained, trained, grid), ks=(1,), delta_ks=(1,)).strata[ALL]
    best = max(float(p.mean()) for p in grid.values())
    assert s.delta_f[1].mean == pytest.approx(float(trained.mean()) - best, abs=1e-12)  # tol: float64 means in [0, 1]
    assert s.best.pass1 == pytest.approx(best, abs=1e-12)  # tol: float64 means in [0, 1]


def _stratum(name: str, delta: Interval, mass: bool = False) -> StratumReport:
    """A stratum with pass@1 21.0 → 32.9 (+11.8 [+9.0, +14.6]), pass@256 49.4 → 33.8, best T = 0.6 at 25.1."""
    est = {1: (Estimate(0.210, 0.18, 0.24), Estimate(0.329, 0.30, 0.36), Estimate(0.119, 0.09, 0.146)),
           256: (Estimate(0.494, 0.45, 0.53), Estimate(0.338, 0.30, 0.37), Estimate(-0.156, -0.2, -0.1))}
    best = TemperaturePoint(0.6, 0.251, 0.45, True)
    return StratumReport(name, 300, {k: v[0] for k, v in est.items()}, {k: v[1] for k, v in est.items()},
                         {k: v[2] for k, v in est.items()}, best, {k: v[0] for k, v in est.items()},
                         {1: 0.251, 256: 0.4}, {1: delta, 256: delta},
                         mass={"G": (Estimate(0.0202), Estimate(0.0121), Estimate(-0.0081))} if mass else {})


def _report(delta: Interval) -> ExactHeldout:
    return ExactHeldout([1, 256], [1, 256], {ALL: _stratum(ALL, delta), "totals=in_range": _stratum("totals=in_range", delta),
                                             "totals=excursion": _stratum("totals=excursion", delta, mass=True)})


def test_the_sentence_says_a_gain_beyond_F():
    sentence = gain_sentence(_report(Interval(0.078, 0.05, 0.106)), "agrae")
    assert sentence == ("agrae learned: in-range pass@1 21.0 → 32.9 (+11.9 [+9.0, +14.6]), +7.8 [+5.0, +10.6] beyond "
                        "the best any temperature gives the base (T = 0.6: 25.1); the rare strategy on excursions: "
                        "pass@256 49.4 → 33.8 (G mass 2.0 → 1.2).")


def test_the_sentence_says_no_gain_beyond_F_within_it():
    sentence = gain_sentence(_report(Interval(0.01, -0.02, 0.04)), "grpo")
    assert sentence.startswith("grpo: in-range pass@1 21.0 → 32.9 (+11.9 [+9.0, +14.6]), no gain beyond the frontier: "
                               "+1.0 [-2.0, +4.0] against the best any temperature gives the base (T = 0.6: 25.1), an "
                               "interval that includes 0; ")
    assert "learned" not in sentence


def test_the_sentence_says_no_gain_beyond_F_below_it():
    sentence = gain_sentence(_report(Interval(-0.05, -0.08, -0.02)), "grpo", rare="none")
    assert sentence == ("grpo: in-range pass@1 21.0 → 32.9 (+11.9 [+9.0, +14.6]), no gain beyond the frontier: "
                        "-5.0 [-8.0, -2.0], below the best any temperature gives the base (T = 0.6: 25.1).")


def test_the_sentence_reads_all_held_out_without_strata_and_the_sides_of_an_interval():
    report = exact_heldout(exact_inputs(IDS, BASE, TRAINED, GRID), ks=(1, 2), delta_ks=(1, 2))
    sentence = gain_sentence(report, "agrae")
    assert sentence.startswith("agrae: all held-out pass@1 40.0 → 45.0 (") and "no gain beyond the frontier" in sentence
    assert [frontier_side(Interval(0, lo, hi)) for lo, hi in ((0.1, 0.2), (-0.1, 0.2), (-0.2, -0.1))] == \
        ["above", "within", "below"]
    assert stratum_name("totals=in_range") == "in-range" and stratum_name("num_terms=3,num_digits=2") == \
        "num_terms=3,num_digits=2"
    text = markdown(report, sentence)
    assert text.startswith(f"**{sentence}**") and "| pass@2 |" in text and "base at T = 0.7" in text
    lines = console_lines(report, sentence)
    assert lines[0] == sentence and lines[1].startswith("all held-out (2 problems")


def _write_rows(path, p, k_max=256):
    path.write_text("".join(json.dumps({"question_id": q, "exact": True, "p": v, "mass": v, "k_max": k_max}) + "\n"
                            for q, v in zip(IDS, p)))


def test_the_run_directory_files(tmp_path):
    assert read_exact_inputs(tmp_path) is None
    (tmp_path / "eval").mkdir()
    _write_rows(tmp_path / "eval" / "before.jsonl", BASE)
    _write_rows(tmp_path / "eval" / "after.jsonl", TRAINED)
    assert read_exact_inputs(tmp_path) is None  # no temperatures
    (tmp_path / "eval" / TEMPERATURES_FILE).write_text(json.dumps(temperature_record(IDS, GRID)))
    inputs = read_exact_inputs(tmp_path)
    expected = exact_heldout(exact_inputs(IDS, BASE, TRAINED, GRID), ks=(1, 2), delta_ks=(1, 2))
    assert markdown(exact_heldout(inputs, ks=(1, 2), delta_ks=(1, 2)), "") == markdown(expected, "")
    assert inputs.mass == {}
    for name, parts in zip(PARTS_FILES, ([[0.4, 0.1], [0.2, 0.1]], [[0.55, 0.05], [0.3, 0.0]])):
        (tmp_path / "eval" / name).write_text(json.dumps(parts_record(["L", "G"], IDS, parts)))
    mass = exact_heldout(read_exact_inputs(tmp_path), ks=(1,), delta_ks=(1,)).strata[ALL].mass
    assert mass["G"][1].value == pytest.approx(0.025, abs=1e-12)  # tol: float64 mean of exact decimals


def test_compare_names_are_the_eval_layers():
    import grae.compare.mechanism as mechanism
    import grae.compare.probes as probes
    import grae.compare.rules.frontier_distance as rule
    import grae.compare.stats as cstats
    import grae.compare.temperature_frontier as ctf
    import grae.eval.crossed as crossed
    import grae.eval.frontier_distance as distance
    import grae.eval.strata as strata
    import grae.eval.temperature_frontier as etf

    for name in ("TEMPERATURES", "TemperatureFrontier", "TemperaturePoint", "base_temperature_p", "distance_above",
                 "exact_counts", "frontier_table", "pareto_front", "temperature_frontier", "trace_frontier"):
        assert getattr(ctf, name) is getattr(etf, name), name
    for name in ("FrontierDistance", "distance_cells", "frontier_distance"):
        assert getattr(rule, name) is getattr(distance, name), name
    for name in ("Interval", "crossed_interval", "crossed_variance", "mean_squares", "variance_from_mean_squares"):
        assert getattr(cstats, name) is getattr(crossed, name), name
    assert mechanism.stratum_labels is strata.stratum_labels and probes.strategy_labels is strata.strategy_labels
