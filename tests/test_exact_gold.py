"""Exact evaluation of one-gold tasks: ``grae eval --exact`` and ``grae compare`` with ``eval: {exact:
true}`` teacher-force a ``chain_trace`` problem's gold completion (:func:`grae.eval.gold.gold_probs`) where an
answer-set task enumerates its answers; one code path (:func:`grae.eval.exact.run_exact`) chooses by task."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from timeouts import scaled
from tolerances import assert_close_scaled

#: short chains, so the random tiny model's gold p is small but far from underflow (the equality tests mean something)
TRACE = {"name": "chain_trace", "params": {"generator": "chain_range", "min_terms": 2, "max_terms": 3, "max_value": 9,
                                          "prompt_style": "plain"}}


def _load(path):
    from grae.eval.backends import load_hf

    model, tokenizer, _ = load_hf(str(path), device="cpu", dtype="float32")
    return model, tokenizer


def _rows(path) -> dict[str, dict]:
    return {r["question_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_grae_eval_exact_on_chain_trace_is_the_gold_probability(tmp_path):
    """`grae eval tiny --tasks chain_trace --exact`: one row per problem whose p is gold_probs' at the same settings,
    marked exact_by gold_completion, with no reference policies (p / mass would be 1)."""
    import typer
    from typer.testing import CliRunner

    from grae.cli import eval_cmd
    from grae.data import get_task
    from grae.eval.gold import gold_probs

    app = typer.Typer()
    eval_cmd.register(app)
    params = [arg for key, value in TRACE["params"].items() for arg in ("--task-param", f"{key}={value}")]
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "tiny", "--tasks", "chain_trace", *params, "--exact", "--num-problems", "5",
                                      "--n", "16", "--temperature", "0.7", "--top-p", "0.95", "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "each problem's gold completion teacher-forced (5 problems)" in result.output
    assert "no format-only oracle" in result.output
    rows = _rows(out / "chain_trace.jsonl")
    task = get_task("chain_trace", **TRACE["params"])
    examples = task.heldout(5)
    assert list(rows) == [str(e["question_id"]) for e in examples]
    model, tokenizer = _load("tiny")
    summary = json.loads((out / "chain_trace.summary.json").read_text())
    direct = gold_probs(model, tokenizer, examples, task, temperature=0.7, top_p=0.95, max_tokens=summary["max_tokens"])
    assert direct.max() > 1e-12  # the comparison is of real numbers, not of zeros
    p = np.array([r["p"] for r in rows.values()])
    with np.errstate(divide="ignore"):  # top-p 0.95 may drop a gold token: p = 0 (log −inf) on both sides
        assert_close_scaled(np.log(p), np.log(direct), rel=1e-9)  # tol: the same batched forward; only a JSON round trip
    assert all(r["exact"] and r["exact_by"] == "gold_completion" and r["mass"] == r["p"] and r["k_max"] == 16
               for r in rows.values())
    assert summary["exact_by"] == "gold_completion" and "references" not in summary
    assert summary["pass_at_k"]["1"] == pytest.approx(float(p.mean()), rel=1e-12)  # tol: one mean of the same floats


def test_exact_refuses_a_task_with_neither_an_answer_set_nor_one_gold_completion(tmp_path):
    from grae.eval.jobs import EvalError, plan_tasks

    with pytest.raises(EvalError, match="task 'gcd' declares no finite answer set and no one gold completion"):
        plan_tasks("tiny", ["gcd"], exact=True, output=tmp_path / "e", log=lambda _: None)


def test_an_answer_set_tasks_rows_still_enumerate_and_keep_their_references():
    """The answer-set branch is untouched by the choice: rows say exact_by answer_set and the oracle is p / mass."""
    from grae.data import get_task
    from grae.eval.exact import BY_ANSWER_SET, BY_GOLD, exact_by, reference_counts
    from grae.eval.stats import count_problems

    assert exact_by(get_task("chain_sum", max_digits=1, min_terms=2, max_terms=2)) == BY_ANSWER_SET
    assert exact_by(get_task(TRACE["name"], **TRACE["params"])) == BY_GOLD
    rows = [{"question_id": "a", "exact": True, "p": 0.2, "mass": 0.5}, {"question_id": "b", "exact": True, "p": 0.1,
                                                                          "mass": 0.4}]
    oracle = reference_counts(count_problems(rows), rows)["format-only oracle"]
    assert_close_scaled(oracle.p, [0.4, 0.25], rel=1e-12)  # tol: one division
    gold = [{**r, "exact_by": BY_GOLD, "mass": r["p"]} for r in rows]
    assert reference_counts(count_problems(gold), gold) == {}


def _study(tmp_path, model_dir, **extra) -> dict:
    study = {
        "base": "chain-sum",
        "overrides": {"model": model_dir, "max_steps": 2, "save_steps": 2, "task": {**TRACE, "train_size": 50},
                      "continue_without_signal": True,  # a random model: its base has no signal
                      "trl": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 8},
                      "eval": {"num_problems": 4, "n": 16, "batch_size": 16, "max_tokens": 16, "temperature": 1.0,
                               "top_p": 1.0}},
        "methods": {"grpo": {"estimator": "grpo"}, "ngrpo": {"estimator": "ngrpo"}},
        "seeds": [0], "baseline": "grpo", "output_dir": str(tmp_path / "compare"), "bootstrap": 200,
        "frontier": [0.5, 1.0], "eval": {"exact": True, "num_problems": 4, "n": 16},
    }
    study.update(extra)
    return study


def test_compare_config_checks_exact_for_one_gold_tasks(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import ConfigError, load_compare_config

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_study(tmp_path, "tiny")))
    load_compare_config(path)  # chain_trace with eval.exact loads
    for extra, match in [({"paired_against": ["base", "oracle"]}, "paired_against: oracle: the task's exact p teacher"),
                         ({"rule": {"keeps_passk": {"k": 16, "pass1_margin_vs_baseline": -5, "passk_margin_vs_base": -5,
                                                    "baseline_pass1_margin_vs_oracle": 3}}},
                          "baseline_pass1_margin_vs_oracle: the task's exact p teacher-forces")]:
        path.write_text(yaml.safe_dump(_study(tmp_path, "tiny", **extra)))
        with pytest.raises(ConfigError, match=match):
            load_compare_config(path)
    gcd = _study(tmp_path, "tiny", eval=None, frontier_eval={"exact": True})
    gcd["overrides"]["task"] = {"name": "gcd"}
    path.write_text(yaml.safe_dump(gcd))
    with pytest.raises(ConfigError, match="frontier_eval.exact: task 'gcd' declares no finite answer set"):
        load_compare_config(path)  # frontier_eval's exact is checked too, not only eval's


def test_compare_evaluates_every_chain_trace_checkpoint_exactly_against_the_base(tmp_path):
    """2 arms × 1 seed × 2 steps on chain_trace, frontier [0.5, 1.0], eval exact: every checkpoint's and the base's p
    per problem are gold_probs of those weights, and the report's paired Δ pass@1 vs the base is their mean difference."""
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import load_compare_config
    from grae.data import get_task
    from grae.eval.gold import gold_probs
    from grae.train.callbacks import snapshot_path
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_study(tmp_path, model_dir)))
    run = subprocess.run([sys.executable, "-m", "grae.cli", "compare", str(path)], capture_output=True, text=True,
                         timeout=scaled(600))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cfg = load_compare_config(path)
    out = cfg.output_dir
    task = get_task(TRACE["name"], **TRACE["params"])
    examples = task.heldout(4)
    e = cfg.train_config(cfg.jobs()[0]).eval

    def direct(weights):
        model, tokenizer = _load(weights)
        return gold_probs(model, tokenizer, examples, task, temperature=e.temperature, top_p=e.top_p,
                          max_tokens=e.max_tokens)

    base_rows = _rows(out / "base" / "frontier.jsonl")
    base = np.array([base_rows[str(x["question_id"])]["p"] for x in examples])
    assert base.max() > 1e-12 and all(r["exact_by"] == "gold_completion" for r in base_rows.values())
    assert_close_scaled(np.log(base), np.log(direct(model_dir)), rel=1e-6)  # tol: float32 logits, log p ~ -10
    summary = json.loads((out / "summary.json").read_text())
    report = (out / "report.md").read_text()
    for job in cfg.jobs():
        for step, weights in [(1, snapshot_path(job.output_dir, 1)), (2, job.output_dir / "final")]:
            curve = json.loads((job.output_dir / "eval" / "frontier" / f"step-{step}.curve.json").read_text())
            assert curve["settings"] == {"num_problems": 4, "n": 16, "exact": True}
            p = np.array([curve["exact"][str(x["question_id"])][0] for x in examples])
            assert_close_scaled(np.log(p), np.log(direct(weights)), rel=1e-6)  # tol: float32 logits, log p ~ -10
        final = p  # step 2 = 100 %: what the report pairs against the base
        # tol: a float64 mean of differences of the curve file's floats; the summary's bootstrap mean is the point mean
        assert summary["vs_base"][job.method]["1"]["mean"] == pytest.approx(float(np.mean(final - base)), abs=1e-12)
    assert "Paired difference vs the base model" in report and "format-only oracle" not in report
    assert set(json.loads((out / "frontier.json").read_text())["methods"]) == {"grpo", "ngrpo"}
