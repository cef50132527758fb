"""`grae train`'s held-out table carries the base's format-only oracle where the task has an answer set, and a
line under it says whether the trained model beats it (grae.train.oracle)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.eval.stats import Estimate  # noqa: E402
from grae.train.heldout_table import cell  # noqa: E402
from grae.train.oracle import ORACLE, ORACLE_FILE, oracle_sentence  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402


def small(problems: int = 8, n: int = 8) -> list[str]:
    """A 2-step run of the shipped tiny model with a small held-out evaluation."""
    return ["--max-steps", "2", "--eval.num_problems", str(problems), "--eval.n", str(n), "--no-progress"]


def grae_train(*args: str, timeout: float = 600) -> str:
    done = subprocess.run([sys.executable, "-m", "grae.cli", "train", *args], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=scaled(timeout))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def test_the_tiny_default_run_shows_the_base_format_only_oracle_computed_once(tmp_path):
    """The shipped tiny model on its chain_sum: the oracle's column is reference_counts of the base's exact
    counts, computed here directly, in report.md and on the console, with the line under the table; a --resume
    reuses the exact rows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.eval.exact import reference_counts
    from grae.eval.runner import evaluate_exact
    from grae.eval.stats import passk_estimates
    from grae.presets import resolve_model
    from grae.train.config import load_config

    out = tmp_path / "run"
    log = grae_train("chain-sum", *small(), "--output-dir", str(out))
    cfg = load_config("chain-sum", {"eval.num_problems": 8, "eval.n": 8})
    task = cfg.task.build()
    path = resolve_model("tiny")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    e = cfg.eval
    exact = evaluate_exact(model, AutoTokenizer.from_pretrained(path), task.heldout(8), task, k_max=e.n,
                           settings={"temperature": e.temperature, "top_p": e.top_p, "max_tokens": e.max_tokens})
    oracle = reference_counts(exact.counts, exact.rows)[ORACLE]
    on_disk = [json.loads(line) for line in (out / "eval" / ORACLE_FILE).read_text().splitlines()]
    # tol: the run and this test score the same weights in separate processes (float32 logits); abs for p near 0
    assert [r["p"] for r in on_disk] == pytest.approx(exact.counts.p.tolist(), rel=1e-4, abs=1e-9)
    assert [r["mass"] for r in on_disk] == pytest.approx(exact.counts.mass.tolist(), rel=1e-4)
    expected = passk_estimates(oracle, [1, 2, 4, 8], bootstrap=1000, seed=e.seed)
    assert 0.2 < expected[1].value < 0.4  # the tiny base's wrong mode removed: about twice the base's pass@1

    report = (out / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| held-out |"))
    assert header.endswith(f"| {ORACLE} |")
    row = next(line for line in report.splitlines() if line.startswith("| pass@1 |"))
    assert row.endswith(f"| {cell(expected[1])} |"), (row, expected[1])
    assert f"{ORACLE}: the base with its answers outside the task's format removed" in report
    (note,) = [line for line in report.splitlines() if line.startswith("**Format-only oracle:")]
    assert "this gain is the format fix" in note or "exceeds the oracle's" in note or "no gain" in note
    table = [line for line in log.splitlines() if "pass@1 " in line and "│" in line]
    assert table and table[0].rstrip().rstrip("│").rstrip().endswith(cell(expected[1])), table
    assert note.strip("*") in log  # the same line under the console's table
    assert f"{ORACLE} (the base's exact rows, {ORACLE_FILE}): pass@1=" in log

    written = (out / "eval" / ORACLE_FILE).stat().st_mtime_ns
    again = grae_train("chain-sum", *small(), "--output-dir", str(out), "--resume")
    assert f"{ORACLE} (the base's exact rows, {ORACLE_FILE}, reused): pass@1=" in again
    assert (out / "eval" / ORACLE_FILE).stat().st_mtime_ns == written
    assert next(line for line in (out / "report.md").read_text().splitlines() if line.startswith("| pass@1 |")) == row


def test_the_line_under_the_table_says_format_fix_within_or_below_the_oracle_and_the_excess_above():
    oracle = Estimate(0.271, 0.239, 0.304)
    base = Estimate(0.136, 0.118, 0.154)
    within = oracle_sentence(Estimate(0.260, 0.229, 0.296), oracle, Estimate(-0.011, -0.03, 0.008), base=base)
    assert within == ("Format-only oracle: the trained model's pass@1 26.0 lies within the oracle's interval "
                      "(27.1 [23.9, 30.4]): this gain is the format fix: the base with its wrong output mode removed "
                      "already scores 27.1, with no training.")
    below = oracle_sentence(Estimate(0.20), oracle, base=base)
    assert "26.0" not in below and "pass@1 20.0 lies below the oracle's interval" in below
    assert "this gain is the format fix: the base with its wrong output mode removed already scores 27.1" in below
    at_the_edge = oracle_sentence(Estimate(0.304), oracle, base=base)  # the interval's top is within it
    assert "lies within" in at_the_edge and "format fix" in at_the_edge
    no_gain = oracle_sentence(Estimate(0.130), oracle, base=base)
    assert "no gain over the base (13.6)" in no_gain and "already scores 27.1" in no_gain
    assert "this gain" not in no_gain

    above = oracle_sentence(Estimate(0.352, 0.31, 0.39), oracle, Estimate(0.081, 0.052, 0.110), base=base, k=1)
    assert above == ("Format-only oracle: the trained model's pass@1 35.2 exceeds the oracle's 27.1 [23.9, 30.4] (the "
                     "base with its wrong output mode removed, no training) by +8.1 [+5.2, +11.0] points, paired by "
                     "problem: more than the format fix.")
    unpaired = oracle_sentence(Estimate(0.352), oracle)
    assert "exceeds the oracle's 27.1 [23.9, 30.4]" in unpaired and "by +8.1 points: more than" in unpaired
    assert "format fix: the base" not in above + unpaired


def _exact_rows(path: Path, ps: list[float], by: str, settings: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question_id": f"q{i}", "exact": True, "exact_by": by, "p": p,
                                        "mass": p if by == "gold_completion" else 0.5, "k_max": 4}) + "\n"
                            for i, p in enumerate(ps)))
    path.with_name(path.stem + ".run.json").write_text(json.dumps({**settings, "exact": True}))


def _sampled_rows(path: Path, correct: list[int], n: int, settings: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question_id": f"q{i}", "generation_id": g, "label": g < c}) + "\n"
                            for i, c in enumerate(correct) for g in range(n)))
    path.with_name(path.stem + ".run.json").write_text(json.dumps(settings))


def test_the_table_carries_the_oracle_of_answer_set_rows_of_the_same_base_only(tmp_path):
    from grae.eval.stats import paired_difference
    from grae.train.heldout_table import heldout_table, markdown

    settings = {"identity": "sha256:base", "temperature": 1.0, "top_p": 1.0, "max_tokens": 8}
    _sampled_rows(tmp_path / "eval" / "before.jsonl", [0, 1, 0, 2], 4, settings)
    _sampled_rows(tmp_path / "eval" / "after.jsonl", [1, 3, 2, 4], 4, {**settings, "identity": "run@step2"})
    _exact_rows(tmp_path / "eval" / ORACLE_FILE, [0.1, 0.2, 0.05, 0.3], "answer_set", settings)
    table = heldout_table(tmp_path, {1: 3 / 16, 4: 0.5}, {1: 10 / 16, 4: 1.0}, 4)
    assert list(table.rows) == ["base", "trained", "change", ORACLE]
    assert table.rows[ORACLE][1].value == pytest.approx((0.2 + 0.4 + 0.1 + 0.6) / 4)  # p / mass
    assert table.vs_oracle[1].value == pytest.approx(10 / 16 - 0.325)
    from grae.eval.stats import count_problems
    from grae.train.oracle import oracle_counts

    trained = count_problems([json.loads(x) for x in (tmp_path / "eval" / "after.jsonl").read_text().splitlines()])
    base = count_problems([json.loads(x) for x in (tmp_path / "eval" / "before.jsonl").read_text().splitlines()])
    assert table.vs_oracle == paired_difference(oracle_counts(tmp_path, base), trained, [1, 4], bootstrap=1000)[0]
    assert "exceeds the oracle's" in table.oracle_note() and table.oracle_note() in markdown(table)

    _exact_rows(tmp_path / "eval" / ORACLE_FILE, [0.1, 0.2, 0.05, 0.3], "answer_set", {**settings, "top_p": 0.95})
    assert ORACLE not in heldout_table(tmp_path, {1: 3 / 16, 4: 0.5}, {1: 10 / 16, 4: 1.0}, 4).rows  # other settings
    _exact_rows(tmp_path / "eval" / ORACLE_FILE, [0.1, 0.2, 0.05], "answer_set", settings)
    assert ORACLE not in heldout_table(tmp_path, {1: 3 / 16, 4: 0.5}, {1: 10 / 16, 4: 1.0}, 4).rows  # a problem short
    _exact_rows(tmp_path / "eval" / ORACLE_FILE, [0.1, 0.2, 0.05, 0.3], "gold_completion", settings)
    one_gold = heldout_table(tmp_path, {1: 3 / 16, 4: 0.5}, {1: 10 / 16, 4: 1.0}, 4)  # chain_trace's exact rows
    assert ORACLE not in one_gold.rows and one_gold.oracle_note() is None and "oracle" not in markdown(one_gold)


def test_a_one_gold_task_has_no_oracle_row_and_no_line(tmp_path):
    """chain_trace: exact p is its one gold completion's, with no answer format to renormalise to."""
    from grae.train.config import load_config
    from grae.train.oracle import skip_reason

    cfg = load_config("chain-sum", {"task.name": "chain_trace"})
    task = cfg.task.build()
    assert skip_reason(cfg, task, task.heldout(2)) == ""  # nothing to compute, nothing to say
    out = tmp_path / "run"
    log = grae_train(*small(4, 4), "--task.name", "chain_trace", "--continue-without-signal", "--output-dir", str(out))
    report = (out / "report.md").read_text()
    assert "Held-out pass@k" in report and "oracle" not in report.lower() and "oracle" not in log.lower()
    assert not (out / "eval" / ORACLE_FILE).exists()


def test_an_oracle_too_slow_for_its_budget_is_skipped_in_one_line(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.train.config import load_config
    from grae.train.oracle import base_oracle

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    said: list[str] = []
    for limit, computed in ((0.0, False), (None, True)):
        cfg = load_config(None, {"model": model_dir, "eval.num_problems": 2, "eval.n": 4,
                                 "eval.oracle_max_seconds": limit})
        task = cfg.task.build()
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        found = base_oracle(cfg, model, AutoTokenizer.from_pretrained(model_dir), task.heldout(2), task, tmp_path,
                            said.append, lambda: "sha256:random")
        assert (found is not None) == computed and (tmp_path / "eval" / ORACLE_FILE).exists() == computed
    assert said[0].startswith("format-only oracle: not computed (the base's exact evaluation would take about ")
    assert "more than eval.oracle_max_seconds = 0; null lifts the limit" in said[0]
    assert said[1].startswith(f"{ORACLE} (the base's exact rows, {ORACLE_FILE}): pass@1=")
