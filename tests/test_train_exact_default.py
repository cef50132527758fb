"""The embedded default: the two-modes testbed with exact held-out pass@k per stratum against the base's temperature
frontier (grae.train.exact_eval), the chain-sum recipe beside it, and the pieces they stand on: shipped band names,
every temperature from one forward pass, the exact base-signal check, the eval.exact checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from grae.train.config import ConfigError, load_config  # noqa: E402
from timeouts import scaled  # noqa: E402

#: a short run of the default: 2 steps of 2 prompts × 8, 40 held-out problems (both strata), a 3-point grid
SHORT = ["--max-steps", "2", "--save-steps", "2", "--trl.per_device_train_batch_size", "16", "--eval.num_problems", "40",
         "--eval.n", "64", "--eval.temperatures", "[0.5, 1.0, 1.2]", "--no-progress"]


def test_no_config_is_the_two_modes_testbed_and_chain_sum_keeps_the_tiny_recipe():
    default, chain_sum = load_config(None), load_config("chain-sum")
    assert (default.model, default.task.name, default.task.params["totals"], default.estimator) == \
        ("tiny-two-modes", "chain_trace", "in_range", "agrae")
    assert default.estimator_params == {"alpha": 1.0} and default.task.train_subset == "tiny-two-modes-band-train"
    assert (default.trl["learning_rate"], default.trl["per_device_train_batch_size"], default.trl["num_generations"]) \
        == (1e-5, 256, 8)
    assert default.eval.exact and default.eval.n == 256 and default.eval.num_problems == 600
    assert default.eval.heldout_params == {"totals": "any", "heldout_strata": ["totals"]}
    assert min(default.eval.temperatures) == pytest.approx(0.1)  # tol: a grid written as decimals
    assert (chain_sum.model, chain_sum.task.name, chain_sum.max_steps, chain_sum.trl["learning_rate"]) == \
        ("tiny", "chain_sum", 500, 2e-5)
    assert not chain_sum.eval.exact and chain_sum.eval.heldout_params == {} and chain_sum.task.train_subset is None
    assert chain_sum.output_dir == "runs/chain-sum" and default.output_dir == "runs/default"


def test_another_model_or_task_without_a_config_starts_from_the_tiny_base_not_the_testbed():
    cfg = load_config(None, {"model": "tiny"})
    assert (cfg.task.name, cfg.eval.exact, cfg.max_steps) == ("chain_sum", False, 500)
    gcd = load_config(None, {"task.name": "gcd"})
    assert (gcd.model, gcd.task.train_subset, gcd.eval.heldout_params, gcd.eval.exact) == ("tiny", None, {}, False)
    assert not load_config(None, {"model": "tiny-two-modes"}).eval.exact  # as a file naming that model alone


def test_eval_exact_and_heldout_params_are_checked_naming_the_key():
    with pytest.raises(ConfigError, match=r"^eval\.exact: .*eval\.exact false"):
        load_config("chain-sum", {"task.name": "gcd", "eval.exact": True})
    with pytest.raises(ConfigError, match=r"^eval\.heldout_params: "):
        load_config(None, {"eval.heldout_params.totals": "sideways"})
    with pytest.raises(ConfigError, match=r"^eval\.temperatures: "):
        load_config(None, {"eval.temperatures": [0.0, 1.0]})
    with pytest.raises(ConfigError, match=r"^eval\.temperatures: "):
        load_config(None, {"eval.temperatures": []})


def test_a_shipped_band_is_named_by_its_file_name_and_an_unknown_one_lists_them(tmp_path):
    from grae.data.band import SHIPPED_BANDS, band_file, shipped_bands

    assert band_file("tiny-two-modes-band-train") == SHIPPED_BANDS / "tiny-two-modes-band-train.jsonl.gz"
    assert band_file(str(tmp_path / "x.jsonl")) == tmp_path / "x.jsonl"  # a path stays a path
    assert "tiny-two-modes-band-holdout" in shipped_bands()
    with pytest.raises(ConfigError, match=r"task\.train_subset: 'no-such-band' is not a file or a shipped band "
                                          r"\(tiny-two-modes-band-holdout, tiny-two-modes-band-train\)"):
        load_config(None, {"task.train_subset": "no-such-band"})


def test_the_dry_run_checks_the_golds_of_the_held_out_problems_the_run_evaluates(monkeypatch):
    """The default trains on in-range chains and evaluates on both strata (``eval.heldout_params``): the gold check
    reads the held-out problems from that task, excursions included, and scores them with its verifier."""
    from grae.data.trace import expression_of, totals_class
    from grae.train.build import heldout_task
    from grae.train.gold_check import check_golds

    cfg = load_config(None, {"eval.num_problems": 60})
    task = cfg.task.build()
    held_from = heldout_task(cfg, task)
    check = check_golds(task, 20, 60, cfg.seed, held_from)
    assert (check.train, check.heldout, check.unscorable) == (20, 60, [])
    classes = {totals_class(expression_of(e["question"])) for e in held_from.heldout(60)}
    assert classes == {"in_range", "excursion"}
    assert {totals_class(expression_of(e["question"])) for e in task.heldout(60)} == {"in_range"}
    # the held-out golds go through the held-out task's verifier: one that rejects every gold names those 60 alone
    monkeypatch.setattr(held_from, "score_batch", lambda replies, examples: [0.0] * len(replies))
    assert len(check_golds(task, 20, 60, cfg.seed, held_from).unscorable) == 60


def test_every_temperature_from_one_forward_equals_one_pass_per_temperature():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval.gold import gold_prob_parts, gold_prob_parts_at
    from grae.presets import resolve_model

    cfg = load_config(None)
    task = get_task(cfg.task.name, **{**cfg.task.params, **cfg.eval.heldout_params})
    examples = task.heldout(12)
    path = resolve_model("tiny-two-modes")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)
    together = gold_prob_parts_at(model, tokenizer, examples, task, [0.3, 1.0], top_p=0.95, max_tokens=24)
    for t in (0.3, 1.0):
        alone = gold_prob_parts(model, tokenizer, examples, task, temperature=t, top_p=0.95, max_tokens=24)
        assert np.array_equal(together[t], alone)  # the same logits, the same arithmetic
    assert together[0.3].shape == (12, 2) and (together[0.3] > 0).any()


def test_the_exact_base_signal_check_reads_p():
    from grae.engines.learning_signal import exact_base_diagnosis

    assert exact_base_diagnosis([0.3, 0.5, 0.0], 8) is None
    note = exact_base_diagnosis([0.0] * 99 + [0.001], 8)
    assert note is not None and "exact pass@1 before training is 0.00% on 100 held-out problems" in note
    assert exact_base_diagnosis([], 8) is None


def test_the_default_reports_each_stratum_against_the_base_temperature_frontier(tmp_path):
    """A short run of the embedded default: its exact rows, the base's temperatures and strategy parts on disk;
    the base's p at T = 1 from the temperature pass equals its exact rows' p; summary.json, report.md and the
    console carry the same sentence and each stratum."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "grae.cli", "train", *SHORT, "--output-dir", str(out)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=scaled(600))
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    rows = [json.loads(line) for line in (out / "eval" / "before.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and all(r["exact"] for r in rows)
    temperatures = json.loads((out / "eval" / "temperatures.json").read_text())
    assert sorted(float(t) for t in temperatures["p"]) == [0.5, 1.0, 1.2]
    at_one = dict(zip(temperatures["question_ids"], temperatures["p"]["1.0"]))
    # tol: one forward per batch of gold completions in both; float32 logits summed in float64
    assert [at_one[r["question_id"]] for r in rows] == pytest.approx([r["p"] for r in rows], rel=1e-5, abs=1e-12)
    parts = json.loads((out / "eval" / "before.parts.json").read_text())
    assert parts["labels"] == ["L", "G"]
    assert [sum(p) for p in parts["parts"]] == pytest.approx([at_one[q] for q in parts["question_ids"]], rel=1e-5,
                                                             abs=1e-12)  # tol: as above
    summary = json.loads((out / "eval" / "summary.json").read_text())["exact"]
    strata = summary["strata"]
    assert list(strata) == ["all", "totals=excursion", "totals=in_range"]
    assert strata["totals=excursion"]["problems"] + strata["totals=in_range"]["problems"] == 40
    assert set(strata["totals=in_range"]["delta_f"]) == {"1", "64"} and set(strata["all"]["mass"]) == {"L", "G"}
    sentence = summary["sentence"]
    assert sentence.startswith("agrae") and "in-range pass@1" in sentence and "excursions: pass@64" in sentence
    report = (out / "report.md").read_text()
    assert f"## What the training gained\n\n**{sentence}**" in report
    assert report.index("What the training gained") < report.index("## Held-out pass@k")
    assert "### Exact held-out: in-range (" in report and "| Δ_F | k = 1 | k = 64 |" in report
    assert sentence in log and "in-range (" in log and "  mass L " in log
    assert (out / "passk.png").stat().st_size > 0
