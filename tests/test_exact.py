"""Exact pass@k by answer enumeration (grae.eval.exact) and its reference policies."""

from __future__ import annotations

import json

import pytest

from grae.eval.exact import near_miss_p, reference_counts
from grae.eval.stats import count_problems, paired_difference, passk_estimates


def test_chain_sum_declares_its_answer_range():
    from grae.data import get_task

    task = get_task("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2)
    answers = task.answer_set()
    assert (answers[0], answers[-1], len(answers)) == ("-99", "198", 298)
    assert task.answer_completion("7") == " 7"
    assert all(ex["answer"] in set(answers) for ex in task.heldout(200))
    assert get_task("gcd").answer_set() is None


def test_exact_rows_give_closed_form_passk_and_references():
    rows = [{"question_id": f"q{i}", "exact": True, "p": p, "mass": m, "near_miss_p": 1 / 41}
            for i, (p, m) in enumerate([(0.5, 0.5), (0.1, 0.4), (0.0, 1.0)])]
    counts = count_problems(rows)
    est = passk_estimates(counts, [1, 4, 256], bootstrap=0)
    assert est[1].value == pytest.approx((0.5 + 0.1 + 0.0) / 3)
    assert est[4].value == pytest.approx((1 - 0.5**4 + 1 - 0.9**4) / 3)
    refs = reference_counts(counts, rows)
    oracle = passk_estimates(refs["format-only oracle"], [1], bootstrap=0)[1].value
    assert oracle == pytest.approx((1.0 + 0.25 + 0.0) / 3)
    near = passk_estimates(refs["near-miss guesser (w = 20)"], [256], bootstrap=0)[256].value
    assert near == pytest.approx(1 - (40 / 41) ** 256)
    assert near_miss_p("0", [str(v) for v in range(-5, 100)], 20) == pytest.approx(1 / 26)  # clipped at -5
    with pytest.raises(Exception, match="mixed"):
        count_problems(rows + [{"question_id": "q9", "label": True, "generation_id": 0}])


@pytest.mark.slow
def test_exact_agrees_with_sampled_on_the_tiny_model(tmp_path):
    """20 problems: exact pass@k vs n = 256 samples at T = 0.6, top-p 0.95, paired per problem."""
    from grae.eval.jobs import evaluate_tasks

    common = dict(num_problems=20, temperature=0.6, top_p=0.95, log=lambda _: None)
    exact = evaluate_tasks("tiny", ["chain_sum"], exact=True, output=tmp_path / "exact", **common)
    sampled = evaluate_tasks("tiny", ["chain_sum"], n=256, output=tmp_path / "sampled", **common)
    exact_rows = [json.loads(line) for line in (tmp_path / "exact" / "chain_sum.jsonl").read_text().splitlines()]
    assert all(r["exact"] and 0 <= r["p"] <= r["mass"] <= 1 + 1e-9 for r in exact_rows)
    e, s = exact.results["chain_sum"].counts, sampled.results["chain_sum"].counts
    diff, shared = paired_difference(e, s, [1, 4, 16, 256], bootstrap=2000)
    assert len(shared) == 20
    for k, d in diff.items():
        assert d.lo <= 0 <= d.hi, (k, d)
        interval = sampled.results["chain_sum"].intervals[k]
        assert interval[0] <= exact.results["chain_sum"].curve[k] <= interval[1]
    assert exact.summaries["chain_sum"]["references"]["format-only oracle"]["1"] >= exact.results["chain_sum"].curve[1]
