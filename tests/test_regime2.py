"""Regime R2: its split properties, the memorisation diagnostics and the checkpoint frontier."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from grae.compare.frontier import check_fractions, frontier_steps, keep_steps
from grae.compare.frontier_report import above_frontier
from grae.data import get_task
from grae.data.base import question_key
from grae.data.procedural import stratified_interleave
from grae.eval.diagnostics import answer_leakage, normalise_answer, train_heldout_gap, train_pass1
from grae.train.config import load_config


def test_regime2_split_is_large_disjoint_stratified_and_at_most_two_epochs():
    cfg = load_config("regime2")
    assert cfg.model == "tiny-ladder" and cfg.task.params["max_terms"] == 4
    task = get_task(cfg.task.name, **cfg.task.params)
    heldout = task.heldout()
    strata = Counter(task.stratum(e) for e in heldout)
    # 2-4 terms x 1-2 digits, the same number of held-out problems in each, >= 500 in all
    assert set(strata) == {(t, d) for t in (2, 3, 4) for d in (1, 2)}
    assert len(set(strata.values())) == 1 and len(heldout) >= 500
    assert cfg.eval.num_problems >= 500 and cfg.eval.num_problems % len(strata) == 0
    prefix = Counter(task.stratum(e) for e in task.heldout(cfg.eval.num_problems // 10))
    assert len(set(prefix.values())) == 1 and set(prefix) == set(strata)  # every prefix is stratified too
    train = task.train(cfg.task.train_size, seed=cfg.seed)
    keys = {question_key(e["question"]) for e in train}
    assert len(keys) == len(train) >= 8000  # distinct
    assert not keys & {question_key(e["question"]) for e in heldout}  # disjoint
    assert not keys & task.heldout_questions()
    prompts_per_step = cfg.trl["per_device_train_batch_size"] // cfg.trl["num_generations"]
    assert cfg.max_steps * prompts_per_step / cfg.task.train_size <= 2  # epochs


def test_ladder_recipe_skips_the_regime2_heldout_split():
    from grae.tiny.build import RECIPES, excluded_questions
    from grae.tiny.tasks import TinyTask

    cfg = load_config("regime2")
    recipe = RECIPES["ladder"]
    params = {k: v for k, v in cfg.task.params.items() if k not in ("prompt_style",) + tuple(recipe["heldout_params"])}
    assert recipe["task_kwargs"] == params and recipe["calib_steps"] == 0  # no guess stage: no removable format mode
    assert {k: cfg.task.params[k] for k in recipe["heldout_params"]} == recipe["heldout_params"]
    task = get_task(cfg.task.name, **cfg.task.params)
    excluded = excluded_questions(TinyTask(cfg.task.name, dict(recipe["task_kwargs"])), recipe["heldout_params"])
    assert task.heldout_questions() <= excluded


def test_stratified_heldout_refuses_a_stratum_too_small():
    with pytest.raises(ValueError, match="heldout_strata|fewer distinct"):
        get_task("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2, heldout_size=600,
                 heldout_strata=["num_digits"]).heldout()  # 1-digit 2-term sums: only 200 distinct questions
    with pytest.raises(ValueError, match="heldout_strata"):
        get_task("chain_sum", heldout_strata="num_terms")


@given(st.lists(st.integers(0, 6), max_size=5), st.integers(0, 30))
def test_stratified_interleave_prefixes_are_balanced(sizes, n):
    groups = [[(g, i) for i in range(size)] for g, size in enumerate(sizes)]
    out = stratified_interleave(groups)
    assert sorted(out) == sorted(x for g in groups for x in g)
    taken = Counter(g for g, _ in out[:n])
    for g, size in enumerate(sizes):
        assert [i for h, i in out if h == g] == list(range(size))  # each group keeps its order
        for h, other in enumerate(sizes):  # a group is never more than one ahead of one that still has items
            if taken[h] < other:
                assert taken[g] <= taken[h] + 1


def test_answer_leakage_and_gap():
    rows = [{"question_id": "a", "label": False, "pred_answer": "12"},   # wrong, a training answer: leaked
            {"question_id": "a", "label": False, "pred_answer": "+012"},  # same number: leaked
            {"question_id": "a", "label": True, "pred_answer": "7"},     # right: not counted
            {"question_id": "b", "label": False, "pred_answer": "13"},   # wrong, not a training answer
            {"question_id": "b", "label": False, "pred_answer": None}]   # nothing parsed: not counted
    leak = answer_leakage(rows, ["12", "7.0", 5])
    assert (leak["wrong"], leak["leaked"]) == (3, 2) and leak["rate"] == pytest.approx(2 / 3)
    assert math.isnan(answer_leakage([rows[2]], ["7"])["rate"])
    assert normalise_answer(" 7.0 ") == "7" and normalise_answer("x") == "x" and normalise_answer("") is None
    metrics = [{"reward_mean": v} for v in [0.0] * 18 + [0.5, 0.7]]  # last 10 % of 20 steps: 2 steps
    assert train_pass1(metrics) == pytest.approx(0.6)
    gap = train_heldout_gap(metrics, rows)  # held-out pass@1: problem a 1/3, problem b 0 -> 1/6
    assert gap["heldout_pass1"] == pytest.approx(1 / 6) and gap["gap"] == pytest.approx(0.6 - 1 / 6)


def test_frontier_steps_and_distance():
    assert frontier_steps(1000, [0.1, 0.25, 1.0]) == {0.1: 100, 0.25: 250, 1.0: 1000}
    assert keep_steps(1000, [0.1, 0.25, 0.5, 0.75, 1.0]) == [100, 250, 500, 750]  # 100 % is final/
    assert keep_steps(3, [0.1, 1.0]) == [1]
    assert check_fractions([1.0, 0.5, 0.5]) == [0.5, 1.0]
    for bad in ([0], [1.5], "0.5", [True]):
        with pytest.raises(ValueError, match="frontier"):
            check_fractions(bad)
    path = [(0.10, 0.80), (0.20, 0.70), (0.30, 0.50)]
    assert above_frontier((0.25, 0.65), path) == pytest.approx(0.05)
    assert above_frontier((0.15, 0.70), path) == pytest.approx(-0.05)
    assert above_frontier((0.35, 0.90), path) is None  # beyond the frontier's pass@1: not comparable


def test_compare_frontier_two_fractions_end_to_end(tmp_path):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from test_compare import compare, study_config
    from tiny_model import build_random_tiny

    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    cfg = study_config(model_dir, tmp_path / "cmp", methods={"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}},
                       seeds=[0], bootstrap=50, frontier=[0.5, 1.0], frontier_eval={"num_problems": 3, "n": 2})
    del cfg["title"]
    cfg["overrides"].update(max_steps=4, save_steps=4, task={"train_size": 40})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    done = compare(path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "cmp"
    for method in ("grpo", "nsr"):
        job = out / "jobs" / method / "seed0"
        assert yaml.safe_load((job / "job.yaml").read_text())["keep_steps"] == [2]
        assert (job / "snapshots" / "step-2" / "config.json").exists()  # the 50 % checkpoint is kept
        for step in (2, 4):
            curve = json.loads((job / "eval" / "frontier" / f"step-{step}.curve.json").read_text())
            assert len(curve["counts"]) == 3 and all(n == 2 for n, _ in curve["counts"].values())
    frontier = json.loads((out / "frontier.json").read_text())
    assert frontier["k_max"] == 2 and set(frontier["methods"]) == {"grpo", "nsr"}
    assert set(frontier["methods"]["grpo"]) == {"0.5", "1.0"} and frontier["base"] is not None
    report = (out / "report.md").read_text()
    assert "early-stopping frontier" in report and "| nsr |" in report and (out / "frontier.png").stat().st_size > 0
    assert "Memorisation diagnostics" in report and "answer leakage" in report

    # the same study with `eval: {exact: true}`: every model re-evaluated exactly, nothing retrained
    trained = {p: p.stat().st_mtime for p in out.glob("jobs/*/seed0/eval/summary.json")}
    cfg.pop("frontier_eval")
    cfg["eval"] = {"exact": True, "num_problems": 3}
    path.write_text(yaml.safe_dump(cfg))
    done = compare(path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 of 2 jobs already finished; running 2" in done.stdout  # finished, but not yet evaluated exactly
    assert {p: p.stat().st_mtime for p in out.glob("jobs/*/seed0/eval/summary.json")} == trained
    for step in (2, 4):
        rows = [json.loads(line) for line in
                (out / "jobs" / "grpo" / "seed0" / "eval" / "frontier" / f"step-{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 3 and all(r["exact"] and 0 <= r["p"] <= r["mass"] <= 1 + 1e-9 for r in rows)
        curve = json.loads((out / "jobs" / "grpo" / "seed0" / "eval" / "frontier" / f"step-{step}.curve.json").read_text())
        assert curve["settings"] == {"num_problems": 3, "n": 4, "exact": True}
        assert [p for p, _ in curve["exact"].values()] == pytest.approx([r["p"] for r in rows])
    summary = json.loads((out / "summary.json").read_text())
    final_p1 = sum(r["p"] for r in rows) / 3  # grpo seed 0 at 100 %: the report's grpo pass@1
    assert summary["methods"]["grpo"]["1"]["mean"] == pytest.approx(final_p1)
    base_rows = [json.loads(line) for line in (out / "base" / "frontier.jsonl").read_text().splitlines()]
    assert all(r["exact"] for r in base_rows)
    assert summary["base"]["1"]["mean"] == pytest.approx(sum(r["p"] for r in base_rows) / 3)
    report = (out / "report.md").read_text()
    assert "exact pass@k by answer enumeration" in report and "early-stopping frontier" in report
    assert "| reference: format-only oracle (exact) |" in report and "near-miss guesser (w = 20)" in report
    again = compare(path)
    assert again.returncode == 0 and "2 of 2 jobs already finished; running 0" in again.stdout

    # jobs without a sampled held-out evaluation (run with eval.enabled: false, evaluated exactly by compare):
    # the report still writes, and says why the memorisation diagnostics are missing
    for after in out.glob("jobs/*/seed0/eval/after.jsonl"):
        after.unlink()
    only = compare(path, "--report-only")
    assert only.returncode == 0, only.stdout[-3000:] + only.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert "Not computed: no job has a sampled held-out evaluation" in report and "| nsr |" in report


def test_ladder_build_is_deterministic_and_the_shipped_base_has_no_guess_mode(tmp_path):
    from safetensors.torch import load_file

    from grae.presets import resolve_model
    from grae.tiny import build_tiny

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, batch_size=8,
                 warmup_steps=2, tokenizer_corpus_per_task=200)
    a, b = (build_tiny(tmp_path / d, seed=0, sft_steps=3, evaluate=False, log=lambda *_: None, num_threads=1,
                       recipe_name="ladder", **small) for d in ("a", "b"))
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert all(bool((wa[k] == wb[k]).all()) for k in wa)
    info = json.loads((a / "build_info.json").read_text())
    assert info["recipe_name"] == "ladder" and info["recipe"]["calib_steps"] == 0
    shipped = json.loads((Path(resolve_model("tiny-ladder")) / "build_info.json").read_text())
    assert shipped["recipe_name"] == "ladder" and shipped["recipe"]["task_kwargs"]["max_terms"] == 4
    assert shipped["recipe"]["calib_steps"] == 0 and shipped["torch_threads"] == 1  # no `~` guess stage
    with pytest.raises(ValueError, match="recipe_name"):
        build_tiny(tmp_path / "c", recipe_name="nope")


def test_regime4_recipe_is_the_gate_attempt_it_names():
    """`grae train regime4` is the testbed of studies/design/gate_r4.yaml (same base, data, steps, rate), and the
    shipped `tiny-carry` is the `ladder-carry` recipe's build (its recorded recipe equals the named one)."""
    from dataclasses import asdict
    from pathlib import Path

    from grae.presets import resolve_model
    from grae.tiny.build import RECIPES, TinyRecipe

    cfg = load_config("regime4")
    assert cfg.model == "tiny-carry" and cfg.task.train_size == 4096 and cfg.max_steps == 512
    design = yaml.safe_load((Path(__file__).resolve().parent.parent / "studies/design/gate_r4.yaml").read_text())
    method = next(iter(design["methods"].values()))
    assert cfg.trl["learning_rate"] == method["trl"]["learning_rate"]
    assert cfg.task.train_size == design["overrides"]["task.train_size"]
    assert cfg.max_steps == design["overrides"]["max_steps"]
    assert cfg.task.params == load_config("regime2").task.params  # the same ladder and held-out split
    info = json.loads((Path(resolve_model("tiny-carry")) / "build_info.json").read_text())
    assert info["recipe_name"] == "ladder-carry"
    expected = json.loads(json.dumps(asdict(TinyRecipe(seed=0, **RECIPES["ladder-carry"]))))
    defaults = json.loads(json.dumps(asdict(TinyRecipe())))
    # fields added to TinyRecipe after the build (answer_style) are absent from it and take their defaults
    assert {**{k: defaults[k] for k in set(expected) - set(info["recipe"])}, **info["recipe"]} == expected
