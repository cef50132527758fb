"""A two-modes study through ``grae compare`` with the mechanism rows: a tiny ``trace-two-modes`` base (30 SFT
steps), 2 arms × 2 seeds × 2 steps trained on a band file, held out on both strata (``eval.heldout_params``), exact
pass@k to k = 256, the temperature frontier down to T = 0.1, strategy mass at steps 0, 1, 2 and the band hold-out.
Every probe is checked against ``gold_prob_parts`` of the weights it names, the report's cells against the probes,
and the report re-renders from its summary alone."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from timeouts import scaled

PARAMS = {"generator": "chain_range", "min_terms": 5, "max_terms": 5, "max_value": 30, "prompt_style": "plain",
          "strategies": "two", "totals": "in_range", "heldout_size": 40}
HELDOUT = {"totals": "any", "heldout_strata": ["totals"]}


@pytest.fixture(scope="module")
def two_modes_base(tmp_path_factory):
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    out = tmp_path_factory.mktemp("base") / "two_modes"
    done = subprocess.run([sys.executable, "-m", "grae.cli", "tiny", "build", "--recipe", "trace-two-modes",
                           "--sft-steps", "30", "--no-eval", "--threads", "1", "-o", str(out)],
                          capture_output=True, text=True, timeout=scaled(600))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return out


def _bands(tmp_path):
    from grae.data import get_task
    from grae.data.band import band_rows, write_band

    pool = get_task("chain_trace", **PARAMS).train(60, seed=1)
    header = {"task": "chain_trace", "params": PARAMS, "pool": 60, "pool_seed": 1}
    train, held = tmp_path / "band_train.jsonl", tmp_path / "band_holdout.jsonl"
    write_band(train, header, band_rows(pool[:40], [0.5] * 40, 0.0, 1.0))
    write_band(held, header, band_rows(pool[40:46], [0.5] * 6, 0.0, 1.0))
    return train, held


def _load(path):
    from grae.eval.backends import load_hf

    model, tokenizer, _ = load_hf(str(path), device="cpu", dtype="float32")
    return model, tokenizer


def test_a_two_modes_study_reports_strata_strategy_mass_and_collapse(tmp_path, two_modes_base):
    from grae.compare.grid import load_compare_config
    from grae.compare.probes import band_examples, parts_path
    from grae.data import get_task
    from grae.eval.gold import gold_prob_parts
    from grae.train.callbacks import snapshot_path

    train, held = _bands(tmp_path)
    study = {
        "base": "chain-sum",
        "overrides": {"model": str(two_modes_base), "max_steps": 2, "save_steps": 2,
                      "task": {"name": "chain_trace", "params": PARAMS, "train_subset": str(train), "train_size": None},
                      "trl": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 24,
                              "learning_rate": 1e-4},
                      "eval": {"enabled": False, "num_problems": 6, "n": 256, "max_tokens": 24, "temperature": 1.0}},
        "methods": {"grpo": {"estimator": "grpo"}, "bbg": {"estimator": "bbg"}}, "seeds": [0, 1], "baseline": "grpo",
        "output_dir": str(tmp_path / "compare"), "parallel": 2, "frontier": [0.5, 1.0],
        "eval": {"exact": True, "n": 256, "num_problems": 6, "heldout_params": HELDOUT},
        "paired_against": ["base", "temperature_frontier"], "temperatures": [0.1, 0.5, 1.0],
        "mechanism": {"steps": [0, 1, 2], "ks": [1, 16, 256], "band_holdout": str(held)},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "grae.cli", "compare", str(path)], capture_output=True, text=True,
                         timeout=scaled(900))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cfg = load_compare_config(path)
    out = cfg.output_dir
    summary = json.loads((out / "summary.json").read_text())
    report = (out / "report.md").read_text()
    assert summary["ks"][-1] == 256 and "pass@256" in report  # exact pass@k reaches k = 256 (eval.n)
    mech = summary["mechanism"]
    assert set(mech["strata"]) == {"totals=in_range", "totals=excursion", "band hold-out"}
    assert mech["labels"] == ["L", "G"]

    held_task = get_task("chain_trace", **{**PARAMS, **HELDOUT})
    heldout = held_task.heldout(6)
    strata = {held_task.stratum(x)[0] for x in heldout}
    assert strata == {"in_range", "excursion"}  # both strata among the held-out problems
    config = cfg.train_config(cfg.jobs()[0])
    band = band_examples(config, str(held))
    train_task = get_task("chain_trace", **PARAMS)

    def parts(weights):
        model, tokenizer = _load(weights)
        return (gold_prob_parts(model, tokenizer, heldout, held_task, max_tokens=24),
                gold_prob_parts(model, tokenizer, band, train_task, max_tokens=24))

    base_probe = json.loads((out / "base" / "probes.json").read_text())
    h, b = parts(two_modes_base)
    # tol: the same teacher-forced forward in another batch; float32 logits, log p of 5-number traces ~ −20
    assert np.allclose(np.log(np.array(base_probe["heldout"]["parts"]) + 1e-300), np.log(h + 1e-300), rtol=1e-5)
    assert np.allclose(np.log(np.array(base_probe["band"]["parts"]) + 1e-300), np.log(b + 1e-300), rtol=1e-5)
    for job in cfg.jobs():
        for step, weights in ((1, snapshot_path(job.output_dir, 1)), (2, job.output_dir / "final")):
            probe = json.loads(parts_path(job.output_dir, step).read_text())
            h, b = parts(weights)
            assert np.allclose(np.log(np.array(probe["heldout"]["parts"]) + 1e-300), np.log(h + 1e-300), rtol=1e-5)
            assert np.allclose(np.log(np.array(probe["band"]["parts"]) + 1e-300), np.log(b + 1e-300), rtol=1e-5)
        curve = json.loads((job.output_dir / "eval" / "frontier" / "step-2.curve.json").read_text())
        p = np.array([curve["exact"][str(x["question_id"])][0] for x in heldout])
        # tol: the final evaluation's p and the probe's Σ parts are the same gold probabilities (float32 logits)
        assert np.allclose(np.log(p), np.log(np.array(probe["heldout"]["parts"]).sum(1)), rtol=1e-5)

    # the report's strategy-mass cell is the mean of the probes' G column over seeds and the stratum's problems
    rows = [i for i, x in enumerate(heldout) if held_task.stratum(x)[0] == "excursion"]
    g = np.mean([np.array(json.loads(parts_path(j.output_dir, 2).read_text())["heldout"]["parts"])[rows, 1]
                 for j in cfg.jobs() if j.method == "bbg"])
    cell = mech["strategy_mass"]["totals=excursion"]["methods"]["bbg"]["2"]["mass"]["G"]["mean"]
    assert cell == pytest.approx(g, rel=1e-12)
    assert "delta_F" in mech["strata"]["totals=in_range"] and "Δ_F against this stratum's temperature frontier" in report
    assert "## Strategy mass" in report and "## Collapsed groups against grpo" in report
    assert "## Advantage mass and ω over training" in report
    assert mech["training"]["bbg"]["adv_pos_mass"]["seeds"] == 2

    again = tmp_path / "again"
    rerender = subprocess.run([sys.executable, "-m", "grae.cli", "compare", str(out / "summary.json"), "--report-only",
                               "-o", str(again)], capture_output=True, text=True, timeout=scaled(300))
    assert rerender.returncode == 0, rerender.stdout[-2000:] + rerender.stderr[-2000:]
    assert (again / "report.md").read_text() == report
