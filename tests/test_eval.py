"""grae eval / passk / report: estimator against an independent reference, bootstrap, resume after
SIGKILL, backend selection, CLI end to end on a tiny model."""

from __future__ import annotations

import functools
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from grae.eval import backends
from grae.eval.records import RecordsError, read_rows, repair_tail
from grae.eval.runner import plan_calls, run_samples
from grae.eval.stats import count_problems, paired_difference, passk_estimates
from timeouts import scaled

ROOT = Path(__file__).resolve().parents[1]


# -- helpers -------------------------------------------------------------------------------------


def cli():
    from grae.cli import eval_cmd

    app = typer.Typer()
    eval_cmd.register(app)
    return app


def invoke(*args: str):
    result = CliRunner().invoke(cli(), [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def reference_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Chen et al. Eq. 1 in exact arithmetic: 1 − C(n−c, k) / C(n, k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def seeds_rows(num_problems: int, n: int, seed: int, extra: int = 0):
    """Rows in the seeds' format: question_id + label only, problems interleaved, some with extra rows."""
    rng = random.Random(seed)
    p_correct = [rng.random() for _ in range(num_problems)]
    rows = []
    for g in range(n + extra):
        for q in range(num_problems):
            if g >= n and q % 2:  # only even problems get extra rows
                continue
            rows.append({"question_id": f"q{q}", "label": rng.random() < p_correct[q]})
    return rows


class AddTask:
    """A held-out 'a + b' task scored on the first integer of the completion (no dependency on grae.data)."""

    name = "add"

    def heldout(self, n):
        return [{"question_id": f"add/{i}", "task": "add", "question": f"What is {i} + {i + 1}?",
                 "prompt": f"What is {i} + {i + 1}?\nAnswer:", "answer": str(2 * i + 1)} for i in range(n)]

    def extract_answer(self, completion):
        m = re.search(r"-?\d+", completion)
        return m.group(0) if m else None

    def score(self, completion, example):
        return float(self.extract_answer(completion) == example["answer"])


class ScriptedSampler:
    """Answers correctly exactly when (prompt number + generation offset) is divisible by 3."""

    name = "scripted"
    settings = backends.SamplingSettings()

    def __init__(self):
        self.calls = []

    def render(self, prompt):
        return prompt

    def generate(self, prompts, n, seed=None):
        self.calls.append((len(prompts), n, seed))
        out = []
        for p in prompts:
            a = int(re.search(r"What is (\d+)", p).group(1))
            out.append([f" {2 * a + 1}" if (a + j) % 3 == 0 else " 0" for j in range(n)])
        return out


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 64-wide random Llama with a locally trained byte-level BPE (never emits EOS on purpose)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("random_llama")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [f"What is {a} + {b}?\nAnswer: {a + b}" for a in range(30) for b in range(30)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         pad_token_id=hf_tok.pad_token_id, eos_token_id=hf_tok.eos_token_id, bos_token_id=None)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    return out


# -- records -------------------------------------------------------------------------------------


def test_truncated_tail_is_ignored_then_repaired(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question_id": "a", "label": true}\n{"question_id": "b", "label": fa')
    assert read_rows(path) == [{"question_id": "a", "label": True}]
    assert repair_tail(path) == len('{"question_id": "b", "label": fa')
    assert path.read_text() == '{"question_id": "a", "label": true}\n'
    # a complete last row that only lacks its newline is kept
    path.write_text('{"question_id": "a", "label": true}')
    assert repair_tail(path) == 0 and path.read_text().endswith("}\n")
    # a corrupt line in the middle is an error, not silently dropped
    path.write_text('{"question_id": "a", "label": true}\n{oops\n{"question_id": "b", "label": true}\n')
    with pytest.raises(RecordsError, match=":2:"):
        read_rows(path)


# -- pass@k from files -----------------------------------------------------------------------------


def test_passk_cli_equals_exact_reference_on_seeds_format(tmp_path):
    rows = seeds_rows(num_problems=9, n=12, seed=3, extra=4)
    path = write_jsonl(tmp_path / "seeds.jsonl", rows)
    # n inferred as the minimum per problem (12); the first 12 rows of each problem count
    out = json.loads(invoke("passk", path, "--json", "--bootstrap", "0"))
    by_q: dict[str, list[bool]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], []).append(r["label"])
    assert set(k for k in out if k.startswith("pass@")) == {"pass@1", "pass@2", "pass@4", "pass@8", "pass@12"}
    for k in (1, 2, 4, 8, 12):
        ref = sum(reference_pass_at_k(12, sum(v[:12]), k) for v in by_q.values()) / len(by_q)
        # tol: pass@k means in [0, 1], float64: rounding ≤ 1e-15
        assert out[f"pass@{k}"] == pytest.approx(float(ref), abs=1e-12)
    assert out["n"] == 12 and out["num_problems"] == 9 and "ci95" not in out
    # --n smaller than available, explicit k
    out = json.loads(invoke("passk", path, "--json", "--bootstrap", "0", "--n", "5", "--k", "1,3"))
    for k in (1, 3):
        ref = sum(reference_pass_at_k(5, sum(v[:5]), k) for v in by_q.values()) / len(by_q)
        # tol: pass@k means in [0, 1], float64: rounding ≤ 1e-15
        assert out[f"pass@{k}"] == pytest.approx(float(ref), abs=1e-12)
    # --n larger than some problems have: those are dropped, the rest counted on their first 16
    out = json.loads(invoke("passk", path, "--json", "--bootstrap", "0", "--n", "16", "--k", "2"))
    full = [v for v in by_q.values() if len(v) >= 16]
    assert out["num_problems"] == len(full) == 5
    assert out["pass@2"] == pytest.approx(float(sum(reference_pass_at_k(16, sum(v[:16]), 2) for v in full) / 5))


def test_bootstrap_interval_contains_point_and_compare_with_itself_is_zero_within_its_n(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", seeds_rows(num_problems=30, n=16, seed=5))
    out = json.loads(invoke("passk", path, "--json", "--bootstrap", "500", "--seed", "1"))
    for k in (1, 2, 4, 8, 16):
        lo, hi = out["ci95"][f"pass@{k}"]
        assert lo <= out[f"pass@{k}"] <= hi
        assert hi - lo > 0  # problems differ, so the interval is not degenerate
    same = tmp_path / "same.jsonl"
    shutil.copy(path, same)
    out = json.loads(invoke("passk", path, same, "--compare", "--json", "--bootstrap", "300"))
    delta = out[str(same)]["delta"]
    assert out[str(same)]["shared_problems"] == 30
    bound = 1 - 0.025 ** (1 / 30)  # 30 problems that agree bound the change only this far, not [0, 0]
    for k in (1, 2, 4, 8, 16):
        d = delta[f"pass@{k}"]
        assert (d["value"], d["n_eff"]) == (0.0, 30) and d["lo"] == -d["hi"]
        assert d["hi"] == pytest.approx(bound, rel=1e-12)  # tol: one closed form, float64 rounding only
    table = invoke("passk", path, same, "--compare")
    assert "+0.0" in table and "Δ" in table


def test_paired_difference_is_difference_on_shared_problems():
    rows_a = seeds_rows(num_problems=12, n=8, seed=1)
    rows_b = [r for r in seeds_rows(num_problems=12, n=8, seed=2) if r["question_id"] != "q0"]
    a, b = count_problems(rows_a), count_problems(rows_b)
    diff, shared = paired_difference(a, b, [1, 4], bootstrap=400, seed=0)
    assert shared == [f"q{i}" for i in range(1, 12)]
    for k in (1, 4):
        ea = passk_estimates(a.subset(shared), [k], bootstrap=0)[k].value
        eb = passk_estimates(b.subset(shared), [k], bootstrap=0)[k].value
        assert diff[k].value == pytest.approx(eb - ea)
        assert diff[k].lo <= diff[k].value <= diff[k].hi


# -- sampling plan and runner ------------------------------------------------------------------------


@pytest.mark.parametrize("num_examples,n,batch", [(5, 16, 4), (5, 3, 8), (4, 64, 64), (7, 10, 64), (1, 5, 5)])
def test_plan_covers_every_sample_once(num_examples, n, batch):
    calls = plan_calls(num_examples, n, batch)
    pairs = [(u.index, g) for call in calls for u in call for g in range(u.start, u.start + u.count)]
    assert sorted(pairs) == [(i, g) for i in range(num_examples) for g in range(n)]
    for call in calls:
        assert sum(u.count for u in call) <= max(batch, 1)
        assert len({u.count for u in call}) == 1  # one generate(prompts, n) per call


def test_run_samples_rows_labels_and_resume(tmp_path):
    task, sampler = AddTask(), ScriptedSampler()
    examples = task.heldout(5)
    out = tmp_path / "add.jsonl"
    result = run_samples(sampler, examples, task, n=6, batch_size=4, seed=0, output_path=out, bootstrap=0)
    rows = read_rows(out)
    assert len(rows) == 30 and all(list(r) == ["question_id", "generation_id", "task", "prompt", "response",
                                               "pred_answer", "gold_answer", "label"] for r in rows)
    for r in rows:
        a = int(r["question_id"].split("/")[1])
        assert r["label"] is ((a + r["generation_id"] % 4) % 3 == 0)  # calls of 4 (n > batch): offset in call
        assert r["gold_answer"] == str(2 * a + 1)
        assert r["pred_answer"] == (r["gold_answer"] if r["label"] else "0")
    c = [sum(r["label"] for r in rows if r["question_id"] == f"add/{a}") for a in range(5)]
    assert result.c.tolist() == c and result.n.tolist() == [6] * 5
    assert result.curve[1] == pytest.approx(sum(c) / 30)
    # lose two rows and leave a torn line; the rerun regenerates exactly those
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:3] + lines[5:]) + '{"question_id": "add/4", "generation_')
    again = run_samples(sampler, examples, task, n=6, batch_size=4, seed=0, output_path=out, bootstrap=0)
    assert again.num_generated == 2 and again.num_resumed == 28
    assert sorted(map(json.dumps, read_rows(out))) == sorted(map(json.dumps, rows))
    # n grown: only the new generation ids are sampled
    more = run_samples(sampler, examples, task, n=8, batch_size=4, seed=0, output_path=out, bootstrap=0)
    assert more.num_generated == 10 and len(read_rows(out)) == 40
    # other sampling settings on the same file are refused
    run_samples(sampler, examples, task, n=8, batch_size=4, seed=0, output_path=tmp_path / "t.jsonl",
                settings={"temperature": 0.6})
    with pytest.raises(RecordsError, match="temperature"):
        run_samples(sampler, examples, task, n=8, batch_size=4, seed=0, output_path=tmp_path / "t.jsonl",
                    settings={"temperature": 1.0})


def test_backend_selection(monkeypatch):
    for installed, cuda, expected in [(True, True, "vllm"), (True, False, "hf"), (False, True, "hf"), (False, False, "hf")]:
        monkeypatch.setattr(backends, "vllm_installed", lambda v=installed: v)
        monkeypatch.setattr(backends, "cuda_available", lambda v=cuda: v)
        assert backends.select_backend("auto") == expected
        assert backends.select_backend("hf") == "hf"
        if expected == "hf":
            with pytest.raises(RuntimeError, match="--backend vllm"):
                backends.select_backend("vllm")
        else:
            assert backends.select_backend("vllm") == "vllm"
    with pytest.raises(ValueError):
        backends.select_backend("tgi")


def test_vllm_sampler_requests(monkeypatch, random_model_dir):
    """VLLMSampler against a stand-in ``vllm`` module: what it asks vLLM for and how it reads the answer."""
    import types

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(random_model_dir)
    seen = {}

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        def __init__(self, model, dtype):
            seen["init"] = (model, dtype)

        def get_tokenizer(self):
            return tokenizer

        def generate(self, prompts, params, use_tqdm):
            seen["prompts"], seen["params"] = prompts, [p.kwargs for p in params]
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"p{i}s{j}") for j in range(p.kwargs["n"])])
                    for i, p in enumerate(params)]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    sampler = backends.VLLMSampler("some/model", backends.SamplingSettings(0.6, 0.95, 64))
    out = sampler.generate(["What is 1 + 2?\nAnswer:", "What is 3 + 4?\nAnswer:"], 3, seed=100)
    assert out == [["p0s0", "p0s1", "p0s2"], ["p1s0", "p1s1", "p1s2"]]
    assert seen["init"] == ("some/model", "auto")
    assert seen["params"] == [dict(n=3, temperature=0.6, top_p=0.95, max_tokens=64, seed=100 + i) for i in range(2)]
    assert seen["prompts"][0]["prompt_token_ids"] == tokenizer("What is 1 + 2?\nAnswer:")["input_ids"]
    sampler.settings = backends.SamplingSettings(0.0, 1.0, 64)  # greedy: one decode copied n times
    assert sampler.generate(["What is 1 + 2?\nAnswer:"], 3) == [["p0s0"] * 3]
    assert seen["params"][0]["n"] == 1


def test_evaluate_in_process_is_reproducible_and_leaves_rng_alone(random_model_dir):
    from grae.eval import evaluate, load_hf

    model, tokenizer, _ = load_hf(str(random_model_dir), device="cpu")
    model.train()
    task = AddTask()
    state = torch.get_rng_state()
    kwargs = dict(n=8, temperature=1.0, top_p=0.9, max_tokens=6, batch_size=16, seed=3)
    first = evaluate(model, tokenizer, task.heldout(3), task, **kwargs)
    assert torch.equal(torch.get_rng_state(), state) and model.training
    second = evaluate(model, tokenizer, task.heldout(3), task, **kwargs)
    assert [r["response"] for r in first.rows] == [r["response"] for r in second.rows]
    other = evaluate(model, tokenizer, task.heldout(3), task, **{**kwargs, "seed": 4})
    assert [r["response"] for r in first.rows] != [r["response"] for r in other.rows]
    assert len(first.rows) == 24 and sorted(first.curve) == [1, 2, 4, 8]


@pytest.mark.parametrize("problems", [1, 3])
def test_shared_prompt_cache_draws_the_same_samples_as_the_plain_batch(random_model_dir, monkeypatch, problems):
    """One call holding several problems prefills each problem once (grae.eval.prefill) and draws what the
    unshared call draws, with finished rows leaving the batch or not."""
    from grae.eval import HFSampler, SamplingSettings, load_hf

    model, tokenizer, _ = load_hf(str(random_model_dir), device="cpu")
    sampler = HFSampler(model, tokenizer, SamplingSettings(temperature=1.0, top_p=0.9, max_tokens=10))
    prompts = [f"What is {a} + 7?\nAnswer:" for a in (12, 3, 150)][:problems]
    prefilled: list[int] = []
    forward = model.forward

    @functools.wraps(forward)  # the same signature: the sampler checks what the forward takes
    def counting(*args, **kwargs):
        prefilled.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    shared = sampler.generate(prompts, 16, seed=11)
    assert prefilled[0] == problems  # one prefill row per problem, then 16 rows per problem decode
    sampler.share_prefill = False
    prefilled.clear()
    plain = sampler.generate(prompts, 16, seed=11)
    assert prefilled[0] == 16 * problems
    sampler.rows_leave = False
    kept = sampler.generate(prompts, 16, seed=11)
    assert shared == plain == kept and all(len(set(group)) > 1 for group in shared)


@pytest.mark.parametrize("sharpen, temperature", [(1, 1.0), (40, 0.7)])
def test_hf_sampler_draws_what_generate_with_temperature_and_top_p_draws(random_model_dir, monkeypatch, sharpen,
                                                                         temperature):
    """A random model's near-flat logits take the sort fallback; sharpened, the topk path decides."""
    from grae.eval import HFSampler, SamplingSettings, load_hf, nucleus

    model, tokenizer, _ = load_hf(str(random_model_dir), device="cpu")
    model.lm_head.weight.data *= sharpen
    sorts: list[int] = []
    sorted_keep = nucleus._sorted_keep
    monkeypatch.setattr(nucleus, "_sorted_keep", lambda *a: sorts.append(1) or sorted_keep(*a))
    prompts = ["What is 12 + 7?\nAnswer:", "What is 3 + 25?\nAnswer:"]
    sampler = HFSampler(model, tokenizer, SamplingSettings(temperature=temperature, top_p=0.9, max_tokens=12))
    ours = sampler.generate(prompts, 4, seed=5)
    tokenizer.padding_side = "left"
    enc = tokenizer([p for p in prompts for _ in range(4)], return_tensors="pt", padding=True)
    torch.manual_seed(5)
    out = model.generate(**enc, max_new_tokens=12, do_sample=True, temperature=temperature, top_p=0.9, top_k=0,
                         pad_token_id=tokenizer.pad_token_id)
    theirs = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert [text for group in ours for text in group] == theirs
    assert len(set(theirs)) > 1
    assert (len(sorts) > 0) == (sharpen == 1)


def test_hf_sampler_on_step_reports_each_decoding_step_and_draws_the_same(random_model_dir):
    """Progress inside a call: one report per token, the samples unchanged (the hook draws
    nothing), both on the plain batched path and on the shared-prompt path."""
    from grae.eval import HFSampler, SamplingSettings, load_hf

    model, tokenizer, _ = load_hf(str(random_model_dir), device="cpu")
    sampler = HFSampler(model, tokenizer, SamplingSettings(temperature=1.0, top_p=0.9, max_tokens=6))
    for prompts, n in ((["What is 12 + 7?\nAnswer:", "What is 3 + 25?\nAnswer:"], 3), (["What is 1 + 2?\nAnswer:"], 4)):
        plain = sampler.generate(prompts, n, seed=3)
        steps: list[tuple[int, int, int]] = []
        sampler.on_step = lambda *report, into=steps: into.append(report)
        try:
            reported = sampler.generate(prompts, n, seed=3)
        finally:
            sampler.on_step = None
        assert reported == plain
        rows = len(prompts) * n
        assert steps == [(t, 6, rows) for t in range(1, 7)]  # this model never emits EOS: all 6 tokens


def test_eval_wires_decoding_progress_to_the_sampler_and_unhooks_it(random_model_dir, tmp_path):
    from contextlib import contextmanager

    from grae.eval.jobs import evaluate_tasks

    updates, steps = [], []

    @contextmanager
    def progress(name, total):
        def update(done, total):
            updates.append(done)
        update.decoding = lambda tokens, max_tokens, sequences: steps.append((name, tokens, max_tokens, sequences))
        yield update

    done = evaluate_tasks(str(random_model_dir), ["chain_sum"], n=2, num_problems=3, max_tokens=4, batch_size=4,
                          output=tmp_path / "run", progress=progress)
    assert updates == [0, 4, 6]
    calls = [s for s in steps if s[1] == 1]
    assert len(calls) == 2 and {s[3] for s in calls} == {4, 2}  # 3 problems × 2 in calls of 4 and 2
    assert [s[1] for s in steps] == [1, 2, 3, 4] * 2 and all(s[0] == "chain_sum" and s[2] == 4 for s in steps)
    assert done.results["chain_sum"].num_generated == 6
    # resumed: the count on disk is reported before the first call ends, so progress starts there
    updates.clear()
    steps.clear()
    (tmp_path / "run" / "chain_sum.jsonl").write_text(
        "".join(line + "\n" for line in (tmp_path / "run" / "chain_sum.jsonl").read_text().splitlines()[:4]))
    evaluate_tasks(str(random_model_dir), ["chain_sum"], n=2, num_problems=3, max_tokens=4, batch_size=4,
                   output=tmp_path / "run", progress=progress)
    assert updates == [4, 6] and [s[3] for s in steps if s[1] == 1] == [2]


# -- CLI end to end ----------------------------------------------------------------------------------


def _procedural_task() -> str:
    from grae.data import get_task

    get_task("chain_sum")  # must resolve; the CLI goes through the same registry
    return "chain_sum"


def _tiny_or_random(random_model_dir) -> str:
    from grae.tiny import tiny_model_path

    return "tiny" if (tiny_model_path() / "config.json").exists() else str(random_model_dir)


def test_eval_cli_n64_writes_rows_table_figure_and_report(random_model_dir, tmp_path):
    task = _procedural_task()
    model = _tiny_or_random(random_model_dir)
    out_dir = tmp_path / "run"
    printed = invoke("eval", model, "--tasks", task, "--n", "64", "--num-problems", "3", "--max-tokens", "8",
                     "--batch-size", "64", "--output", out_dir, "--threads", "1")
    rows = read_rows(out_dir / f"{task}.jsonl")
    assert len(rows) == 3 * 64
    assert len({(r["question_id"], r["generation_id"]) for r in rows}) == 192
    assert all(isinstance(r["label"], bool) and r["task"] == task for r in rows)
    summary = json.loads((out_dir / "summary.json").read_text())["tasks"][task]
    assert summary["n"] == 64 and summary["num_problems"] == 3
    curve = {int(k): v for k, v in summary["pass_at_k"].items()}
    assert list(curve) == [1, 2, 4, 8, 16, 32, 64]
    assert all(a <= b + 1e-12 for a, b in zip(curve.values(), list(curve.values())[1:]))
    # the printed table holds pass@1 in percent
    assert "pass@k" in printed and f"{100 * curve[1]:.1f}" in printed
    assert (out_dir / "passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # grae passk on the same rows agrees with the summary
    again = json.loads(invoke("passk", out_dir / f"{task}.jsonl", "--json", "--bootstrap", "0"))
    assert again["pass@64"] == pytest.approx(curve[64]) and again["pass@1"] == pytest.approx(curve[1])
    # grae report: an eval dir and a seeds-format file, one figure per task and a markdown table
    seeds = write_jsonl(tmp_path / "seeds.jsonl", [{**r, "task": task} for r in seeds_rows(3, 64, seed=9)])
    report_dir = tmp_path / "report"
    printed = invoke("report", out_dir, seeds, "--output", report_dir, "--label", "model-a", "--label", "seeds")
    assert (report_dir / f"passk_{task}.png").read_bytes()[:4] == b"\x89PNG"
    md = (report_dir / "report.md").read_text()
    assert f"| model-a | {100 * curve[1]:.1f} |" in md and "| seeds |" in md and "pass@64" in md
    assert md in printed


def test_eval_killed_midway_resumes_without_loss_or_duplicates(random_model_dir, tmp_path):
    task = _procedural_task()
    n, problems = 16, 16
    args = ["eval", str(random_model_dir), "--tasks", task, "--n", str(n), "--num-problems", str(problems),
            "--max-tokens", "24", "--batch-size", "8", "--temperature", "1.0", "--threads", "1"]
    killed_dir = tmp_path / "killed"
    rows_path = killed_dir / f"{task}.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from grae.cli import main; main()", *args, "--output", str(killed_dir)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + scaled(60)
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if rows_path.exists() and rows_path.read_bytes().count(b"\n") >= 24:  # three calls on disk
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"eval ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(scaled(10))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    on_disk = len(read_rows(rows_path))
    assert 24 <= on_disk < n * problems
    with open(rows_path, "a") as f:  # a row torn by the kill
        f.write('{"question_id": "torn", "generation_id": 3, "respo')
    invoke(*args, "--output", killed_dir)
    resumed = read_rows(rows_path)
    pairs = [(r["question_id"], r["generation_id"]) for r in resumed]
    assert len(pairs) == len(set(pairs)) == n * problems
    per_problem: dict[str, list[int]] = {}
    for q, g in pairs:
        per_problem.setdefault(q, []).append(g)
    assert len(per_problem) == problems and all(sorted(g) == list(range(n)) for g in per_problem.values())
    summary = json.loads((killed_dir / f"{task}.summary.json").read_text())
    assert summary["num_resumed"] == on_disk and summary["num_generated"] == n * problems - on_disk
    # the resumed samples are the ones an uninterrupted run draws
    clean_dir = tmp_path / "clean"
    invoke(*args, "--output", clean_dir)
    clean = {(r["question_id"], r["generation_id"]): r["response"] for r in read_rows(clean_dir / f"{task}.jsonl")}
    assert {(r["question_id"], r["generation_id"]): r["response"] for r in resumed} == clean


# -- benchmarks ----------------------------------------------------------------------------------------


def test_benchmarks_read_local_copies_with_grae_data_field_mappings(tmp_path):
    from grae.data import SOURCES
    from grae.eval.benchmarks import BENCHMARKS, get_benchmark
    from grae.eval.runner import predicted_answer
    from grae.eval.tasks import load_examples, resolve_task

    assert set(BENCHMARKS) == {"math", "math500", "aime2024", "aime2025", "amc23", "gsm8k", "minerva", "olympiadbench"}
    assert all(b.source in SOURCES for b in BENCHMARKS.values())
    assert SOURCES[BENCHMARKS["math"].source].path == "DigitalLearningGmbH/MATH-lighteval"
    math_file = write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "Compute $1+1$.", "level": "Level 1", "type": "Algebra", "solution": "We get $\\boxed{2}$."},
        {"problem": "Simplify.", "level": "Level 5", "type": "Algebra",
         "solution": "First \\boxed{3}, finally $\\boxed{\\frac{1}{2}}$."},
    ])
    gsm_file = write_jsonl(tmp_path / "gsm.jsonl", [{"question": "How many?", "answer": "3 + 4 = 7\n#### 1,024"}])

    math = resolve_task(f"math={math_file}")  # the full-MATH mapping: gold = last \boxed of the solution
    examples = load_examples(math, None)
    assert [e["answer"] for e in examples] == ["2", "\\frac{1}{2}"]
    assert all(e["task"] == "math" and e["question_id"].startswith("math/") for e in examples)
    assert examples[0]["prompt"][0]["role"] == "user" and "\\boxed{}" in examples[0]["prompt"][0]["content"]
    assert load_examples(math, 1) == examples[:1] and load_examples(math, 10) == examples
    assert math.score("so the answer is $\\boxed{\\tfrac12}$", examples[1]) == 1.0
    assert math.score("so the answer is $\\boxed{3}$", examples[1]) == 0.0
    assert predicted_answer(math, "so \\boxed{3} then \\boxed{x^{2}}") == "x^{2}"
    gsm = resolve_task(f"gsm8k={gsm_file}")
    assert gsm.name == "gsm8k" and load_examples(gsm, None)[0]["answer"] == "1024"
    plain = get_benchmark("MATH-500", math_file, prompt_style="plain")  # alias + local copy + plain prompt
    assert plain.name == "math500" and isinstance(load_examples(plain, None)[0]["prompt"], str)
    # a bare file: all of it held out, fields guessed
    bare = resolve_task(str(gsm_file))
    assert bare.name == "gsm" and len(load_examples(bare, None)) == 1
    with pytest.raises(ValueError, match="field mapping"):
        resolve_task(f"gsm8k={math_file}").heldout(None)


def test_unreachable_hub_model_fails_with_a_clear_message(tmp_path, monkeypatch):
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    for loader in (transformers.AutoConfig, transformers.AutoTokenizer):  # the first hub call fails at once (no
        monkeypatch.setattr(loader, "from_pretrained", offline)  # ~20 s of network retries on a closed machine)
    data = write_jsonl(tmp_path / "m.jsonl", [{"problem": "1+1?", "answer": "2"}])
    result = CliRunner().invoke(cli(), ["eval", "someorg/some-model", "--tasks", f"math500={data}", "--n", "2",
                                        "--output", str(tmp_path / "out"), "--backend", "hf"])
    assert result.exit_code == 1
    assert "someorg/some-model" in result.output and "hub" in result.output
    assert not (tmp_path / "out" / "math500.jsonl").exists()


# -- run integrity: grae passk refuses what it cannot count; files honour the umask ---------------


@pytest.mark.parametrize("lines, message", [
    (['{"question_id":"q1","generation_id":0,"label":1}', '{"question_id":"q1","generation_id":0,"label":0}'],
     "row 2: question q1 generation 0 appears twice with different labels"),
    (['{"question_id":"q1","generation_id":0,"label":0.7}'], "label 0.7 is not one of 0, 1, true, false"),
    (['{"question_id":"q1","generation_id":0,"label":"yes"}'], "label 'yes' is not one of 0, 1, true, false"),
    (['{"question_id":"q1","generation_id":0,"label":2}'], "label 2 is not one of 0, 1, true, false"),
])
def test_passk_refuses_rows_it_cannot_count(tmp_path, lines, message):
    path = tmp_path / "rows:100:.jsonl"  # ":100:" would become an emoji through rich markup
    path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "passk", str(path)], capture_output=True, text=True,
                          timeout=scaled(120))
    assert proc.returncode == 1 and message in proc.stdout, proc.stdout
    assert f"{path}: " in proc.stdout and len(proc.stdout.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_passk_refuses_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"question_id":"q1","label":1}\n{"question_id":"caf\xe9","label":0}\n'.encode("latin-1"))
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "passk", str(path)], capture_output=True, text=True,
                          timeout=scaled(120))
    assert proc.returncode == 1 and f"{path}:2: not UTF-8 text" in proc.stdout and "Traceback" not in proc.stderr


def test_duplicate_rows_with_the_same_label_are_one_sample():
    from grae.eval.stats import count_problems

    rows = [{"question_id": "q", "generation_id": g, "label": lab} for g, lab in [(0, 1), (1, 0), (0, True)]]
    counts = count_problems(rows)
    assert counts.n.tolist() == [2] and counts.c.tolist() == [1]


def test_atomic_writes_honour_the_umask(tmp_path):
    import stat

    from grae.eval.records import _UMASK, atomic_write_text

    path = atomic_write_text(tmp_path / "summary.json", "{}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_UMASK
    assert stat.S_IMODE(path.stat().st_mode) != 0o600 or _UMASK == 0o066
