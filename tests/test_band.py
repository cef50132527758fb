"""Competence-band selection: ``grae data band`` scores a pool of training problems by a base model's
pass rate, keeps those in [lo, hi], and ``task.train_subset`` trains on them; the teacher-forced gold probability
(:mod:`grae.eval.gold`) it rests on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from timeouts import scaled
from tolerances import assert_close_scaled

TASK = "chain_sum"
PARAMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, "prompt_style": "plain"}


@pytest.fixture(scope="module")
def tiny():
    from grae.eval.backends import load_hf

    model, tokenizer, _ = load_hf("tiny", device="cpu", dtype="float32")
    return model, tokenizer


@pytest.fixture(scope="module")
def task():
    from grae.data import get_task

    return get_task(TASK, **PARAMS)


# --- the teacher-forced gold probability ------------------------------------------------------------------------

@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 0.95)])
def test_gold_probability_is_the_enumerated_exact_p_of_the_gold_answer(tiny, task, temperature, top_p):
    """Batched, right-padded teacher forcing gives the p that grae eval --exact gets from its prompt cache."""
    from grae.eval.exact import CandidateScorer
    from grae.eval.gold import gold_probs

    model, tok = tiny
    examples = task.heldout(12)
    batched = gold_probs(model, tok, examples, task, temperature=temperature, top_p=top_p, batch=5)
    scorer = CandidateScorer(model, tok, [task.answer_completion(str(e["answer"])) for e in examples],
                             temperature=temperature, top_p=top_p)
    one_by_one = [np.exp(scorer.logprobs(e["prompt"])[i]) for i, e in enumerate(examples)]
    assert 0.05 < batched.mean() < 0.95  # the tiny model is neither always right nor always wrong here
    assert_close_scaled(batched, one_by_one, rel=1e-5)  # tol: float32 logits, two batch shapes


def test_gold_probability_refuses_what_it_cannot_give(tiny, task):
    from grae.data import get_task
    from grae.eval.gold import GoldExactError, gold_probs

    model, tok = tiny
    products = get_task("products", prompt_style="plain")
    with pytest.raises(GoldExactError, match="not one completion.*sampling"):
        gold_probs(model, tok, products.train(2, seed=0), products)
    with pytest.raises(GoldExactError, match="temperature must be > 0"):
        gold_probs(model, tok, task.heldout(2), task, temperature=0)
    wrong = [{**task.heldout(1)[0], "answer": "not a number"}]
    with pytest.raises(GoldExactError, match="verifier rejects the gold completion"):
        gold_probs(model, tok, wrong, task)
    # a gold completion longer than the sampler's budget cannot be sampled: p = 0
    assert gold_probs(model, tok, task.heldout(3), task, max_tokens=1).tolist() == [0.0, 0.0, 0.0]


# --- the band file ----------------------------------------------------------------------------------------------

def test_wilson_interval_reference_values():
    from grae.data.band import wilson_interval

    assert_close_scaled(wilson_interval(3, 10), [0.10779, 0.60322], rel=1e-4)  # tol: published to 5 digits
    assert_close_scaled(wilson_interval(0, 8), [0.0, 0.32441], rel=1e-4)  # tol: published to 5 digits
    assert wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError, match="correct <= n"):
        wilson_interval(6, 5)


def _score(settings_kw=None, pool=40):
    from grae.eval.pass_rate import BandSettings, score_band

    settings = BandSettings(**{"lo": 0.15, "hi": 0.85, **(settings_kw or {})})
    return score_band("tiny", TASK, PARAMS, pool=pool, pool_seed=3, settings=settings, device="cpu")


def test_exact_band_keeps_the_pool_problems_in_the_band_with_their_settings(task, tiny):
    from grae.eval.gold import gold_probs

    header, rows = _score()
    pool = task.train(40, seed=3)
    p = gold_probs(*tiny, pool, task)
    inside = [e["question_id"] for e, v in zip(pool, p) if 0.15 <= v <= 0.85]
    assert [r["question_id"] for r in rows] == inside and 0 < len(rows) < 40
    assert header["counts"] == {"pool": 40, "kept": len(inside), "below": int((p < 0.15).sum()),
                                "above": int((p > 0.85).sum())}
    assert (header["task"], header["params"], header["pool"], header["pool_seed"], header["method"], header["n"]) == (
        TASK, PARAMS, 40, 3, "exact", None)
    assert header["model_identity"].startswith("sha256:") and (header["temperature"], header["top_p"]) == (1.0, 1.0)
    by_id = {e["question_id"]: e for e in pool}
    for row in rows:
        assert (row["question"], row["answer"]) == (by_id[row["question_id"]]["question"], by_id[row["question_id"]]["answer"])
    held = {e["question_id"] for e in task.heldout(200)}
    assert not held & {r["question_id"] for r in rows}  # drawn from the training stream, never the held-out split
    assert 0 < header["informative_groups_g8"]["pool"] < header["informative_groups_g8"]["kept"] <= 1


def test_sampled_band_states_n_and_each_problems_wilson_interval():
    header, rows = _score({"n": 6, "lo": 0.1, "hi": 0.9, "max_tokens": 8}, pool=12)
    assert (header["method"], header["n"]) == ("sampled", 6)
    for row in rows:
        assert row["n"] == 6 and row["pass_rate"] == pytest.approx(row["correct"] / 6, rel=1e-9)  # tol: 10 digits
        lo, hi = row["interval"]
        assert lo <= row["pass_rate"] <= hi and 0.1 <= row["pass_rate"] <= 0.9
    assert header["counts"]["kept"] == len(rows)


def test_the_command_writes_the_same_file_for_the_same_arguments(tmp_path):
    """Reproducible: the CLI twice, byte for byte, and the same rows as the library call."""
    from grae.data.band import read_band

    def run(out: Path) -> str:
        cmd = [sys.executable, "-m", "grae.cli", "data", "band", "--model", "tiny", "--task", TASK,
               *[f"--param={k}={v}" for k, v in PARAMS.items()], "--pool", "40", "--seed", "3", "--exact", "-o", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300),
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    said = run(tmp_path / "a.jsonl")
    run(tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    header, rows = read_band(tmp_path / "a.jsonl")
    lib_header, lib_rows = _score()
    assert rows == lib_rows and header == {**lib_header, "model": "tiny"}
    assert f"kept {len(rows)} of 40" in " ".join(said.split())


@pytest.mark.parametrize("args,message", [
    (["--exact", "--n", "4"], "give exactly one"),
    ([], "give exactly one"),
    (["--exact", "--lo", "0.9", "--hi", "0.1"], "need 0 <= lo <= hi <= 1"),
    (["--n", "4", "--temperature", "0"], "--temperature: must be in"),
])
def test_the_command_refuses_bad_arguments_naming_them(tmp_path, args, message):
    cmd = [sys.executable, "-m", "grae.cli", "data", "band", "--model", "tiny", "--task", TASK, "--pool", "4",
           "-o", str(tmp_path / "b.jsonl"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300),
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2 and message in " ".join((done.stdout + done.stderr).split())
    assert not (tmp_path / "b.jsonl").exists()


def test_exact_on_a_task_without_one_gold_completion_is_refused_before_the_model_loads():
    from grae.eval.gold import GoldExactError
    from grae.eval.pass_rate import BandSettings, score_band

    with pytest.raises(GoldExactError, match="estimate it by sampling"):
        score_band("no/such-model", "products", {"prompt_style": "plain"}, pool=4, pool_seed=0, settings=BandSettings())


# --- training on it ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def band_file(tmp_path_factory):
    from grae.data.band import write_band

    header, rows = _score()
    return write_band(tmp_path_factory.mktemp("band") / "band.jsonl", header, rows), header, rows


def test_the_band_task_trains_on_the_band_alone_with_the_tasks_own_examples_and_verifier(band_file, task):
    from grae.data import get_task
    from grae.data.band import BandTask

    path, header, rows = band_file
    band = BandTask(get_task(TASK, **PARAMS), path, TASK, PARAMS)
    drawn = band.train(None, seed=7)
    pool = {e["question_id"]: e for e in task.train(40, seed=3)}
    assert sorted(e["question_id"] for e in drawn) == sorted(r["question_id"] for r in rows)
    assert all(e == pool[e["question_id"]] for e in drawn)  # every field the verifier reads
    assert [e["question_id"] for e in band.train(None, seed=7)] == [e["question_id"] for e in drawn]
    assert [e["question_id"] for e in band.train(None, seed=8)] != [e["question_id"] for e in drawn]
    assert band.heldout(5) == task.heldout(5)
    e = drawn[0]
    assert band.score(task.answer_completion(e["answer"]), e) == 1.0 and band.score(" x", e) == 0.0
    with pytest.raises(ValueError, match=f"keeps {len(rows)}"):
        band.train(len(rows) + 1)


def test_a_generator_pool_is_drawn_once_per_process_and_every_band_task_gets_its_own_copies(band_file, monkeypatch):
    from grae.data import get_task
    from grae.data.band import _POOLS, POOL_CACHE, BandTask
    from grae.data.procedural import ReasoningGymTask

    path, _, rows = band_file
    _POOLS.clear()
    draws = []
    train = ReasoningGymTask.train
    monkeypatch.setattr(ReasoningGymTask, "train", lambda self, n, seed=0: draws.append(n) or train(self, n, seed))
    first, second = (BandTask(get_task(TASK, **PARAMS), path, TASK, PARAMS) for _ in range(2))
    assert draws == [40] and first.examples == second.examples
    first.examples[0]["answer"] = "changed"
    assert second.examples[0]["answer"] == rows[0]["answer"]
    assert BandTask(get_task(TASK, **PARAMS), path, TASK, PARAMS).examples[0]["answer"] == rows[0]["answer"]
    _POOLS.clear()
    for n in range(POOL_CACHE):  # a full cache: a new pool pushes the oldest out, the cache stays bounded
        _POOLS[("other", n)] = {}
    BandTask(get_task(TASK, **PARAMS), path, TASK, PARAMS)
    assert draws == [40, 40] and len(_POOLS) == POOL_CACHE and ("other", 0) not in _POOLS


@pytest.mark.parametrize("override,field", [
    ({"task.params": {**PARAMS, "max_digits": 1}}, "task.params.max_digits: .* was scored with 2, this run has 1"),
    # a flag's task.params merges key by key into the base's (grae.train.resolve), the task restated or not
    ({"task.name": TASK, "task.params": {**PARAMS, "prompt_style": "chat"}},
     "task.params.prompt_style: .* was scored with 'plain', this run has 'chat'"),
    ({"task.name": "chain_trace", "task.params": {}}, "task.name: .* was scored on task 'chain_sum'"),
])
def test_grae_train_refuses_a_band_of_another_task_naming_the_field(band_file, override, field):
    from grae.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=f"^{field}"):
        load_config("chain-sum", {"task.params": PARAMS, "task.train_subset": str(band_file[0]), **override})


def test_grae_train_refuses_a_changed_or_foreign_file_and_fits_its_size(band_file, tmp_path):
    from grae.train.config import ConfigError, load_config

    path, header, rows = band_file
    base = {"task.params": PARAMS}
    changed = tmp_path / "changed.jsonl"
    lines = path.read_text().splitlines()
    changed.write_text("\n".join([lines[0], lines[1].replace('"answer": "', '"answer": "9')] + lines[2:]) + "\n")
    with pytest.raises(ConfigError, match="^task.train_subset: problem .* is not in the task's pool"):
        load_config("chain-sum", {**base, "task.train_subset": str(changed)})
    foreign = tmp_path / "plain.jsonl"
    foreign.write_text('{"question": "1 + 1", "answer": "2"}\n')
    with pytest.raises(ConfigError, match="^task.train_subset: .* has no grae_band header"):
        load_config("chain-sum", {**base, "task.train_subset": str(foreign)})
    with pytest.raises(ConfigError, match="^task.train_subset: .* is not a file"):
        load_config("chain-sum", {**base, "task.train_subset": str(tmp_path / "missing.jsonl")})
    cfg = load_config("chain-sum", {**base, "task.train_subset": str(path)})
    assert cfg.task.train_size is None and any(f"all {len(rows)} problems of the band file" in n for n in cfg.notes)
    from grae.train.dry_run import plan_lines

    assert ("train on", f"all {len(rows)} problems of the band file {path}") in plan_lines(cfg)
    with pytest.raises(ConfigError, match=f"^task.train_size: 10000 training problems asked, .* keeps {len(rows)}"):
        load_config("chain-sum", {**base, "task.train_subset": str(path), "task.train_size": 10000})


def test_a_gzip_compressed_band_file_reads_as_the_plain_one_and_a_damaged_one_is_one_line(band_file, tmp_path):
    import gzip

    from grae.data.band import BandFileError, read_band

    path, header, rows = band_file
    packed = tmp_path / "band.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert read_band(packed) == read_band(path) == (header, rows)
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    with pytest.raises(BandFileError, match="^task.train_subset: .*damaged.jsonl.gz: a damaged gzip file"):
        read_band(damaged)


def test_grae_train_trains_two_steps_on_a_band_file(band_file, tmp_path):
    path, header, rows = band_file
    cmd = [sys.executable, "-m", "grae.cli", "train", "chain-sum", "--task.train_subset", str(path), "--estimator", "grpo",
           "--max-steps", "2", "--eval.num_problems", "4", "--eval.n", "2", "--output-dir", str(tmp_path / "run"),
           "--no-progress",
           # the test is about the band file, not learning: the shipped tiny model's base has no learning signal on
           # these problems, which would stop the run before step 1
           "--continue-without-signal"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(600), cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, out[-3000:]
    assert f"training on all {len(rows)} problems of the band file" in out
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "reward_mean" in s] == [1, 2]
