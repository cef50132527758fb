"""The rule ``non_inferior_every_k`` (grae.compare.rules.every_k) on synthetic study tables:
holds / fails / undecided per k against hand-computed Holm levels and t intervals, each arm's reading
(supported / refuted / inconclusive), the report's first line, no verdict (pilot, a baseline that did not
learn), the study key's refusals, and the fair A-GRAE study's key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.grid import ConfigError, load_compare_config  # noqa: E402
from grae.compare.report import render, write_compare_report  # noqa: E402
from grae.compare.results import JobResult, StudyInfo, StudyResults, from_summary  # noqa: E402
from grae.compare.rules.every_k import answer_line, decide  # noqa: E402
from grae.compare.rules.registry import rule_kind  # noqa: E402
from grae.eval.stats import ProblemCounts  # noqa: E402
from test_compare_rule import BASE_P, PROBLEMS, by_hand, passk, seeds_by_hand  # noqa: E402

N = 4  # exact rows: the report's ks are 1, 2, 4
KS = [1, 2, 4]
MARGIN = -0.01
#: grpo's p(correct) per seed, the same on every problem (the crossed interval is then the t_{S−1}
#: interval over seed means); seeds at 0.5 and 0.9 weigh differently at larger k, so an arm's mean
#: difference and its spread change with k
GRPO = [0.5, 0.9, 0.5, 0.9]
OFFSETS = {"steady": [0.004, 0.006, 0.005, 0.005],  # ≈ +0.5 points, tight: holds at every k
           "slight": [-0.005, -0.004, -0.006, -0.005],  # ≈ −0.5 points, tight: inside (−1, 0) at k = 1
           "fader": [-0.05, -0.048, -0.052, -0.05],  # −5 points at k = 1, shrinking and spreading at larger k
           "unsure": [-0.04, 0.02, -0.02, 0.03]}  # wide
SEED_P = {"grpo": GRPO, **{arm: [g + d for g, d in zip(GRPO, offset)] for arm, offset in OFFSETS.items()}}
SPEC = {"margin_vs_baseline": -1, "baseline_pass1_margin_vs_base": 3}


def exact(p) -> ProblemCounts:
    p = np.asarray(p, dtype=float)
    return ProblemCounts([f"q{i}" for i in range(len(p))], np.full(len(p), N), p * N, p=p, mass=np.ones(len(p)))


def table(arm: str, **spec) -> StudyResults:
    """Every arm of SEED_P per seed on PROBLEMS identical problems, the base at BASE_P; the rule's claim is ``arm``."""
    seeds = list(range(len(GRPO)))
    info = StudyInfo(title="rule", notes="", verdict="", source="study.yaml", methods=list(SEED_P), seeds=seeds,
                     baseline="grpo", bootstrap=2000, eval={"exact": True}, frontier=[], paired_against=["base"],
                     heldout=True, num_jobs=len(SEED_P) * len(seeds), per_step=16, group_size=8,
                     rule={"non_inferior_every_k": {"arm": arm, "min_seeds": 3, **SPEC, **spec}})
    jobs = {m: {s: JobResult(final=exact(np.full(PROBLEMS, p)), metrics={}, train_seconds=1.0, steps=8, generated=None)
                for s, p in enumerate(ps)} for m, ps in SEED_P.items()}
    return StudyResults(info, jobs, {"frontier.jsonl": exact(np.full(PROBLEMS, BASE_P))})


def seed_differences(arm: str, k: int) -> list[float]:
    return [passk(a, k) - passk(b, k) for a, b in zip(SEED_P[arm], GRPO)]


def test_holds_fails_and_undecided_per_k_against_hand_computed_holm_levels():
    outcome = decide(table("steady"))
    assert outcome.ks == KS and [a.arm for a in outcome.arms] == ["steady", "slight", "fader", "unsure"]
    arms = {a.arm: {at.k: at for at in a.by_k} for a in outcome.arms}
    for k in KS:
        p = {arm: by_hand(seed_differences(arm, k), MARGIN)[2] for arm in OFFSETS}
        assert {arm: arms[arm][k].p for arm in OFFSETS} == pytest.approx(p, rel=1e-6)
        # Holm over 4 arms at 0.05, at every k: steady (smallest p) at 0.05/4, slight at 0.05/3, then the third
        # (p ≥ 0.05/2: Holm stops there) and the fourth at 0.05/2
        assert p["steady"] < 0.05 / 4 and p["steady"] < p["slight"] < 0.05 / 3
        assert p["fader"] == 1.0 and 0.05 / 2 <= p["unsure"] <= 1.0
        level = {"steady": 1 - 0.05 / 4, "slight": 1 - 0.05 / 3, "fader": 1 - 0.05 / 2, "unsure": 1 - 0.05 / 2}
        assert {arm: arms[arm][k].level for arm in OFFSETS} == pytest.approx(level)
        ordered = sorted(p.values())
        holm = {a: min(1.0, max((4 - i) * ordered[i] for i in range(ordered.index(q) + 1))) for a, q in p.items()}
        assert {arm: arms[arm][k].p_holm for arm in OFFSETS} == pytest.approx(holm)
        for arm in OFFSETS:  # every interval at the arm's level, t_{S−1} over seed means
            mean, half, _ = by_hand(seed_differences(arm, k), MARGIN, level[arm])
            iv = arms[arm][k].interval
            assert (iv.mean, iv.lo, iv.hi) == pytest.approx((mean, mean - half, mean + half), rel=1e-6)
            expected = "fails" if mean + half < 0 else "holds" if mean - half > MARGIN else "undecided"
            assert arms[arm][k].decision == expected
    decisions = {arm: [arms[arm][k].decision for k in KS] for arm in OFFSETS}
    assert decisions == {"steady": ["holds"] * 3, "slight": ["fails", "holds", "holds"],
                         "fader": ["fails", "undecided", "undecided"], "unsure": ["undecided"] * 3}
    slight = arms["slight"][1].interval  # inside (−1, 0): non-inferior and below grpo at once, counted as fails
    assert MARGIN < slight.lo and slight.hi < 0
    readings = {a.arm: a.reading for a in outcome.arms}
    assert readings == {"steady": "supported", "slight": "refuted", "fader": "refuted", "unsure": "inconclusive"}


def test_what_decides_an_undecided_k_is_the_bound_that_reaches_its_threshold_first():
    """The variance is all seed-level here, so S′ is the smallest with t_{S′−1}·s/√S′ < |mean − threshold| (the
    t quantile of the larger study): the threshold is the margin when the mean is at or above margin/2 (unsure
    at k = 1: −0.25 points), else 0."""
    arms = {a.arm: {at.k: at for at in a.by_k} for a in decide(table("unsure")).arms}
    level = 1 - 0.05 / 2
    for k, threshold, bound in ((1, MARGIN, "lower bound past -1.0"), (2, 0.0, "upper bound below 0")):
        d = np.asarray(seed_differences("unsure", k))
        assert (d.mean() >= MARGIN / 2) == (threshold == MARGIN)
        seeds = seeds_by_hand(d, threshold, level)
        assert arms["unsure"][k].resolve.startswith(f"{bound}: ≈ {seeds} seeds at {PROBLEMS} problems")
        assert "more problems alone cannot" in arms["unsure"][k].resolve
    assert all(not at.resolve for arm in ("steady", "slight") for at in arms[arm].values())


def test_the_first_line_states_the_claims_reading():
    rule = "(rule `non_inferior_every_k`: {} − grpo at k = 1 … 4, margin -1.0, Holm over 4 arms per k, 4 seeds)."
    assert answer_line(decide(table("steady")), "grpo") == (
        "**Answer: supported** — steady ≥ grpo at every k: non-inferior within 1.0 points at every k "
        + rule.format("steady"))
    assert answer_line(decide(table("fader")), "grpo") == (
        "**Answer: refuted** — fader ≥ grpo at every k: fader falls below grpo (upper bound < 0) at k = 1 "
        + rule.format("fader"))
    assert answer_line(decide(table("unsure")), "grpo") == (
        "**Answer: inconclusive** — unsure ≥ grpo at every k: undecided at k = 1, 2, 4, holds at no k "
        + rule.format("unsure"))
    outcome = decide(table("unsure"))  # the claim's arm comes first; the readings do not depend on which it is
    assert outcome.claim.arm == "unsure" and [a.arm for a in outcome.arms] == ["unsure", "steady", "slight", "fader"]


def test_too_few_seeds_or_a_baseline_that_did_not_learn_give_no_verdict():
    # grpo − base at pass@1 per seed: 0.3, 0.7, 0.3, 0.7 (mean 0.5, t_3 over seeds at 95 %)
    mean, half, _ = by_hand([p - BASE_P for p in GRPO], 0.0, 0.95)
    outcome = decide(table("steady", baseline_pass1_margin_vs_base=100 * (mean - half) + 0.1))
    iv = outcome.baseline_vs_base
    assert (iv.mean, iv.lo, iv.hi) == pytest.approx((mean, mean - half, mean + half), rel=1e-9)
    assert not outcome.baseline_learned
    assert answer_line(outcome, "grpo") == (
        "**No verdict: this regime cannot test the claim** (rule `non_inferior_every_k`: steady − grpo at k = 1 … 4, "
        f"margin -1.0, Holm over 4 arms per k, 4 seeds): grpo − base at pass@1 is +50.0 [{100 * (mean - half):+.1f}, "
        f"{100 * (mean + half):+.1f}] (95 %), lower bound not above {100 * (mean - half) + 0.1:+.1f}, so grpo did not "
        "learn.")
    assert decide(table("steady", baseline_pass1_margin_vs_base=100 * (mean - half) - 0.1)).baseline_learned
    pilot = answer_line(decide(table("steady", min_seeds=5)), "grpo")
    assert pilot.startswith("**Pilot: no verdict** (rule `non_inferior_every_k`: steady − grpo at k = 1 … 4")
    assert "fewer than the 5 seeds per arm the rule needs" in pilot


def test_the_rule_is_a_report_section_and_its_first_line(tmp_path):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    spec = {"arm": "arm_a", **SPEC, "baseline_pass1_margin_vs_base": -100}  # its grpo barely beats the base
    path.write_text(yaml.safe_dump({**raw, "rule": {"non_inferior_every_k": spec}}))
    cfg = load_compare_config(path)
    assert cfg.rule == {"non_inferior_every_k": {**spec, "min_seeds": 3}}
    report = write_compare_report(cfg).read_text()
    summary = json.loads((cfg.output_dir / "summary.json").read_text())
    first = report.splitlines()[0]
    assert first == summary["rule"]["answer"] and first.startswith("**Answer: ")
    assert "(rule `non_inferior_every_k`: arm_a − grpo at k = 1 … 64, margin -1.0, Holm over 2 arms per k, 3 seeds)" in first
    assert report.splitlines()[2].startswith("# synthetic")
    assert "## Decision rule: is arm_a ≥ grpo at every k?" in report
    assert summary["rule"]["ks"] == [1, 2, 4, 8, 16, 32, 64] and set(summary["rule"]["arms"]) == {"arm_a", "arm_b"}
    assert summary["rule"]["claim"] == summary["rule"]["arms"]["arm_a"]["reading"]
    render(from_summary(cfg.output_dir / "summary.json"), tmp_path / "again")
    assert (tmp_path / "again" / "report.md").read_text() == report
    assert (tmp_path / "again" / "summary.json").read_text() == (cfg.output_dir / "summary.json").read_text()
    assert rule_kind(cfg.rule).decide is decide


NAME = "rule.non_inferior_every_k"


@pytest.mark.parametrize("rule, match", [
    ({"non_inferior": {}}, r"rule: expected \{keeps_passk: \{…\}\} or \{non_inferior_every_k: \{…\}\}"),
    ({"non_inferior_every_k": SPEC}, rf"{NAME}.arm: missing \(the claim's arm"),
    ({"non_inferior_every_k": {"arm": "grpo", **SPEC}},
     rf"{NAME}.arm: expected the claim's arm: a method of this study other than the baseline, got 'grpo'; "
     r"choose among \['arm_a', 'arm_b'\]"),
    ({"non_inferior_every_k": {"arm": "agrae", **SPEC}}, rf"{NAME}.arm: expected .* got 'agrae'"),
    ({"non_inferior_every_k": {"arm": "arm_a", **SPEC, "margin_vs_baseline": 1}},
     rf"{NAME}.margin_vs_baseline: expected points <= 0"),
    ({"non_inferior_every_k": {"arm": "arm_a", **SPEC, "margin_vs_baseline": "-1"}},
     rf"{NAME}.margin_vs_baseline: expected points <= 0"),
    ({"non_inferior_every_k": {"arm": "arm_a", "margin_vs_baseline": -1}}, rf"{NAME}.baseline_pass1_margin_vs_base: missing"),
    ({"non_inferior_every_k": {"arm": "arm_a", **SPEC, "min_seed": 5}}, r"unknown key\(s\) \['min_seed'\]"),
    ({"non_inferior_every_k": {"arm": "arm_a", **SPEC, "min_seeds": 0}}, rf"{NAME}.min_seeds: expected an integer >= 1"),
])
def test_a_bad_rule_is_refused_naming_the_key(tmp_path, rule, match):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "rule": rule}))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_the_rule_needs_compare_to_evaluate_the_base(tmp_path):
    from test_compare_results import exact_study

    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    del raw["eval"]
    raw = {**raw, "overrides": {**raw["overrides"], "eval": {"enabled": True}}, "paired_against": ["base"],
           "rule": {"non_inferior_every_k": {"arm": "arm_a", **SPEC}}}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"{NAME}: reads the base model's pass@1 .* give the study eval: "):
        load_compare_config(path)


def test_the_fair_agrae_study_encodes_its_header_rule():
    study = Path(__file__).resolve().parent.parent / "studies" / "design" / "agrae_fair_r4.yaml"
    cfg = load_compare_config(study)
    assert cfg.rule == {"non_inferior_every_k": {"arm": "agrae", "margin_vs_baseline": -1,
                                                 "baseline_pass1_margin_vs_base": 3, "min_seeds": 5}}
    assert cfg.baseline == "grpo" and len(cfg.seeds) == 5
