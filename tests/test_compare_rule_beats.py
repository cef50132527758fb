"""The rule ``beats_baseline``: per group (all held-out, each stratum, the band hold-out) and k, each arm − the
baseline under Holm over the arms; Δ_F against each stratum's own frontier; the rare strategy's change against the
base; leave-one-seed-out ranges. Checked on the synthetic table of tests/test_compare_mechanism.py, by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from grae.compare.mechanism_report import stratum_lines
from grae.compare.rules import beats_baseline
from grae.compare.rules.registry import rule_kind
from grae.compare.stats import difference_interval, holm_intervals
from test_compare_mechanism import BASE_PARTS, PARTS, QIDS, STRATA, _study, passk, table

SPEC = {"ks": [1, 16, 256], "frontier_ks": [16, 256], "rare_stratum": "totals=excursion", "rare_k": 4,
        "strategy": "G", "min_seeds": 3}


def results_with(**spec):
    results = table()
    results.study = dataclasses.replace(results.study, rule={"beats_baseline": {**SPEC, **spec}})
    return results


def test_one_arm_is_its_plain_interval_and_leave_one_seed_out_by_hand():
    outcome = beats_baseline.decide(results_with())
    assert outcome.arms == ["arm"] and outcome.seeds == 3
    for k in (1, 16, 256):
        d = passk(PARTS["arm"].sum(-1), k) - passk(PARTS["grpo"].sum(-1), k)  # [S, P]
        got = outcome.vs_baseline["all held-out"][k]["arm"]
        (iv,) = difference_interval(d[:, :, None])
        assert (got.interval.lo, got.interval.hi) == pytest.approx((iv.lo, iv.hi), rel=1e-12)  # tol: same float64 path
        loso = [np.delete(d, s, axis=0).mean() for s in range(3)]
        assert got.loo == pytest.approx((min(loso), max(loso)), rel=1e-12)  # tol: float64 means
        assert got.decision == ("beats" if iv.lo > 0 else "below" if iv.hi < 0 else "not resolved")
    rows = [QIDS.index(q) for q in STRATA["totals=excursion"]]
    assert 4 in outcome.vs_baseline["totals=excursion"]  # rare_k joins the rare stratum's ks only
    assert 4 not in outcome.vs_baseline["totals=in_range"]
    d4 = passk(PARTS["arm"][:, rows].sum(-1), 4) - passk(PARTS["grpo"][:, rows].sum(-1), 4)
    assert outcome.vs_baseline["totals=excursion"][4]["arm"].interval.mean == pytest.approx(d4.mean(), rel=1e-12)


def test_holm_runs_over_the_arms_per_k_and_group():
    results = results_with()
    second = {s: results.jobs["arm"][s] for s in results.jobs["arm"]}
    results.jobs["arm2"] = second
    results.mechanism.jobs["arm2"] = results.mechanism.jobs["arm"]
    outcome = beats_baseline.decide(results)
    from grae.compare.stats import paired_differences

    finals = {m: results.finals(m) for m in results.jobs}
    diffs = {a: paired_differences(finals[a], finals["grpo"], [1, 16, 256]) for a in ("arm", "arm2")}
    adjusted = holm_intervals(diffs, [1, 16, 256], 0.95)
    for k in (1, 16, 256):
        for a in ("arm", "arm2"):
            got = outcome.vs_baseline["all held-out"][k][a].interval
            assert (got.lo, got.hi) == (adjusted[a][k].lo, adjusted[a][k].hi)


def test_delta_f_matches_the_mechanism_sections_own_stratum_frontier():
    results = results_with()
    outcome = beats_baseline.decide(results)
    _, section = stratum_lines(results, results.mechanism)
    for label in STRATA:
        for k in (16, 256):
            assert outcome.delta_f[label][k]["arm"].mean == pytest.approx(
                section[label]["delta_F"]["arm"][str(k)]["mean"], rel=1e-12)  # tol: the same computation
    assert set(outcome.delta_f) == set(STRATA)  # never the pooled group nor the band hold-out


def test_the_rare_strategys_change_against_the_base_by_hand():
    outcome = beats_baseline.decide(results_with())
    rows = [QIDS.index(q) for q in STRATA["totals=excursion"]]
    assert outcome.strategy_step == 4
    for m in PARTS:
        change = PARTS[m][:, rows, 1] - BASE_PARTS[rows, 1][None]
        assert outcome.strategy_change[m].mean == pytest.approx(change.mean(), rel=1e-12, abs=1e-15)  # tol: float64


def test_answer_names_winners_with_intervals_or_says_none():
    from grae.compare.mechanism import Probe
    from grae.compare.temperature_frontier import exact_counts

    results = results_with()
    better = np.clip(PARTS["grpo"] + 0.2, 0, 1)  # [S, P, J]: every problem, every seed above the baseline
    results.jobs["arm"] = {s: dataclasses.replace(j, final=exact_counts(better[s].sum(1), QIDS, 256))
                           for s, j in results.jobs["arm"].items()}
    results.mechanism.jobs["arm"] = {s: {step: Probe(better[s], probe.band) for step, probe in by_step.items()}
                                     for s, by_step in results.mechanism.jobs["arm"].items()}
    outcome = beats_baseline.decide(results)
    assert outcome.beating("all held-out", 1) == ["arm"] and outcome.beating("totals=excursion", 1) == ["arm"]
    answer = rule_kind(results.study.rule).answer_line(outcome, "grpo")
    assert answer.startswith("**Answer** (rule `beats_baseline`")
    cell = outcome.vs_baseline["all held-out"][1]["arm"].interval
    assert f"all held-out: arm {100 * cell.mean:+.1f} [{100 * cell.lo:+.1f}, {100 * cell.hi:+.1f}]" in answer
    assert "beats grpo at pass@256" in answer and "G mass on totals=excursion at step 4" in answer
    change = outcome.strategy_change["arm"]  # 3 excursion problems: wide, so read by its interval's side of 0
    reading = "grows" if change.lo > 0 else "loses" if change.hi < 0 else "keeps"
    assert f"{reading}: " in answer and f"arm {100 * change.mean:+.1f} [" in answer.split(f"{reading}: ")[1]
    # the baseline against itself beats nothing: "none" everywhere, said so
    results.jobs["arm"] = dict(results.jobs["grpo"])
    results.mechanism.jobs["arm"] = results.mechanism.jobs["grpo"]
    same = beats_baseline.decide(results)
    answer = beats_baseline.answer_line(same, "grpo")
    assert "no arm beats grpo here at any k on any group" in answer
    assert all(d.decision == "not resolved" for by_k in same.vs_baseline.values() for by_arm in by_k.values()
               for d in by_arm.values())


def test_fewer_seeds_than_min_seeds_is_a_pilot_and_the_json_round_trips():
    import json

    outcome = beats_baseline.decide(results_with(min_seeds=4))
    answer = beats_baseline.answer_line(outcome, "grpo")
    assert answer.startswith("**Pilot: no verdict**")
    record = json.loads(json.dumps(beats_baseline.outcome_json(outcome, answer)))
    assert record["vs_baseline"]["totals=excursion"]["4"]["arm"]["decision"] in ("beats", "below", "not resolved")
    assert record["strategy_change"]["arm"]["reading"] in ("grows", "keeps", "loses")
    assert "### totals=in_range" in "\n".join(beats_baseline.rule_lines(outcome, "grpo"))


@pytest.mark.parametrize(("rule", "match"), [
    ({"ks": []}, r"rule.beats_baseline.ks: expected a list of distinct k"),
    ({"ks": [1, 128]}, r"rule.beats_baseline.ks: the study evaluates pass@k up to n = 64"),
    ({"ks": [1, 64], "frontier_ks": [64]}, r"frontier_ks: the base's temperature frontier is not traced"),
    ({"ks": [1, 64], "rare_stratum": "excursion"}, r"rare_stratum = 'excursion': the held-out task's strata are keyed"),
    ({"ks": [1, 64], "strategy": "G"}, r"rule.beats_baseline.rare_stratum: rare_k and strategy are read on it"),
    ({"ks": [1, 64], "rare_k": 0, "rare_stratum": "totals=excursion"}, r"rare_k: expected an integer >= 1"),
])
def test_the_rule_is_refused_in_one_line(tmp_path, rule, match):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import ConfigError, load_compare_config

    study = _study(tmp_path, mechanism={}, rule={"beats_baseline": rule},
                   eval={"exact": True, "n": 64, "num_problems": 4,
                         "heldout_params": {"totals": "any", "heldout_strata": ["totals"]}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_the_rule_needs_the_mechanism_rows(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import ConfigError, load_compare_config

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_study(tmp_path, rule={"beats_baseline": {"ks": [1, 64]}})))
    with pytest.raises(ConfigError, match="rule.beats_baseline: reads the held-out strata and strategy mass"):
        load_compare_config(path)
