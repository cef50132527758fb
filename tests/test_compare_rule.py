"""The per-arm decision rule (grae.compare.rules.keeps_passk) on synthetic study tables: keeps / refuted /
inconclusive against hand-computed Holm levels and t intervals, the report's first line, the study key's
refusals, and a property: keeps and refuted never both hold, and keeps-bounds hold exactly where Holm rejects."""

from __future__ import annotations

import json
import math

import hypothesis.strategies as st
import numpy as np
import pytest
import yaml
from hypothesis import assume, given
from scipy.stats import t as student_t

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.grid import ConfigError, load_compare_config  # noqa: E402
from grae.compare.report import render, write_compare_report  # noqa: E402
from grae.compare.results import FrontierCheckpoint, JobResult, StudyInfo, StudyResults, from_summary  # noqa: E402
from grae.compare.rules.common import needed, projected_half_width, smallest  # noqa: E402
from grae.compare.rules.keeps_passk import answer_line, decide  # noqa: E402
from grae.compare.stats import Interval, crossed_interval, mean_squares  # noqa: E402
from grae.eval.stats import ProblemCounts  # noqa: E402

K, N, PROBLEMS = 16, 256, 10
BASE_P = 0.2
SEEDS = [0, 1, 2, 3]
#: per arm, each seed's p(correct), the same on every problem: the crossed interval is then the t_{S−1}
#: interval over seed means, which the tests compute by hand
SEED_P = {"grpo": [0.40, 0.41, 0.39, 0.40],
          "keeper": [0.395, 0.41, 0.38, 0.405],  # d₁ = −0.5, −0, −1, +0.5 points
          "loser": [0.32, 0.33, 0.30, 0.33],  # d₁ ≈ −8 points
          "unsure": [0.35, 0.42, 0.36, 0.42]}  # d₁ = −5, +1, −3, +2 points: wide


def exact(p) -> ProblemCounts:
    p = np.asarray(p, dtype=float)
    return ProblemCounts([f"q{i}" for i in range(len(p))], np.full(len(p), N), p * N, p=p, mass=np.ones(len(p)))


def table(seed_p: dict[str, list[float]], rule: dict, *, frontier: tuple[float, float] = (0.95, 0.97)) -> StudyResults:
    """A study table: every arm's exact counts per seed, the base at BASE_P, and the baseline's frontier:
    the base (0 %), then 50 % and 100 % at pass@1 0.30 and 0.40 with pass@k ``frontier``."""
    seeds = list(range(len(next(iter(seed_p.values())))))
    info = StudyInfo(title="rule", notes="", verdict="", source="study.yaml", methods=list(seed_p), seeds=seeds,
                     baseline="grpo", bootstrap=2000, eval={"exact": True}, frontier=[0.5, 1.0],
                     paired_against=["base"], heldout=True, num_jobs=len(seed_p) * len(seeds), per_step=16,
                     group_size=8, rule={"keeps_passk": {"min_seeds": 3, **rule}})
    jobs = {m: {s: JobResult(final=exact(np.full(PROBLEMS, p)), metrics={}, train_seconds=1.0, steps=8, generated=None)
                for s, p in enumerate(ps)} for m, ps in seed_p.items()}
    checkpoint = {f: FrontierCheckpoint(dict.fromkeys(seeds, N), seeds, {1: Interval(x, x, x), K: Interval(y, y, y)})
                  for f, x, y in ((0.5, 0.30, frontier[0]), (1.0, 0.40, frontier[1]))}
    return StudyResults(info, jobs, {"frontier.jsonl": exact(np.full(PROBLEMS, BASE_P))},
                        {"format-only oracle": exact(np.full(PROBLEMS, BASE_P))}, {"grpo": checkpoint})


RULE = {"k": K, "pass1_margin_vs_baseline": -2, "passk_margin_vs_base": -1, "frontier_test": "point"}


def passk(p: float, k: int) -> float:
    return 1 - (1 - p) ** k


def by_hand(d: list[float], margin: float, level: float | None = None):
    """(mean, half-width at ``level``, two-sided-equivalent p of the margin) of seed-level differences."""
    d = np.asarray(d)
    se = d.std(ddof=1) / math.sqrt(len(d))
    half = student_t.ppf(0.5 + level / 2, len(d) - 1) * se if level else None
    return d.mean(), half, min(1.0, 2 * student_t.sf((d.mean() - margin) / se, len(d) - 1))


def seeds_by_hand(d: np.ndarray, margin: float, level: float) -> int:
    """The fewest seeds whose t interval over seed means (the sd and mean as measured) excludes ``margin``."""
    seeds = len(d) + 1
    while student_t.ppf(0.5 + level / 2, seeds - 1) * d.std(ddof=1) / math.sqrt(seeds) >= abs(d.mean() - margin):
        seeds += 1
    return seeds


def test_keeps_refuted_and_inconclusive_against_hand_computed_holm_levels():
    outcome = decide(table(SEED_P, RULE))
    arms = {d.arm: d for d in outcome.arms}
    assert list(arms) == ["keeper", "loser", "unsure"]
    grpo = SEED_P["grpo"]
    p_arm = {}
    for arm in arms:
        d1 = [a - b for a, b in zip(SEED_P[arm], grpo)]
        d2 = [passk(a, K) - passk(BASE_P, K) for a in SEED_P[arm]]
        p_arm[arm] = max(by_hand(d1, -0.02)[2], by_hand(d2, -0.01)[2])
        assert arms[arm].p_arm == pytest.approx(p_arm[arm], rel=1e-6)
    # Holm over 3 arms at 0.05: keeper (smallest p) at 0.05/3; then loser at 0.05/2 (p = 1: Holm stops) and
    # unsure at loser's level
    assert p_arm["keeper"] < 0.05 / 3 and p_arm["loser"] == 1.0 and p_arm["unsure"] > 0.05 / 2
    expected_level = {"keeper": 1 - 0.05 / 3, "loser": 1 - 0.05 / 2, "unsure": 1 - 0.05 / 2}
    assert {a: d.level for a, d in arms.items()} == pytest.approx(expected_level)
    ordered = sorted(p_arm.values())
    holm = {a: min(1.0, max((3 - i) * ordered[i] for i in range(ordered.index(p) + 1))) for a, p in p_arm.items()}
    assert {a: d.p_holm for a, d in arms.items()} == pytest.approx(holm)
    for arm, d in arms.items():  # every interval at the arm's level, t_{S−1} over seed means
        mean, half, _ = by_hand([a - b for a, b in zip(SEED_P[arm], grpo)], -0.02, expected_level[arm])
        assert (d.pass1_vs_baseline.lo, d.pass1_vs_baseline.hi) == pytest.approx((mean - half, mean + half), rel=1e-6)
    assert arms["keeper"].decision == "keeps" and arms["keeper"].raises_pass1
    point = (np.mean(SEED_P["keeper"]), np.mean([passk(p, K) for p in SEED_P["keeper"]]))
    assert arms["keeper"].point == pytest.approx(point, rel=1e-12)
    assert arms["keeper"].above == pytest.approx(point[1] - np.interp(point[0], [0.30, 0.40], [0.95, 0.97]), rel=1e-9)
    assert arms["loser"].decision == "refuted" and arms["loser"].pass1_vs_baseline.hi < -0.02
    unsure = arms["unsure"]
    assert unsure.decision == "inconclusive" and unsure.pass1_vs_baseline.lo < -0.02 < unsure.pass1_vs_baseline.hi
    # seeds needed: the half-width must shrink below |mean − margin|; the variance is all seed-level here, so
    # S′ is the smallest with t_{S′−1}·s/√S′ < |mean − margin| (problems alone cannot: they carry no variance)
    d1 = np.subtract(SEED_P["unsure"], grpo)
    seeds = seeds_by_hand(d1, -0.02, expected_level["unsure"])
    assert len(unsure.resolve) == 1 and f"≈ {seeds} seeds at {PROBLEMS} problems" in unsure.resolve[0]
    assert "more problems alone cannot" in unsure.resolve[0]
    assert answer_line(outcome, "grpo") == (
        "**Answer:** keeper keeps pass@16 while raising pass@1 (rule `keeps_passk`, k = 16, Holm over 3 arms, 4 seeds, "
        "frontier test: point (pre-registered)).")


def test_an_arm_below_the_frontier_does_not_keep_and_no_arm_is_named():
    outcome = decide(table(SEED_P, RULE, frontier=(0.99995, 0.99999)))  # the frontier passes above every arm
    keeper = next(d for d in outcome.arms if d.arm == "keeper")
    assert keeper.decision == "inconclusive" and keeper.above < 0
    assert "lies" in keeper.resolve[-1] and "frontier" in keeper.resolve[-1]
    assert answer_line(outcome, "grpo").startswith("**Answer:** no arm keeps pass@16 while raising pass@1 (")
    assert "0 keep pass@16 without raising pass@1, 1 refuted, 2 inconclusive" in answer_line(outcome, "grpo")


def test_too_few_seeds_or_a_baseline_that_did_not_learn_give_no_verdict():
    outcome = decide(table(SEED_P, {**RULE, "min_seeds": 6}))
    assert answer_line(outcome, "grpo").startswith("**Pilot: no verdict** (rule `keeps_passk`, k = 16")
    # the oracle here is the base (mass 1): grpo − oracle at pass@1 ≈ +20 points, its lower bound below +30
    outcome = decide(table(SEED_P, {**RULE, "baseline_pass1_margin_vs_oracle": 30}))
    # tol: a float64 pass@1 difference in [−1, 1]: rounding ≤ 1e-16
    assert not outcome.baseline_learned and outcome.baseline_vs_oracle.mean == pytest.approx(0.2, abs=1e-12)
    assert answer_line(outcome, "grpo").startswith("**No verdict: the testbed failed for these seeds**")
    assert decide(table(SEED_P, {**RULE, "baseline_pass1_margin_vs_oracle": 3})).baseline_learned


@given(st.floats(0.1, 0.5), st.lists(st.floats(-0.15, 0.1), min_size=3, max_size=3),
       st.lists(st.floats(-0.02, 0.02), min_size=12, max_size=12), st.lists(st.floats(0, 0.1), min_size=12, max_size=12),
       st.floats(-5, 0), st.floats(-5, 0))
def test_keeps_and_refuted_never_both_hold(level, offsets, jitter, spread, m1, m2):
    """Random tables (GRPO and 3 arms offset from it, 3 seeds with jitter, each seed's p spread over the
    problems; about 1 in 5 arms keeps and 1 in 4 is refuted): an arm is never both kept and refuted, its
    bounds clear both margins exactly where Holm rejects (p_arm below its step's α), and each decision
    agrees with its own intervals."""
    names = ["grpo", "a1", "a2", "a3"]
    arms = {m: [level + (offsets[i - 1] if i else 0) + jitter[3 * i + s] for s in range(3)] for i, m in enumerate(names)}
    results = table(arms, {**RULE, "pass1_margin_vs_baseline": m1, "passk_margin_vs_base": m2})
    across = np.linspace(-1, 1, PROBLEMS)
    for i, m in enumerate(names):  # per-problem variation: the crossed interval's problem and interaction parts
        for s, job in results.jobs[m].items():
            job.final = exact(np.clip(job.final.p + across * spread[3 * i + s], 0, 1))
    for d in decide(results).arms:
        clears = d.pass1_vs_baseline.lo > m1 / 100 and d.passk_vs_base.lo > m2 / 100
        falls = d.pass1_vs_baseline.hi < m1 / 100 or d.passk_vs_base.hi < m2 / 100
        assert not (d.decision == "keeps" and falls) and not (clears and falls)
        assert clears == (d.p_arm < 1 - d.level)
        assert (d.decision == "keeps") == (clears and d.above is not None and d.above > 0)
        assert (d.decision == "refuted") == falls
        assert d.decision != "keeps" or d.p_holm < 0.05


def crossed(seed_sd: float, problem_sd: float, noise_sd: float, seeds: int, problems: int, seed: int) -> np.ndarray:
    """values[seeds, problems] = a_s + b_p + e_sp, each normal with the given sd."""
    rng = np.random.default_rng(seed)
    return (rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, problem_sd, (1, problems))
            + rng.normal(0, noise_sd, (seeds, problems)))


@given(st.integers(2, 6), st.integers(3, 40), st.floats(0.005, 0.05), st.floats(0.005, 0.05), st.floats(0.005, 0.05),
       st.floats(0.8, 0.999), st.integers(0, 10 ** 6))
def test_the_projected_half_width_at_todays_design_is_todays(seeds, problems, seed_sd, problem_sd, noise_sd, level,
                                                              seed):
    values = crossed(seed_sd, problem_sd, noise_sd, seeds, problems, seed)
    ms_seed, ms_problem, ms_resid = (float(x[0]) for x in mean_squares(values[:, :, None]))
    assume(ms_seed > ms_resid and ms_problem > ms_resid)  # no component floored at 0: the projection is exact
    (today,) = crossed_interval(values[:, :, None], level)
    half = projected_half_width(values, level)
    assert half(seeds, problems) == pytest.approx(today.hi - today.mean, rel=1e-9)


@given(st.integers(1, 5_000), st.integers(1, 5_000))
def test_the_search_finds_the_first_deciding_size(first, high):
    assert smallest(lambda n: n >= first, 1, high) == (first if first <= high else None)


def test_the_search_walks_past_a_size_that_decides_only_for_a_while():
    """A window that decides (40-41) then stops deciding: the 25 % walk lands in it and bisects to its start."""
    assert smallest(lambda n: 40 <= n <= 41 or n >= 500, 1, 10 ** 6) == 40


def test_what_decides_a_wide_arm_is_the_fewest_seeds_at_the_problems_that_allow_it():
    """Problem-level variance the seeds cannot average away: neither seeds nor problems alone decide it, so
    the answer names the seeds at the smallest multiple of the problems that can, and that design is the
    first whose projected interval clears the margin."""
    values = crossed(0.02, 0.05, 0.05, 4, 50, seed=3) + 0.01  # mean ≈ +1 point, margin 0
    level = 0.99
    half = projected_half_width(values, level)
    gap = abs(float(values.mean()))
    assert half(10 ** 6, 50) >= gap and half(4, 10 ** 9) >= gap  # neither alone can
    text = needed(values, 0.0, level)
    assert "more seeds alone cannot" in text and "more problems alone cannot" in text
    factor = next(f for f in (2, 4, 8, 16) if half(10 ** 6, f * 50) < gap)
    seeds = next(s for s in range(5, 10 ** 6) if half(s, factor * 50) < gap)
    assert text.endswith(f"; both: ≈ {seeds:,} seeds at {factor * 50:,} problems")
    assert half(seeds - 1, factor * 50) >= gap


def test_the_rule_is_a_report_section_and_its_first_line(tmp_path):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    interval_rule = {key: v for key, v in RULE.items() if key != "frontier_test"}  # the default: the interval test
    path.write_text(yaml.safe_dump({**raw, "rule": {"keeps_passk": {**interval_rule, "baseline_pass1_margin_vs_oracle": -100}}}))
    cfg = load_compare_config(path)
    report = write_compare_report(cfg).read_text()
    summary = json.loads((cfg.output_dir / "summary.json").read_text())
    first = report.splitlines()[0]
    assert first == summary["rule"]["answer"] and first.startswith("**Answer:**") and "Holm over 2 arms, 3 seeds" in first
    assert "## Decision rule: does an arm keep pass@16?" in report and report.splitlines()[2].startswith("# synthetic")
    assert set(summary["rule"]["arms"]) == {"arm_a", "arm_b"} and summary["results"]["study"]["rule"] == {
        "keeps_passk": {**interval_rule, "baseline_pass1_margin_vs_oracle": -100, "min_seeds": 3, "frontier_test": "interval",
                        "frontier_margin": 0}}
    assert "| d_F = above grpo's frontier |" in report and "frontier test: interval (margin +0.0)" in first
    for arm in ("arm_a", "arm_b"):  # the table's point distance is the interval's mean
        d = summary["rule"]["arms"][arm]
        # tol: a float64 distance in [−1, 1] by two routes (summary.json keeps every digit): rounding ≤ 1e-15
        assert d["frontier_distance"]["interval"]["mean"] == pytest.approx(d["above_frontier"], abs=1e-12)
    render(from_summary(cfg.output_dir / "summary.json"), tmp_path / "again")
    assert (tmp_path / "again" / "report.md").read_text() == report
    assert (tmp_path / "again" / "summary.json").read_text() == (cfg.output_dir / "summary.json").read_text()


@pytest.mark.parametrize("rule, match", [
    ({"keeps": {}}, r"rule: expected \{keeps_passk"),
    ({"keeps_passk": {"k": 16, "pass1_margin_vs_baseline": -2}}, r"rule.keeps_passk.passk_margin_vs_base: missing"),
    ({"keeps_passk": {**RULE, "k": 12}}, r"rule.keeps_passk.k: expected the deciding k, a power of two"),
    ({"keeps_passk": {**RULE, "passk_margin_vs_base": "-1"}}, r"rule.keeps_passk.passk_margin_vs_base: expected points"),
    ({"keeps_passk": {**RULE, "min_seed": 6}}, r"unknown key\(s\) \['min_seed'\]"),
    ({"keeps_passk": {**RULE, "min_seeds": 0}}, r"rule.keeps_passk.min_seeds: expected an integer >= 1"),
    ({"keeps_passk": {**RULE, "k": 128}}, r"rule.keeps_passk.k = 128: the study evaluates pass@k up to n = 64"),
])
def test_a_bad_rule_is_refused_naming_the_key(tmp_path, rule, match):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "rule": rule}))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_the_rule_needs_a_frontier(tmp_path):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "frontier": [], "rule": {"keeps_passk": RULE}}))
    with pytest.raises(ConfigError, match=r"rule.keeps_passk: needs the baseline's checkpoint frontier"):
        load_compare_config(path)


def test_every_rule_a_study_may_name_has_its_functions():
    """The loader's specs (rules.spec) and the report's functions (rules.registry) name the same rules: a rule the loader
    accepts always renders."""
    from grae.compare.rules.registry import RULES
    from grae.compare.rules.spec import RULE_SPECS

    assert set(RULE_SPECS) == set(RULES)
