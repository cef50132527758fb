"""The base's temperature frontier in grae compare: ``paired_against: temperature_frontier`` traces it,
the report prints every arm's Δ_F beside its distance above the baseline's checkpoint frontier, a keeps_passk rule
may name it (``temperature_frontier_margin``), and the table re-renders from its summary."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from tolerances import assert_close_scaled

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.compare.grid import ConfigError, load_compare_config  # noqa: E402
from grae.compare.report import render, write_compare_report  # noqa: E402
from grae.compare.results import from_summary, gather  # noqa: E402
from grae.compare.temperature_frontier import PREFIX, base_temperatures, distance_above, trace_frontier  # noqa: E402
from test_compare_results import QIDS, assert_same_report, exact_study  # noqa: E402

RULE = {"k": 16, "pass1_margin_vs_baseline": -50, "passk_margin_vs_base": -90, "temperature_frontier_margin": 0}


def traced_study(tmp_path, rule=None):
    """exact_study with the temperature frontier on, and the base's p at three temperatures written as compare
    writes them (colder: sharper on the problems it already solves, hotter: flatter)."""
    path, finals = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["paired_against"] = ["base", "oracle", "temperature_frontier"]
    raw["temperatures"] = [0.5, 0.8, 1.0]
    if rule is not None:
        raw["rule"] = {"keeps_passk": rule}
    path.write_text(yaml.safe_dump(raw))
    cfg = load_compare_config(path)
    rng = np.random.default_rng(7)
    solved = rng.uniform(0, 1, len(QIDS)) < 0.4
    p = {0.5: np.where(solved, 0.6, 0.0), 0.8: np.where(solved, 0.45, 0.03), 1.0: np.where(solved, 0.3, 0.08)}
    (cfg.output_dir / "base" / "temperature_frontier.json").write_text(json.dumps(
        {"settings": {}, "question_ids": QIDS, "p": {repr(t): v.tolist() for t, v in p.items()}}))
    return cfg, p


def test_the_report_prints_F_and_each_arms_distance_and_rerenders_from_its_summary(tmp_path):
    cfg, p = traced_study(tmp_path)
    report = write_compare_report(cfg).read_text()
    results = gather(cfg)
    base = base_temperatures(results.base_files)
    assert sorted(base) == [0.5, 0.8, 1.0] and base[0.8].p.tolist() == p[0.8].tolist()
    k = results.ks()[-1]
    assert "## The base's temperature frontier F (pass@1 → pass@" + str(k) in report
    frontier = trace_frontier(base, k)
    for point in frontier.points:
        assert f"| {point.temperature:g} | {100 * point.pass1:.1f} | {100 * point.passk:.1f} |" in report
    summary = json.loads((cfg.output_dir / "summary.json").read_text())["temperature_frontier"]
    for method in ("grpo", "arm_a", "arm_b"):
        d = distance_above(results.finals(method), base, k)
        assert_close_scaled([summary["distances"][method]["interval"][key] for key in ("mean", "lo", "hi")],
                            [d.interval.mean, d.interval.lo, d.interval.hi], rel=1e-12)  # tol: the same float64 sums
        assert f"| {method} |" in report.split("## The base's temperature frontier")[1]
    assert set(summary["checkpoint_distances"]) == {"arm_a", "arm_b"}  # beside the baseline's checkpoint frontier
    render(from_summary(cfg.output_dir / "summary.json"), tmp_path / "again")
    assert_same_report(tmp_path / "again", cfg.output_dir)


def test_a_rule_names_the_temperature_frontier_as_a_criterion(tmp_path):
    from grae.compare.rules.keeps_passk import answer_line, decide, rule_lines

    cfg, _ = traced_study(tmp_path, dict(RULE))
    results = gather(cfg)
    outcome = decide(results)
    base = base_temperatures(results.base_files)
    for d in outcome.arms:
        expected = distance_above(results.finals(d.arm), base, 16, d.level)
        t = d.temperature_distance
        assert_close_scaled([t.interval.mean, t.interval.lo, t.interval.hi],
                            [expected.interval.mean, expected.interval.lo, expected.interval.hi], rel=1e-12)  # tol: same sums
        if t.interval.hi < 0:
            assert d.decision == "refuted"
        if d.decision == "keeps":
            assert t.interval.lo > 0
    assert outcome.temperature_margin == 0 and "temperature frontier margin +0.0" in answer_line(outcome, "grpo")
    assert any(line.startswith("Δ_F = pass@16 above the base's temperature frontier") for line in rule_lines(outcome, "grpo"))
    # a margin above every arm's Δ_F: no arm keeps
    high = 100 * max(d.temperature_distance.interval.hi for d in outcome.arms) + 1
    (tmp_path / "high").mkdir()
    cfg2, _ = traced_study(tmp_path / "high", {**RULE, "temperature_frontier_margin": high})
    assert all(d.decision != "keeps" for d in decide(gather(cfg2)).arms)


def test_a_table_without_the_traced_frontier_is_refused_naming_the_fix(tmp_path):
    cfg, _ = traced_study(tmp_path)
    (cfg.output_dir / "base" / "temperature_frontier.json").unlink()
    with pytest.raises(FileNotFoundError, match="was not traced; run grae compare without --report-only"):
        gather(cfg)


@pytest.mark.parametrize("change,match", [
    ({"paired_against": ["base", "temperature_frontier"], "eval": {"n": 8}},
     "paired_against: temperature_frontier needs every arm's exact p"),
    ({"temperatures": [0.5, 1.0]}, "temperatures: the grid of the base's temperature frontier, which this study does"),
    ({"paired_against": ["base", "temperature_frontier"], "temperatures": [0.5]}, "temperatures: expected at least two"),
    ({"paired_against": ["base", "temperature_frontier"], "temperatures": [0.5, 0.0]}, "temperatures: expected at least"),
    ({"rule": {"keeps_passk": RULE}}, "rule.keeps_passk.temperature_frontier_margin: the base's temperature frontier is "
                                      "not traced"),
])
def test_bad_temperature_frontier_settings_are_refused_naming_the_key(tmp_path, change, match):
    path, _ = exact_study(tmp_path)
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, **change}))
    with pytest.raises(ConfigError, match=match):
        load_compare_config(path)


def test_compare_traces_the_base_exactly_once_per_settings(tmp_path):
    """On the embedded tiny model (exact_study's base): the file holds gold_probs at each temperature, and a second
    sitting with the same settings does not trace it again."""
    from grae.compare.runner import base_temperature_evaluation
    from grae.data import get_task
    from grae.eval.backends import load_hf
    from grae.eval.gold import gold_probs

    cfg, _ = traced_study(tmp_path)
    (cfg.output_dir / "base" / "temperature_frontier.json").unlink()
    job = cfg.jobs()[0]
    said: list[str] = []
    path = base_temperature_evaluation(cfg, job, said.append)
    data = json.loads(path.read_text())
    assert sorted(float(t) for t in data["p"]) == [0.5, 0.8, 1.0] and len(said) == 1
    config = cfg.train_config(job)
    task = get_task(config.task.name, **config.task.params)
    examples = task.heldout(cfg.eval["num_problems"])
    model, tok, _ = load_hf("tiny", device="cpu", dtype="float32")
    assert_close_scaled(data["p"]["0.8"], gold_probs(model, tok, examples, task, temperature=0.8,
                                                     max_tokens=config.eval.max_tokens), rel=1e-6)  # tol: same fp32 ops
    assert data["question_ids"] == [str(e["question_id"]) for e in examples]
    base_temperature_evaluation(cfg, job, said.append)
    assert len(said) == 1  # kept: same settings
    assert set(gather(cfg).base_files) >= {PREFIX + "0.5", PREFIX + "0.8", PREFIX + "1.0"}
