"""The frontier test's interval: the distance above the baseline's checkpoint frontier per seed ×
problem (grae.compare.rules.frontier_distance) against hand-computed cells and a hand-computed crossed interval,
its properties (an arm that is a frontier point lies on it; shifting an arm's pass@k by δ shifts the interval by
δ; its mean is the point comparison's distance), keeps_passk's interval test under Holm, and the machine blocking
(grae.compare.machines): the check, the declared kinds and the machine × arm interaction."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
import yaml
from hypothesis import given
from scipy.stats import t as student_t

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.frontier_report import above_frontier  # noqa: E402
from grae.compare.grid import ConfigError, load_compare_config  # noqa: E402
from grae.compare.machines import blocking, blocking_line, interaction, machine_kind, pair_kinds  # noqa: E402
from grae.compare.results import FrontierCheckpoint, JobResult, StudyInfo, StudyResults  # noqa: E402
from grae.compare.rules.frontier_distance import distance_cells, frontier_distance  # noqa: E402
from grae.compare.rules.keeps_passk import answer_line, decide  # noqa: E402
from grae.compare.stats import Interval, crossed_interval  # noqa: E402
from test_compare_rule import BASE_P, PROBLEMS, K, N, exact, passk  # noqa: E402

# a tiny table: 2 seeds × 3 problems; the path's means are base (0.1, 0.5), cp1 (0.3, 0.7), cp2 (0.5, 0.8)
BASE_X, BASE_Y = np.full((2, 3), 0.1), np.full((2, 3), 0.5)
X1, Y1 = np.array([[0.2, 0.3, 0.4], [0.3, 0.3, 0.3]]), np.array([[0.6, 0.7, 0.8], [0.7, 0.7, 0.7]])
X2, Y2 = np.array([[0.5, 0.5, 0.5], [0.4, 0.5, 0.6]]), np.array([[0.8, 0.8, 0.8], [0.7, 0.8, 0.9]])
ARM_X, ARM_Y = np.array([[0.4, 0.4, 0.4], [0.3, 0.4, 0.5]]), np.array([[0.80, 0.78, 0.79], [0.76, 0.77, 0.82]])


def test_the_distance_cells_and_interval_against_hand_computed_values():
    """The arm's pass@1 mean 0.4 lies halfway between cp1 and cp2 (w = 0.5), slope (0.8 − 0.7)/(0.5 − 0.3) = 0.5:
    d = y_a − (y1 + y2)/2 − 0.5·(x_a − (x1 + x2)/2), cell by cell."""
    path_x, path_y = np.stack([X2, BASE_X, X1]), np.stack([Y2, BASE_Y, Y1])  # any order: sorted by mean pass@1
    cells = distance_cells(ARM_X, ARM_Y, path_x, path_y)
    expected = np.array([[0.80 - 0.70 - 0.5 * 0.05, 0.78 - 0.75, 0.79 - 0.80 + 0.5 * 0.05],
                         [0.76 - 0.70 + 0.5 * 0.05, 0.77 - 0.75, 0.82 - 0.80 - 0.5 * 0.05]])
    # tol: pass@1 differences of order 0.1 in float64 (inputs written to 2 decimals): rounding ≤ 1e-16
    np.testing.assert_allclose(cells, [[0.075, 0.03, 0.015], [0.085, 0.02, -0.005]], atol=1e-12)
    np.testing.assert_allclose(cells, expected, atol=1e-12)
    assert cells.mean() == pytest.approx(0.22 / 6, abs=1e-12) == pytest.approx(ARM_Y.mean() - 0.75, abs=1e-12)
    # the crossed interval by hand: seed means 0.04, 0.0333…, problem means 0.08, 0.025, 0.005
    ms_seed = 3 * np.var([0.12 / 3, 0.10 / 3], ddof=1)
    ms_problem = 2 * np.var([0.08, 0.025, 0.005], ddof=1)
    resid = cells - cells.mean(axis=1, keepdims=True) - cells.mean(axis=0, keepdims=True) + cells.mean()
    ms_resid = (resid ** 2).sum() / 2
    variance = (ms_seed + ms_problem - ms_resid) / 6
    dof = (variance * 6) ** 2 / (ms_seed ** 2 / 1 + ms_problem ** 2 / 2 + ms_resid ** 2 / 2)
    half = student_t.ppf(0.975, dof) * math.sqrt(variance)
    (iv,) = crossed_interval(cells[:, :, None])
    # tol: a float64 mean and t half-width of order 0.1: rounding and the t quantile (≤ 1e-12 off, test_compare_t_quantiles)
    assert (iv.mean, iv.lo, iv.hi) == pytest.approx((0.22 / 6, 0.22 / 6 - half, 0.22 / 6 + half), abs=1e-9)
    assert 1.9 < dof < 2.0 and iv.lo < 0 < iv.hi  # ≈ 1.93 degrees of freedom: wide


def test_beyond_the_frontier_the_arm_meets_its_nearest_end_point():
    path_x, path_y = np.stack([BASE_X, X1, X2]), np.stack([BASE_Y, Y1, Y2])
    # tol: pass@1 differences of order 0.1 in float64: rounding ≤ 1e-16
    np.testing.assert_allclose(distance_cells(X2 + 0.2, ARM_Y, path_x, path_y), ARM_Y - Y2, atol=1e-12)
    np.testing.assert_allclose(distance_cells(BASE_X - 0.05, ARM_Y, path_x, path_y), ARM_Y - BASE_Y, atol=1e-12)


paths = st.integers(1, 3).flatmap(lambda seeds: st.tuples(
    st.lists(st.floats(0.01, 0.99), min_size=3 * seeds * 4 * 2, max_size=3 * seeds * 4 * 2), st.just(seeds)))


@given(paths, st.integers(0, 2), st.floats(-0.3, 0.3))
def test_a_frontier_point_lies_on_it_and_a_shift_moves_the_interval(drawn, which, delta):
    """Random paths of 3 points over S seeds × 4 problems: an arm that is one of the path's points has every cell
    0 (its interval contains 0); shifting an arm's pass@k by δ shifts the mean and both bounds by δ; the mean is
    always the point comparison's distance (above_frontier, extended beyond the ends)."""
    values, seeds = drawn
    grid = np.array(values).reshape(3, 2, seeds, 4)
    path_x, path_y = grid[:, 0], grid[:, 1]
    on = distance_cells(path_x[which], path_y[which], path_x, path_y)
    (iv,) = crossed_interval(on[:, :, None])
    # tol: distances of points on the path itself, float64 pass@1 in [0, 1]: 0 up to rounding (1e-16)
    assert np.abs(on).max() < 1e-12 and iv.lo <= 1e-12 and iv.hi >= -1e-12
    arm_x, arm_y = path_x[which][::-1], path_y[(which + 1) % 3]
    cells = distance_cells(arm_x, arm_y, path_x, path_y)
    shifted = distance_cells(arm_x, arm_y + delta, path_x, path_y)
    (a,), (b,) = crossed_interval(cells[:, :, None]), crossed_interval(shifted[:, :, None])
    scale = 1 + abs(a.mean) + abs(a.hi - a.lo)
    assert (b.mean, b.lo, b.hi) == pytest.approx((a.mean + delta, a.lo + delta, a.hi + delta), abs=1e-9 * scale)
    path = [(float(x.mean()), float(y.mean())) for x, y in zip(path_x, path_y)]
    point = above_frontier((float(arm_x.mean()), float(arm_y.mean())), path, extend=True)
    if len({p[0] for p in path}) == 3:  # distinct pass@1 (np.interp's order is then unambiguous)
        # tol: a mean of float64 distances in [−1, 1]: rounding ≤ 1e-15
        assert cells.mean() == pytest.approx(point, abs=1e-9)


# ---- keeps_passk's interval test on a study table -----------------------------------------------------------

SEEDS = [0, 1, 2, 3]
#: GRPO's checkpoints: each seed's p(correct), the same on every problem
GRPO_CP = {0.5: [0.30, 0.31, 0.29, 0.30], 1.0: [0.40, 0.41, 0.39, 0.40]}
#: arms: each seed's p(correct) on every problem (constant: pass@k is concave in p, so such an arm lies a little
#: above the frontier's chords) or, for "down", spread over the problems (2·p and 0 alternately: far lower
#: pass@k at the same pass@1, below the frontier)
ARMS = {"up": [0.35, 0.36, 0.34, 0.35], "on": [0.30, 0.33, 0.28, 0.31], "down": [0.33, 0.34, 0.32, 0.33]}
SPREAD = np.tile([2.0, 0.0], PROBLEMS // 2)
RULE = {"k": K, "pass1_margin_vs_baseline": -20, "passk_margin_vs_base": -50, "min_seeds": 3, "frontier_test": "interval"}


def arm_p(arm: str) -> np.ndarray:
    """``[seeds, problems]`` p(correct) of an arm."""
    return np.outer(ARMS[arm], SPREAD if arm == "down" else np.ones(PROBLEMS))


def study_table(arms: list[str], rule: dict, devices: dict | None = None, declared: dict | None = None) -> StudyResults:
    """GRPO's checkpoints (50 %, 100 %: the final model) with per-seed counts, the base at BASE_P, the arms."""
    seed_p = {"grpo": np.outer(GRPO_CP[1.0], np.ones(PROBLEMS)), **{a: arm_p(a) for a in arms}}
    info = StudyInfo(title="t", notes="", verdict="", source="s.yaml", methods=list(seed_p), seeds=SEEDS,
                     baseline="grpo", bootstrap=2000, eval={"exact": True}, frontier=[0.5, 1.0], paired_against=["base"],
                     heldout=True, num_jobs=len(seed_p) * 4, per_step=16, group_size=8,
                     rule={"keeps_passk": rule}, unrecorded_devices=declared)
    jobs = {m: {s: JobResult(final=exact(p), metrics={}, train_seconds=1.0, steps=8, generated=None,
                             device=(devices or {}).get((m, s)))
                for s, p in enumerate(ps)} for m, ps in seed_p.items()}
    frontier = {}
    for f, ps in GRPO_CP.items():
        counts = {s: exact(np.full(PROBLEMS, p)) for s, p in enumerate(ps)}
        mean = float(np.mean(ps))
        interval = {1: Interval(mean, mean, mean), K: Interval(*(3 * [float(np.mean([passk(p, K) for p in ps]))]))}
        frontier[f] = FrontierCheckpoint(dict.fromkeys(SEEDS, N), SEEDS, interval, counts)
    return StudyResults(info, jobs, {"frontier.jsonl": exact(np.full(PROBLEMS, BASE_P))},
                        {"format-only oracle": exact(np.full(PROBLEMS, BASE_P))}, {"grpo": frontier})


def distance_by_hand(p: np.ndarray) -> np.ndarray:
    """The arm's cells ``[seeds, problems]`` on the segment cp50 → cp100 at the means' weight and slope."""
    x1, x2 = (np.array(GRPO_CP[f])[:, None] for f in (0.5, 1.0))
    y1, y2 = passk(x1, K), passk(x2, K)
    w, slope = (p.mean() - x1.mean()) / (x2.mean() - x1.mean()), (y2.mean() - y1.mean()) / (x2.mean() - x1.mean())
    return passk(p, K) - ((1 - w) * y1 + w * y2) - slope * (p - ((1 - w) * x1 + w * x2))


def crossed_by_hand(cells: np.ndarray, margin: float, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, half-width, two-sided-equivalent p of the margin) of ``cells[seeds, problems]`` by the crossed
    formula written out: V = (MS_seed + MS_problem − MS_resid)/(S·P), floored at min(MS_seed, MS_problem)/(S·P),
    Satterthwaite's ν."""
    n_s, n_p = cells.shape
    seed_means, problem_means, grand = cells.mean(axis=1), cells.mean(axis=0), cells.mean()
    ms_seed = n_p * ((seed_means - grand) ** 2).sum() / (n_s - 1)
    ms_problem = n_s * ((problem_means - grand) ** 2).sum() / (n_p - 1)
    resid = cells - seed_means[:, None] - problem_means[None, :] + grand
    ms_resid = (resid ** 2).sum() / ((n_s - 1) * (n_p - 1))
    variance = max(ms_seed + ms_problem - ms_resid, min(ms_seed, ms_problem)) / (n_s * n_p)
    dof = max(1.0, (variance * n_s * n_p) ** 2 / (ms_seed ** 2 / (n_s - 1) + ms_problem ** 2 / (n_p - 1)
                                                  + ms_resid ** 2 / ((n_s - 1) * (n_p - 1))))
    se = math.sqrt(variance)
    return grand, student_t.ppf(0.5 + level / 2, dof) * se, min(1.0, 2 * student_t.sf((grand - margin) / se, dof))


def test_the_interval_test_is_a_criterion_under_holm():
    """p_arm = max(p₁, p₂, p_F) by hand, Holm's levels over the 3 arms by hand, and each arm's decision from its
    three intervals at its level: the arm above the frontier keeps, the one on it is inconclusive, the one below
    it is refuted by the frontier test alone (its pass@1 and pass@k upper bounds do not fall short)."""
    outcome = decide(study_table(list(ARMS), RULE))
    by_arm = {d.arm: d for d in outcome.arms}
    grpo = np.outer(GRPO_CP[1.0], np.ones(PROBLEMS))
    p_arm = {}
    for arm in ARMS:
        p = arm_p(arm)
        p_arm[arm] = max(crossed_by_hand(p - grpo, -0.20)[2], crossed_by_hand(passk(p, K) - passk(BASE_P, K), -0.50)[2],
                         crossed_by_hand(distance_by_hand(p), 0.0)[2])
        # tol: p-values: rel carries them; 1e-300 only lets an underflowed 0 match 0
        assert by_arm[arm].p_arm == pytest.approx(p_arm[arm], rel=1e-6, abs=1e-300)
    ranked = sorted(p_arm, key=p_arm.get)
    levels, alpha, stopped = {}, 0.05, False
    for j, arm in enumerate(ranked):  # Holm's step levels, by hand
        if not stopped:
            alpha = 0.05 / (3 - j)
            stopped = p_arm[arm] >= alpha
        levels[arm] = 1 - alpha
    assert {a: d.level for a, d in by_arm.items()} == pytest.approx(levels)
    for arm in ARMS:
        d = by_arm[arm]
        mean, half, _ = crossed_by_hand(distance_by_hand(arm_p(arm)), 0.0, levels[arm])
        assert (d.distance.interval.lo, d.distance.interval.hi) == pytest.approx((mean - half, mean + half), rel=1e-6)
        # tol: the same float64 distance in [−1, 1] by two routes: rounding ≤ 1e-15
        assert d.distance.interval.mean == pytest.approx(d.above, abs=1e-12)
        clears = d.pass1_vs_baseline.lo > -0.20 and d.passk_vs_base.lo > -0.50 and d.distance.interval.lo > 0
        assert (d.decision == "keeps") == clears == (d.p_arm < 1 - d.level)
    assert by_arm["up"].decision == "keeps" and by_arm["on"].decision == "inconclusive"
    assert by_arm["down"].decision == "refuted" and by_arm["down"].distance.interval.hi < 0
    assert by_arm["down"].pass1_vs_baseline.hi > -0.20 and by_arm["down"].passk_vs_base.hi > -0.50  # not they
    assert "distance above grpo's frontier" in by_arm["on"].resolve[0]
    assert "frontier test: interval (margin +0.0)" in answer_line(outcome, "grpo")
    # a margin above the distance turns the keeper inconclusive: it is the frontier test's lower bound that decides
    lifted = decide(study_table(list(ARMS), {**RULE, "frontier_margin": 100 * by_arm["up"].distance.interval.mean}))
    assert next(d for d in lifted.arms if d.arm == "up").decision == "inconclusive"


def test_the_point_test_keeps_the_pre_registered_decision_and_prints_the_interval_beside_it():
    interval, point = (decide(study_table(["on"], {**RULE, "frontier_test": t})).arms[0] for t in ("interval", "point"))
    assert point.above > 0 and point.decision == "keeps" and point.distance.interval.lo < 0
    assert interval.decision == "inconclusive" and point.p_arm < interval.p_arm
    line = answer_line(decide(study_table(["on"], {**RULE, "frontier_test": "point"})), "grpo")
    assert "frontier test: point (pre-registered)" in line and "leaving out one seed" in line
    assert "beside the pre-registered point test, not a criterion" in line


def test_leave_one_seed_out_and_per_seed_distances():
    arm = {s: exact(p) for s, p in enumerate(arm_p("down"))}
    cps = [{s: exact(np.full(PROBLEMS, p)) for s, p in enumerate(GRPO_CP[f])} for f in (0.5, 1.0)]
    d = frontier_distance(arm, cps, exact(np.full(PROBLEMS, BASE_P)), K, 0.95)
    # tol: float64 distances in [−1, 1] by two routes: rounding ≤ 1e-15
    assert d.seeds == SEEDS and d.interval.mean == pytest.approx(distance_by_hand(arm_p("down")).mean(), abs=1e-12)
    for left in SEEDS:  # the point recomputed without one seed: the weight and slope from the other seeds' means
        rest = [s for s in SEEDS if s != left]
        sub = frontier_distance({s: arm[s] for s in rest}, [{s: c[s] for s in rest} for c in cps],
                                exact(np.full(PROBLEMS, BASE_P)), K, 0.95)
        # tol: float64 distances in [−1, 1] by two routes: rounding ≤ 1e-15
        assert d.leave_one_out[left] == pytest.approx(sub.interval.mean, abs=1e-12)
    assert d.loso_range == (min(d.leave_one_out.values()), max(d.leave_one_out.values()))
    for s in SEEDS:  # each seed's own distance: its point above its own path
        own = frontier_distance({s: arm[s]}, [{s: c[s]} for c in cps], exact(np.full(PROBLEMS, BASE_P)), K, 0.95)
        # tol: float64 distances in [−1, 1] by two routes: rounding ≤ 1e-15
        assert d.per_seed[s] == pytest.approx(own.interval.mean, abs=1e-12)


# ---- machines -------------------------------------------------------------------------------------------------

def test_machine_kind_drops_thread_and_process_counts():
    assert machine_kind("cpu (AMD EPYC 7B13, 2 threads)") == "cpu (AMD EPYC 7B13)"
    assert machine_kind("cpu (AMD EPYC, 1 thread)") == "cpu (AMD EPYC)"
    assert machine_kind("cuda (NVIDIA H100 80GB HBM3) × 4 processes") == "cuda (NVIDIA H100 80GB HBM3)"


def test_the_blocking_check_names_a_split_seed_and_counts_declared_kinds():
    cpu, gpu = "cpu (Test CPU, 1 thread)", "cuda (Test GPU)"
    arms = ["on", "down"]
    devices = {(m, s): cpu for m in ("grpo", *arms) for s in (0, 1)} | {("grpo", 3): cpu, ("on", 3): gpu}
    results = study_table(arms, RULE, devices, declared={"2": "cuda (Test GPU)"})  # seed 2: none recorded
    check = blocking(results)
    assert check.split == [3] and check.declared == 3 and check.unknown == {3: ["down"]}
    assert check.by_seed[2] == {"cuda (Test GPU)": ["grpo", "on", "down"]}
    line = blocking_line(check)
    assert line.startswith("- machines: **not blocked by machine** (3 jobs trained before grae recorded the device")
    assert "seed 3 is split (grpo on cpu (Test CPU); on on cuda (Test GPU))" in line
    assert "seed 3: no known machine for down" in line
    assert pair_kinds(results, "on", "grpo") == {0: "cpu (Test CPU)", 1: "cpu (Test CPU)", 2: "cuda (Test GPU)", 3: None}
    blocked = study_table(arms, RULE, {(m, s): cpu if s < 2 else gpu for m in ("grpo", *arms) for s in SEEDS})
    assert blocking_line(blocking(blocked)) == ("- machines: every seed's arms ran on one machine kind: cpu (Test CPU): "
                                                "seeds 0, 1; cuda (Test GPU): seeds 2, 3")


def test_the_machine_by_arm_interaction_against_a_hand_computed_pooled_t():
    """Seed means 1, 2, 3 on one kind and 5, 7 on the other (every problem alike): per kind the t interval over
    its seeds; between kinds 2 − 6 = −4 with pooled variance (2 + 2)/3 and ν = 3."""
    values = np.repeat(np.array([1.0, 2.0, 3.0, 5.0, 7.0])[:, None], 4, axis=1)
    kinds = {10: "a", 11: "a", 12: "a", 13: "b", 14: "b", 15: None}
    contrast = interaction(values, [10, 11, 12, 13, 14], kinds)
    assert list(contrast.by_kind) == ["a", "b"] and contrast.by_kind["a"][1] == [10, 11, 12]
    iv_a, _ = contrast.by_kind["a"]
    assert (iv_a.lo, iv_a.hi) == pytest.approx((2 - student_t.ppf(0.975, 2) / math.sqrt(3),
                                                2 + student_t.ppf(0.975, 2) / math.sqrt(3)))
    se = math.sqrt(4 / 3 * (1 / 3 + 1 / 2))
    assert contrast.difference.mean == pytest.approx(-4.0) and contrast.dof == 3
    assert contrast.t == pytest.approx(-4.0 / se)
    assert contrast.difference.hi == pytest.approx(-4.0 + student_t.ppf(0.975, 3) * se)
    with_excluded = interaction(np.vstack([values, values[:1]]), [10, 11, 12, 13, 14, 15], kinds)
    assert with_excluded.excluded == [15] and with_excluded.t == pytest.approx(contrast.t)
    one_kind = interaction(values, [10, 11, 12, 13, 14], dict.fromkeys(range(10, 15), "a"))
    assert one_kind.difference is None and one_kind.t is None


def test_a_study_declares_unrecorded_devices_by_seed(tmp_path):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "unrecorded_devices": {2: " cpu (Test CPU) "}}))
    assert load_compare_config(path).unrecorded_devices == {2: "cpu (Test CPU)"}
    for value, match in (({7: "cpu"}, r"unrecorded_devices: 7 is not a seed of this study \(\[0, 1, 2\]\)"),
                         ({2: ""}, r"unrecorded_devices.2: expected the machine kind as text"),
                         ("cpu", r"unrecorded_devices: expected a mapping seed -> machine kind")):
        path.write_text(yaml.safe_dump({**raw, "unrecorded_devices": value}))
        with pytest.raises(ConfigError, match=match):
            load_compare_config(path)


@pytest.mark.parametrize("extra, match", [
    ({"frontier_test": "points"}, r"rule.keeps_passk.frontier_test: expected 'interval' \(the default"),
    ({"frontier_margin": "0"}, r"rule.keeps_passk.frontier_margin: expected points"),
    ({"frontier_test": "point", "frontier_margin": 0.5}, r"the point test compares the point with 0"),
])
def test_a_bad_frontier_test_is_refused_naming_the_key(tmp_path, extra, match):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "rule": {"keeps_passk": {"k": 16, "pass1_margin_vs_baseline": -2,
                                                                    "passk_margin_vs_base": -1, **extra}}}))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_a_sitting_refuses_to_train_a_seed_whose_jobs_ran_on_another_machine_kind(tmp_path):
    """Studies block by machine before anything runs: exact_study's seed 0 finished on 'cpu (Test CPU)', seed 1 on
    'cuda (Test GPU)', seed 2 recorded nothing (here declared by unrecorded_devices)."""
    from grae.compare.machines import SplitSeed, check_sitting, finished_kinds
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "unrecorded_devices": {2: "cuda (Test GPU)"}}))
    cfg = load_compare_config(path)
    assert finished_kinds(cfg, 0) == {"cpu (Test CPU)": ["arm_a", "arm_b", "grpo"]}  # the study's method order
    check_sitting(cfg, [0, 0], "cpu (Test CPU, 2 threads)")  # the same kind, whatever its thread count
    check_sitting(cfg, [1, 2], "cuda (Test GPU)")
    with pytest.raises(SplitSeed, match=r"^seed 1: arm_a, arm_b, grpo trained on cuda \(Test GPU\), this machine is "
                                        r"cpu \(Test CPU\); every arm of a seed trains on one machine kind .* --seeds$"):
        check_sitting(cfg, [0, 1], "cpu (Test CPU, 1 thread)")
    with pytest.raises(SplitSeed, match=r"^seed 2: "):
        check_sitting(cfg, [2], "cpu (Test CPU, 1 thread)")
