"""Exact pass@k by answer enumeration (grae.eval.exact) and its reference policies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grae.eval.exact import near_miss_p, reference_counts
from grae.eval.stats import count_problems, paired_difference, passk_estimates
from tolerances import assert_close_scaled


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


# -- memory bound and task settings ------------------------------------------------


@pytest.fixture(scope="module")
def random_tiny(tmp_path_factory):
    from tiny_model import build_random_tiny

    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def _scorer(model_dir, memory_mb):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval.exact import CandidateScorer

    task = get_task("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2, prompt_style="plain")
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    completions = [task.answer_completion(a) for a in task.answer_set()]
    return CandidateScorer(model, AutoTokenizer.from_pretrained(model_dir), completions, temperature=0.7, top_p=1.0,
                           memory_mb=memory_mb), task


@pytest.mark.parametrize("memory_mb", [0.01, 0.2, 1.5])
def test_chunked_scores_equal_one_batch_and_fit_the_budget(random_tiny, memory_mb):
    """298 candidates in chunks of the budget give the one-batch log-probabilities (float tolerance); every
    chunk's estimated memory fits the budget (a chunk of one where a candidate alone is over it)."""
    from grae.eval.exact import candidate_bytes

    whole, task = _scorer(random_tiny, 1e6)
    chunked, _ = _scorer(random_tiny, memory_mb)
    prompt = task.heldout(1)[0]["prompt"]
    chunks = []
    reference = whole.logprobs(prompt)
    scores = chunked.logprobs(prompt, on_chunk=lambda done, total: chunks.append(done))
    assert_close_scaled(scores, reference, rel=1e-5)
    assert np.isfinite(reference).all() and chunks[-1] == len(reference) == 298
    size = chunked.chunk_size(len(chunked.tokenizer(prompt)["input_ids"]))
    assert len(chunks) == -(-298 // size) > 1  # several chunks, each as large as the budget allows
    each = candidate_bytes(chunked.model.config, len(chunked.tokenizer(prompt)["input_ids"]), chunked.tokens.shape[1])
    assert size == 1 or size * each <= memory_mb * 2**20 < (size + 1) * each


def test_exact_refuses_a_huge_answer_set_before_loading_and_says_the_count(random_tiny, tmp_path):
    """A local model without task settings gets reasoning-gym's default chain_sum (109,990 answers): refused
    in one line, exit 2, unless the limit is raised; under it, the count is said before anything loads."""
    from grae.eval.jobs import EvalError, plan_tasks

    with pytest.raises(EvalError, match=r"109,990 candidate answers .*--exact-max-candidates") as err:
        plan_tasks(random_tiny, ["chain_sum"], exact=True, output=tmp_path / "a", log=lambda _: None)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    lines: list[str] = []
    plan_tasks(random_tiny, ["chain_sum"], exact=True, output=tmp_path / "b", log=lines.append,
               exact_max_candidates=200_000)
    assert "109,990 candidate answers × 100 problems = 10,999,000 sequences, scored within 512 MB" in lines[-1]
    for bad in [dict(exact_memory_mb=0.0), dict(exact_max_candidates=0)]:
        with pytest.raises(EvalError, match="must be") as err:
            plan_tasks(random_tiny, ["chain_sum"], exact=True, output=tmp_path / "c", log=lambda _: None, **bad)
        assert err.value.exit_code == 2


def test_a_trained_runs_model_gets_its_runs_task_settings(random_tiny, tmp_path):
    """final/, checkpoints/checkpoint-N and snapshots/step-N of a grae train run directory (config.yaml as
    the run writes it) evaluate chain_sum with the run's task.params, as `tiny` gets the tiny model's."""
    import shutil

    import yaml

    from grae.eval.jobs import plan_tasks
    from grae.tiny.tasks import DEFAULT_TASK_KWARGS
    from grae.train.config import load_config, to_dict

    run = tmp_path / "run"
    cfg = load_config(None, {"model": random_tiny, "output_dir": str(run), "task.params.max_digits": 1})
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))  # as grae.train.rundir writes it
    expected = {**DEFAULT_TASK_KWARGS, "max_digits": 1, "prompt_style": "plain"}
    for where in ["final", "checkpoints/checkpoint-3", "snapshots/step-2"]:
        shutil.copytree(random_tiny, run / where)
        lines: list[str] = []
        plan = plan_tasks(str(run / where), ["chain_sum"], exact=True, output=tmp_path / "eval" / where, log=lines.append)
        assert plan.tasks[0].params == expected, where
        assert len(plan.tasks[0].task.answer_set()) == 28  # -9 … 18: one-digit sums and differences
        assert "its run's" in lines[0] and "28 candidate answers" in lines[1]
    # --task-param wins; another task keeps its own defaults; a directory outside a run is left alone
    plan = plan_tasks(str(run / "final"), ["chain_sum"], exact=True, output=tmp_path / "e2", log=lambda _: None,
                      task_params={"max_digits": 2, "min_terms": 2, "max_terms": 2})
    assert plan.tasks[0].params == {"max_digits": 2, "min_terms": 2, "max_terms": 2}
    assert plan_tasks(str(run / "final"), ["gcd"], output=tmp_path / "e3", log=lambda _: None).tasks[0].params == {}


def test_exact_cli_on_a_run_directory_states_count_and_time(random_tiny, tmp_path):
    """`grae eval <run>/final --tasks chain_sum --exact` end to end: the run's settings, the candidate count
    and the expected time before the rows, and the same rows at any memory budget."""
    import shutil

    import typer
    import yaml
    from typer.testing import CliRunner

    from grae.cli import eval_cmd
    from grae.train.config import load_config, to_dict

    app = typer.Typer()
    eval_cmd.register(app)

    run = tmp_path / "run"
    cfg = load_config(None, {"model": random_tiny, "output_dir": str(run)})
    shutil.copytree(random_tiny, run / "final")
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    rows = {}
    for memory in ["512", "0.05"]:
        out = tmp_path / f"eval-{memory}"
        result = CliRunner().invoke(app, ["eval", str(run / "final"), "--tasks", "chain_sum", "--exact", "--num-problems",
                                          "3", "-o", str(out), "--exact-memory-mb", memory], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "exact over 298 candidate answers × 3 problems" in result.output
        assert "3 problems, expected" in result.output
        rows[memory] = [json.loads(line) for line in (out / "chain_sum.jsonl").read_text().splitlines()]
    for a, b in zip(rows["512"], rows["0.05"]):
        assert a["question_id"] == b["question_id"] and a["mode_answer"] == b["mode_answer"]
        # tol: p is a probability: rel holds it, the 1e-9 floor only for p < 1e-4 (below any digit reported)
        assert a["p"] == pytest.approx(b["p"], rel=1e-5, abs=1e-9) and a["mass"] == pytest.approx(b["mass"], rel=1e-5)
