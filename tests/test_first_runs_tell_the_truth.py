"""Intervals from the first table, evaluation of what train held out, reports a newcomer reads first.

* every shown interval has width: an estimate at 0 or 1 (or values without spread, two seeds that agree) gets the
  binomial bound at its effective n and says that n; p below 0.005 prints as such; figure bands stay in range;
* ``grae train``'s held-out table carries each pass@k's interval and the change's paired one;
* ``grae eval RUN_DIR`` evaluates the run's own held-out problems with its task and extraction, and ``grae report``
  files the run and that evaluation under one task name;
* the compare report opens with three plain lines; wall times carry the machine and load; the training figure
  shows held-out pass@k in % and the token cap; piped output has plain progress lines and no bar frame.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.compare.stats import (
    crossed_interval,
    curve_bands,
    difference_interval,
    interval_text,
    p_text,
    proportion_interval,
)
from grae.eval.stats import ProblemCounts, edge_bound, paired_difference, passk_estimates
from timeouts import scaled
from tolerances import assert_close_scaled


def counts(correct: list[int], n: int = 8) -> ProblemCounts:
    return ProblemCounts([f"q{i}" for i in range(len(correct))], np.full(len(correct), n), np.array(correct))


# ---- §3: no zero-width interval -------------------------------------------------------------------------------

@pytest.mark.parametrize("correct, value", [(0, 0.0), (8, 1.0)])
def test_an_estimate_at_0_or_1_gets_a_one_sided_bound_at_its_problems(correct, value):
    """8 problems all at 0 % (100 %): [0, 31.2] ([68.8, 100]) with n = 8, not [0, 0]; at that bound a problem
    solved with probability 31.2 % leaves all 8 unsolved with probability exactly 5 % (one-sided 95 %)."""
    for k, e in passk_estimates(counts([correct] * 8), [1, 8]).items():
        assert e.value == value and e.n_eff == 8, k
        bound = e.hi if value == 0 else 1 - e.lo
        assert (e.lo, e.hi) == ((0.0, bound) if value == 0 else (1 - bound, 1.0))
        assert_close_scaled((1 - bound) ** 8, 0.05, rel=1e-12)
        assert f"{100 * bound:.1f}" == "31.2"


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12).flatmap(lambda p: st.tuples(st.lists(st.integers(0, 4), min_size=p, max_size=p),
                                                      st.lists(st.integers(0, 4), min_size=p, max_size=p))))
def test_every_interval_of_a_single_run_has_width_and_holds_its_estimate(pair):
    """Whatever the counts (all 0, all n, all equal, one problem): lo ≤ estimate ≤ hi inside the range and hi > lo,
    for pass@k and for the paired change."""
    a, b = counts(pair[0], 4), counts(pair[1], 4)
    for e in passk_estimates(a, [1, 4], bootstrap=200).values():
        assert 0.0 <= e.lo <= e.value <= e.hi <= 1.0 and e.hi > e.lo
    for d in paired_difference(a, b, [1, 4], bootstrap=200)[0].values():
        assert -1.0 <= d.lo <= d.value <= d.hi <= 1.0
        assert d.hi > d.lo or abs(d.value) not in (0.0, 1.0)  # a constant change in (−1, 1): nothing bounds it from n


def test_two_agreeing_seeds_get_the_binomial_interval_of_what_they_rest_on():
    """Not `pass@8 81.2 [81.2, 81.2]`: training-batch pass@8 of 2 seeds that agree exactly (one column, no
    spread) rests on the 2 seeds × the groups of their windows, and says so."""
    values = np.full((2, 1, 1), 0.8125)
    (iv,) = proportion_interval(values, outcomes=40)
    assert iv.n_eff == 80 and 0 < iv.lo < 0.8125 < iv.hi < 1
    assert interval_text(iv).startswith("81.2 [") and interval_text(iv).endswith("] (n=80)")
    (at_one,) = proportion_interval(np.ones((2, 16, 1)))
    assert at_one.n_eff == 16 and at_one.lo == pytest.approx(1 - edge_bound(16))  # tol: the same float expression
    (plain,) = proportion_interval(np.array([[0.2, 0.9], [0.6, 0.3]])[:, :, None])
    assert plain.n_eff is None and interval_text(plain) == f"50.0 [{100 * plain.lo:.1f}, {100 * plain.hi:.1f}]"


def test_a_change_of_0_on_every_problem_is_bounded_but_decisions_keep_the_crossed_interval():
    zero = np.zeros((2, 8, 1))
    (shown,) = difference_interval(zero)
    assert shown.n_eff == 8 and shown.lo == -shown.hi and shown.hi == pytest.approx(edge_bound(8, 0.975))  # tol: same formula
    (rule,) = crossed_interval(zero)  # the decision rules read this one: unchanged
    assert (rule.lo, rule.hi, rule.n_eff) == (0.0, 0.0, None)


@pytest.mark.parametrize("p, text", [(0.0001, "p<0.005"), (0.00499, "p<0.005"), (0.03, "p=0.03"), (0.5, "p=0.50")])
def test_p_values_below_what_two_decimals_show_print_as_below(p, text):
    assert p_text(p) == text and p_text(p, "p_holm") == text.replace("p", "p_holm", 1)


def test_dynamics_bands_stay_inside_each_quantitys_range():
    """A plain band of 2 seeds can reach below 0 (a reward band at −0.21). Shares and a 0/1 reward stay in [0, 1],
    entropy and advantage mass above 0; a shaped reward outside [0, 1] keeps the plain band."""
    from grae.compare.results import JobResult
    from grae.compare.training import dynamics_bands

    rng = np.random.default_rng(0)

    def job(level: float) -> JobResult:
        metrics = {"reward_mean": list(np.clip(level + rng.normal(0, 0.05, 30), 0, 1)),
                   "entropy": list(np.abs(rng.normal(0.05 + level, 0.05, 30))),
                   "frac_all_wrong": list(np.clip(1 - level + rng.normal(0, 0.05, 30), 0, 1)),
                   "adv_neg_mass": list(np.abs(rng.normal(0.02, 0.03, 30)))}
        return JobResult(final=None, metrics=metrics, train_seconds=1.0, steps=30, generated=None)

    results = SimpleNamespace(jobs={"grpo": {0: job(0.02), 1: job(0.3)}})
    plain = curve_bands([results.jobs["grpo"][s].series("reward_mean") for s in (0, 1)])
    assert plain[1].min() < 0  # what the figure drew before
    bands = dynamics_bands(results)
    for key in ("reward_mean", "frac_all_wrong"):
        mean, lo, hi, share = bands[key]["grpo"]
        assert share and (lo >= 0).all() and (hi <= 1).all() and (lo <= mean + 1e-12).all() and (mean <= hi + 1e-12).all()
    for key in ("entropy", "adv_neg_mass"):
        mean, lo, hi, share = bands[key]["grpo"]
        assert not share and (lo >= 0).all() and (lo <= mean + 1e-12).all() and (mean <= hi + 1e-12).all()
    shaped = SimpleNamespace(jobs={"m": {0: JobResult(None, {"reward_mean": [-1.0, 2.0, 0.5]}, 1.0, 3, None),
                                         1: JobResult(None, {"reward_mean": [0.0, 1.5, 3.0]}, 1.0, 3, None)}})
    assert dynamics_bands(shaped)["reward_mean"]["m"][3] is False


# ---- §3: grae train's held-out table ---------------------------------------------------------------------------

def _rows(path: Path, correct: list[int], n: int, task: str = "chain_sum") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question_id": f"q{i}", "generation_id": g, "task": task, "label": g < c}) + "\n"
                            for i, c in enumerate(correct) for g in range(n)))


def test_the_train_table_gives_each_pass_at_k_and_the_change_an_interval_from_the_rows(tmp_path):
    from grae.train.heldout_table import heldout_table, markdown

    before, after = [0, 0, 1, 0, 0, 0, 0, 0], [0, 0, 1, 2, 0, 0, 0, 0]
    _rows(tmp_path / "eval" / "before.jsonl", before, 4)
    _rows(tmp_path / "eval" / "after.jsonl", after, 4)
    table = heldout_table(tmp_path, {1: 1 / 32, 4: 0.125}, {1: 3 / 32, 4: 0.25}, 4)
    assert (table.problems, table.n, list(table.rows)) == (8, 4, ["base", "trained", "change"])
    expected = paired_difference(counts(before, 4), counts(after, 4), [1, 4], bootstrap=1000)[0]
    assert table.rows["change"] == expected  # the statistics of grae passk --compare on the same rows
    base, trained, change = table.cells(4)
    assert base.startswith("12.5 [") and trained.startswith("25.0 [") and change.startswith("+12.5 [+")
    text = markdown(table)
    assert "| pass@4 | 12.5 [" in text and "bootstrap over the 8 held-out problems, n = 4 samples each" in text
    _rows(tmp_path / "eval" / "after.jsonl", before, 4)  # no change on any problem: bounded, with its n
    same = heldout_table(tmp_path, {1: 1 / 32, 4: 0.125}, {1: 1 / 32, 4: 0.125}, 4)
    assert same.cells(1)[2] == f"+0.0 [{-100 * edge_bound(8, 0.975):+.1f}, {100 * edge_bound(8, 0.975):+.1f}] (n=8)"
    assert "(n=N): no spread to resample" in same.caption()
    (tmp_path / "eval" / "after.jsonl").unlink()  # rows gone: the values alone, said so
    bare = heldout_table(tmp_path, {1: 0.5}, {1: 0.75}, 4)
    assert bare.cells(1) == ["50.0", "75.0", "+25.0"] and bare.caption().startswith("no held-out rows on disk")


def test_the_training_figure_draws_held_out_pass_at_k_in_percent_and_the_token_cap(tmp_path):
    from grae.train.report import CAP_LABEL, panel_series, plot_training_curves

    rows = [{"step": s, "reward_mean": 0.1, "completion_length": 40 + s} for s in range(1, 5)]
    panels = panel_series(rows, {1: 0.25}, {1: 0.5}, steps=4, cap=48)
    length = next(series for title, series, _ in panels if title.startswith("completion length"))
    assert length[CAP_LABEL] == [(1.0, 48.0), (4.0, 48.0)] and length["mean"][-1] == (4.0, 44.0)
    assert panels[-1][1] == {"pass@1": [(0.0, 25.0), (4.0, 50.0)]} and panels[-1][2] == (0.0, 100.0)
    assert plot_training_curves(rows, tmp_path / "t.png", "run: grpo on x", {1: 0.25}, {1: 0.5}, 4, cap=48).exists()


# ---- §4: grae eval RUN_DIR and grae report -----------------------------------------------------------------

def _fake_run(root: Path, *, final: bool = True) -> Path:
    run = root / "runs" / "mygsm"
    (run / "eval").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "config.yaml").write_text(yaml.safe_dump({
        "model": "tiny", "task": {"name": "local:data/mygsm.jsonl", "params": {"answer_extraction": "last_number"}},
        "eval": {"enabled": True, "num_problems": 6, "n": 4, "temperature": 1.0, "top_p": 1.0, "max_tokens": 8,
                 "batch_size": 512, "seed": 1234}}))
    if final:
        (run / "final").mkdir()
    return run


def test_a_run_directory_names_its_held_out_problems_task_and_sampling(tmp_path):
    from grae.eval.jobs import model_label
    from grae.eval.run_heldout import RunHeldoutError, read_run, run_directory

    run = _fake_run(tmp_path)
    assert run_directory(run) == run == run_directory(run / "final") and run_directory(tmp_path) is None
    held = read_run(run)
    assert (held.model, held.task_name, held.task_params) == (run / "final", "local:data/mygsm.jsonl",
                                                              {"answer_extraction": "last_number"})
    assert held.settings == {"n": 4, "temperature": 1.0, "top_p": 1.0, "max_tokens": 8, "seed": 1234, "num_problems": 6,
                             "batch_size": 512}
    assert model_label(str(run / "final")) == "mygsm"  # figures and the default output are named by the run
    with pytest.raises(RunHeldoutError, match="has no final/ model .*--resume"):
        read_run(_fake_run(tmp_path / "other", final=False))


def test_eval_without_tasks_takes_a_run_directory_and_refuses_anything_else_in_one_line(tmp_path):
    import typer
    from typer.testing import CliRunner

    from grae.cli import eval_cmd

    app = typer.Typer()
    eval_cmd.register(app)
    app.command("noop", hidden=True)(lambda: None)

    def run(*args) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["eval", *map(str, args)])
        return result.exit_code, " ".join(result.output.split())

    code, out = run(tmp_path)
    assert code == 2 and "--tasks is required: " in out and "not a grae train run directory" in out
    code, out = run(_fake_run(tmp_path, final=False))
    assert code == 2 and "has no final/ model (training has not finished)" in out and "--resume" in out


def test_report_files_a_run_and_an_eval_of_its_file_under_one_task(tmp_path):
    from grae.eval.records import file_stem, task_label
    from grae.eval.report import write_report

    assert task_label("local:/data/x/mygsm.jsonl") == "mygsm" == file_stem("local:mygsm.jsonl")
    assert task_label("chain_sum") == "chain_sum"
    run = _fake_run(tmp_path)
    _rows(run / "eval" / "before.jsonl", [0, 1, 0, 2], 4, task="local:data/mygsm.jsonl")
    _rows(run / "eval" / "after.jsonl", [1, 1, 0, 2], 4, task="local:data/mygsm.jsonl")
    _rows(tmp_path / "eval" / "mygsm" / "mygsm.jsonl", [1, 2, 0, 2], 4, task="mygsm")
    report = write_report([run, tmp_path / "eval" / "mygsm"], tmp_path / "report")
    assert list(report.curves) == ["mygsm"]
    assert set(report.curves["mygsm"]) == {"runs/mygsm (base)", "runs/mygsm", "eval/mygsm"}
    assert report.notes["mygsm"] == "4 problems, the same in every input"


# ---- §5: the compare report's first lines and its wall times ---------------------------------------------------

def test_the_compare_report_opens_with_three_plain_lines_and_times_carry_the_machine(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.compare.grid import load_compare_config
    from grae.compare.report import write_compare_report
    from test_compare_report import fill_study, write_study

    cfg = load_compare_config(write_study(tmp_path, [0, 1]))
    fill_study(cfg, np.random.default_rng(1))
    for job in cfg.jobs():  # what grae train records beside its wall time
        summary = job.output_dir / "eval" / "summary.json"
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "generated_completions": 64,
                                       "device": "cpu (Test CPU, 1 thread)", "load": "load 5.2 on 2 CPUs"}))
    lines = write_compare_report(cfg).read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    run, shows, concludes = lines[2:5]
    assert run.startswith("- **Run:** 3 methods × 2 seeds") and "30 held-out problems" in run and "`grpo`" in run
    assert shows.startswith("- **Shows:** change against grpo") and "arm_a pass@1 +" in shows
    assert concludes.startswith("- **Concludes:** a pilot: 2 seeds") and "nothing here says one method is better" in concludes
    text = "\n".join(lines)
    assert "- trained by: 6 on cpu (Test CPU, 1 thread), load 5.2 on 2 CPUs" in text
    assert "| 4.0 | 64 | 1 | cpu (Test CPU, 1 thread), load 5.2 on 2 CPUs |" in text
    assert "| ran on (load at the end) |" in text and "compare methods' times only where they ran on the same machine" in text
    assert "p=0.00 " not in text and "p_holm=0.00 " not in text


# ---- the newcomer path on the tiny model -------------------------------------------------------------------------

def test_own_file_train_then_eval_run_dir_then_report_on_the_tiny_model(tmp_path):
    """A 30-problem GSM-style file: train 2 steps (piped: plain progress lines, no bar frame, the table with
    intervals), then `grae eval RUN_DIR` samples the same held-out problems as the run did (same pass@k as the
    run's own after-evaluation), and `grae report` files both under one task."""
    rows = [{"question": f"State the final answer to the following arithmetic problem: {a} + {b} =",
             "answer": f"{a} plus {b} makes {a + b}.\n#### {a + b}"} for a, b in ((a, a % 5 + 1) for a in range(1, 31))]
    (tmp_path / "mygsm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "100"}

    def grae(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "grae.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=scaled(300), env=env)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return done.stdout + done.stderr

    trained = grae("train", "--model", "tiny", "--task.name", "mygsm.jsonl", "--task.params.answer_extraction",
                   "last_number", "--task.params.prompt_style", "plain", "--task.params.instruction", "Answer:",
                   "--task.params.heldout_size", "6", "--estimator", "grpo", "--max-steps", "2", "--eval.n", "4",
                   "--output-dir", "runs/mygsm")
    assert "held-out before: 24/24 samples" in trained and "train step 2/2" in trained  # plain lines,
    assert not re.search(r"(train|held-out \w+) +━", trained)  # and no progress-bar frame
    assert "bootstrap over the 6 held-out problems, n = 4 samples each" in " ".join(trained.split())
    summary = json.loads((tmp_path / "runs" / "mygsm" / "eval" / "summary.json").read_text())
    assert summary["load"].startswith("load ") and " CPU" in summary["load"]
    evaluated = grae("eval", "runs/mygsm")
    assert "its final model on its 6 held-out problems of mygsm.jsonl (extraction last_number)" in evaluated
    run_eval = tmp_path / "runs" / "mygsm" / "eval" / "final"  # beside the run, not in the working directory
    assert f"→ {Path('runs/mygsm/eval/final')}" in " ".join(evaluated.split()) or f"→ {run_eval}" in evaluated
    assert not (tmp_path / "eval").exists()
    (ours,) = json.loads((run_eval / "summary.json").read_text())["tasks"].values()
    assert ours["task"] == "local:mygsm.jsonl" and ours["num_problems"] == 6 and ours["n"] == 4
    assert {int(k): v for k, v in ours["pass_at_k"].items()} == {int(k): v for k, v in summary["after"].items()}
    from grae.train.heldout_table import heldout_table  # and the same intervals as the run's own table

    table = heldout_table(tmp_path / "runs" / "mygsm", {int(k): v for k, v in summary["before"].items()},
                          {int(k): v for k, v in summary["after"].items()}, 4, seed=1234)
    assert {int(k): v for k, v in ours["ci95"].items()} == {k: [e.lo, e.hi] for k, e in table.rows["trained"].items()}
    reported = grae("report", "runs/mygsm", "runs/mygsm/eval/final")
    assert (tmp_path / "runs" / "mygsm" / "report" / "report.md").is_file() and not (tmp_path / "report").exists()
    assert "## mygsm" in reported and "6 problems, the same in every input" in reported
