"""Gate v3's second design, "the conflicting rare mode": ``chain_trace`` with two process-verified
strategies chosen by the first token (``L`` running totals, ``G`` grouped sums), its ``totals`` filter, the exact p
summed over both gold completions, and the ``trace-two-modes`` build recipe's SFT stream."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("reasoning_gym")

from grae.data import get_task
from grae.data.trace import expression_of, grouped_answer, left_answer, running_totals, totals_class
from timeouts import scaled
from tolerances import assert_close_scaled

RANGE = dict(generator="chain_range", min_terms=4, max_terms=5, max_value=30)
PARAMS = dict(RANGE, strategies="two", heldout_size=40, heldout_strata=["num_terms"])
QUESTION = "State the final answer to the following arithmetic problem: {} ="


def example_of(expression: str) -> dict:
    return {"question": QUESTION.format(expression), "answer": left_answer(expression)}


chains = st.tuples(st.integers(0, 60), st.lists(st.tuples(st.sampled_from("+-"), st.integers(0, 60)), min_size=1,
                                                max_size=5)).map(lambda t: f"{t[0]} " + " ".join(f"{s} {n}" for s, n in t[1]))


def test_the_two_strategies_by_hand():
    assert left_answer("4 + 7 + 12 - 11 - 18") == "L 11 23 12 -6"
    assert grouped_answer("4 + 7 + 12 - 11 - 18") == "G 23 29 -6"
    assert grouped_answer("30 - 5 - 0 + 2") == "G 32 5 27"  # the first operand is a + operand
    assert grouped_answer("12 + 16 + 28") == "G 56 0 56"  # no - operand: its sum is 0
    assert totals_class("30 + 30 + 30 + 9") == "in_range"  # 60 90 99: the bounds are inside
    assert totals_class("30 + 30 + 30 + 10") == "excursion"  # 100
    assert totals_class("5 - 6 + 30") == "excursion"  # -1 on the way, back in range at the end
    with pytest.raises(ValueError, match="strategies must be one of left, two"):
        get_task("chain_trace", **{**RANGE, "strategies": "both"})
    with pytest.raises(ValueError, match="totals must be one of any, in_range, excursion"):
        get_task("chain_trace", **{**RANGE, "totals": "inrange"})


@settings(max_examples=300, deadline=None)
@given(chains, st.integers(0, 4), st.integers(1, 9))
def test_the_verifier_accepts_either_whole_correct_trace_and_refuses_the_rest(expression, position, delta):
    """Property: the L and the G trace of any chain score 1 (whitespace aside); a trace with one number changed, one
    missing or one added, a marker over the other strategy's numbers and the bare running totals score 0."""
    task = get_task("chain_trace", **PARAMS)
    example = example_of(expression)
    left, grouped = left_answer(expression), grouped_answer(expression)
    assert sorted(task.gold_completions(example)) == sorted([" " + left, " " + grouped])
    assert left.split()[1:] == [str(v) for v in running_totals(expression)]
    plus, minus, result = (int(v) for v in grouped.split()[1:])
    assert result == eval(expression) == plus - minus and minus >= 0  # noqa: S307 (digits and +/- only)
    for accepted in (left, grouped):
        assert task.score(" " + accepted, example) == 1.0
        assert task.score("  " + accepted.replace(" ", "  ") + "\nanything", example) == 1.0
        marker, *numbers = accepted.split()
        changed = list(numbers)
        changed[position % len(numbers)] = str(int(changed[position % len(numbers)]) + delta)
        wrong = [changed, numbers[:-1], numbers + [numbers[-1]]]
        other = "G" if marker == "L" else "L"
        mixed = [other, *numbers]
        for text in [" ".join([marker, *w]) for w in wrong] + [" ".join(mixed), " ".join(numbers)]:
            if text not in (left, grouped):  # "G t1 t2 t3" is the G trace when the totals happen to be its sums
                assert task.score(" " + text, example) == 0.0, text
    # strategies="left" (today's chain_trace) keeps the bare trace as its only answer
    plain = get_task("chain_trace", **{**PARAMS, "strategies": "left"})
    bare = {"question": example["question"], "answer": " ".join(left.split()[1:])}
    assert plain.score(" " + bare["answer"], bare) == 1.0 and plain.score(" " + left, bare) == 0.0
    assert plain.gold_completions(bare) == [" " + bare["answer"]]


@settings(max_examples=300, deadline=None)
@given(chains)
def test_totals_class_is_whether_every_running_total_stays_in_0_99(expression):
    """Property, against the prefixes' values by Python's eval."""
    terms = expression.split(" ")
    prefixes = [eval(" ".join(terms[:i])) for i in range(3, len(terms) + 1, 2)]  # noqa: S307 (digits and +/- only)
    assert totals_class(expression) == ("in_range" if all(0 <= v <= 99 for v in prefixes) else "excursion")


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2047))
def test_the_totals_filter_splits_the_stream_without_reordering_it(seed):
    """Property over training seeds: in_range and excursion hold only their class and together are the unfiltered
    stream in its order; held-out splits of every filter hold their class and never meet a training split."""
    tasks = {totals: get_task("chain_trace", **{**PARAMS, "totals": totals}) for totals in ("any", "in_range", "excursion")}
    streams = {k: [e["question"] for e in t.train(60, seed=seed)] for k, t in tasks.items()}
    for totals in ("in_range", "excursion"):
        assert all(totals_class(expression_of(q)) == totals for q in streams[totals])
    everything = streams["any"]
    for totals in ("in_range", "excursion"):  # the filtered stream is the unfiltered one with the others skipped
        mine = [q for q in everything if totals_class(expression_of(q)) == totals]
        assert streams[totals][:len(mine)] == mine[:len(streams[totals])]
    assert 0 < len([q for q in everything if totals_class(expression_of(q)) == "in_range"]) < len(everything)
    for totals, task in tasks.items():
        held = task.heldout()
        assert len(held) == 40 and {task.stratum(e) for e in held} == {(4,), (5,)}
        if totals != "any":
            assert {totals_class(expression_of(e["question"])) for e in held} == {totals}
        assert not {e["question"] for e in held} & set().union(*map(set, streams.values()))


def test_heldout_can_be_stratified_by_the_totals_class():
    task = get_task("chain_trace", **{**PARAMS, "heldout_strata": ["num_terms", "totals"]})
    held = task.heldout()
    counts = {s: sum(task.stratum(e) == s for e in held) for s in {task.stratum(e) for e in held}}
    assert counts == {(n, c): 10 for n in (4, 5) for c in ("excursion", "in_range")}
    for e in held:
        assert task.stratum(e)[1] == totals_class(expression_of(e["question"]))


# --- exact p: the sum of the two teacher-forced gold completions ------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    from grae.eval.backends import load_hf

    model, tokenizer, _ = load_hf("tiny", device="cpu", dtype="float32")
    return model, tokenizer


def direct_logp(model, tokenizer, prompt: str, completion: str, temperature: float) -> float:
    """log π_T(completion + EOS | prompt): one unpadded forward, log-softmax of logits / T, summed."""
    import torch

    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p + c])).logits[0].double()
    logp = torch.log_softmax(logits[len(p) - 1:-1] / temperature, dim=-1)
    return float(logp[torch.arange(len(c)), torch.tensor(c)].sum())


@pytest.mark.parametrize("temperature", [1.0, 1.7])
def test_exact_p_is_the_sum_of_both_gold_completions_probabilities(tiny, temperature):
    """gold_probs (batched, right-padded, the two golds in different batches) equals π(" L …") + π(" G …") computed
    one sequence at a time; the one-strategy task's p is the bare trace's alone."""
    from grae.eval.gold import gold_prob_parts, gold_probs

    model, tok = tiny
    task = get_task("chain_trace", **PARAMS)
    examples = task.heldout(7)
    p = gold_probs(model, tok, examples, task, temperature=temperature, batch=3)
    parts = np.array([[np.exp(direct_logp(model, tok, e["prompt"], " " + a(expression_of(e["question"])), temperature))
                       for a in (left_answer, grouped_answer)] for e in examples])
    assert (parts > 0).all() and (parts[:, 1] > 1e-3 * parts[:, 0]).any()  # both terms count somewhere
    # p spans orders of magnitude across problems: compare log p, to 1e-4 of p each (dropping G moves some > 1e-3)
    assert_close_scaled(np.log(p), np.log(parts.sum(axis=1)), rel=1e-4, scale=1.0)  # tol: float32 logits, 2 batchings
    terms = gold_prob_parts(model, tok, examples, task, temperature=temperature, batch=4)  # [P, 2]: L, G
    assert terms.shape == (7, 2)
    assert_close_scaled(np.log(terms), np.log(parts), rel=1e-4, scale=1.0)  # tol: as above
    plain = get_task("chain_trace", **{**PARAMS, "strategies": "left"})
    bare = [direct_logp(model, tok, e["prompt"], " " + " ".join(e["answer"].split()[1:]), temperature)
            for e in examples]
    assert_close_scaled(np.log(gold_probs(model, tok, plain.heldout(7), plain, temperature=temperature)), bare,
                        rel=1e-4, scale=1.0)  # tol: as above


def test_gold_completions_must_be_distinct_and_accepted(tiny):
    from grae.eval.gold import GoldExactError, gold_probs

    class Twice(type(get_task("chain_trace", **PARAMS))):
        def gold_completions(self, example):
            return super().gold_completions(example)[:1] * 2  # the same text twice would count its mass twice

    task = Twice(**PARAMS)
    with pytest.raises(GoldExactError, match="distinct texts"):
        gold_probs(*tiny, task.heldout(2), task)


def test_band_exact_scores_the_two_strategy_task(tmp_path):
    """`grae data band --exact` on the new task: every row's pass rate is the summed p of its problem."""
    from grae.data.band import read_band

    params = {**PARAMS, "totals": "excursion"}
    out = tmp_path / "band.jsonl"
    cmd = [sys.executable, "-m", "grae.cli", "data", "band", "--model", "tiny", "--task", "chain_trace",
           *[f"--param={k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in params.items()],
           "--pool", "6", "--seed", "2", "--exact", "--lo", "0", "--hi", "1", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(300),
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    header, rows = read_band(out)
    assert header["method"] == "exact" and header["params"]["strategies"] == "two" and len(rows) == 6
    assert all(totals_class(expression_of(r["question"])) == "excursion" for r in rows)
    assert all(r["answer"].startswith("L ") for r in rows)


# --- the trace-two-modes recipe ---------------------------------------------------------------------------------

def recipe_stream(n: int, held: set[str] | None = None) -> list[tuple[str, str]]:
    from grae.tiny.build import RECIPES, TinyRecipe, _sft_examples
    from grae.tiny.tasks import TinyTask

    recipe = TinyRecipe(**RECIPES["trace-two-modes"])
    return list(itertools.islice(_sft_examples(recipe, TinyTask(recipe.task, dict(recipe.task_kwargs)), held or set()),
                                 n))


def test_recipe_stream_shows_left_on_in_range_chains_only_and_grouped_on_any_at_its_share():
    stream = recipe_stream(4000)
    task = get_task("chain_trace", **PARAMS)
    grouped = [q for q, target in stream if target.startswith("G ")]
    left = [q for q, target in stream if target.startswith("L ")]
    assert len(grouped) + len(left) == len(stream)
    # 4,000 draws at 0.12: standard deviation 0.0051
    assert abs(len(grouped) / len(stream) - 0.12) < 0.021  # tol: 4 standard deviations of a binomial share
    assert all(totals_class(expression_of(q)) == "in_range" for q in left)
    excursion = [q for q in grouped if totals_class(expression_of(q)) == "excursion"]
    # G is drawn on any chain: about half of them are excursions (48 % of chain_range's 4-5-term chains)
    assert 0.35 < len(excursion) / len(grouped) < 0.6  # tol: the excursion share of ~480 draws, > 4 sd either side
    for question, target in stream:  # every target is a correct trace the task's verifier accepts
        assert task.score(" " + target, {"question": question, "answer": ""}) == 1.0
    skipped = {" ".join(q.split()) for q, _ in stream[:50]}
    assert not skipped & {" ".join(q.split()) for q, _ in recipe_stream(300, skipped)}


def test_recipe_markers_are_single_tokens_and_sft_skips_every_filtered_heldout_split():
    from grae.tiny.build import RECIPES, TinyRecipe, excluded_questions, train_tokenizer
    from grae.tiny.tasks import TinyTask

    recipe = TinyRecipe(**RECIPES["trace-two-modes"])
    tok = train_tokenizer(recipe.vocab_size, recipe.tokenizer_corpus_per_task)
    for marker in (" L", " G"):
        assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1
    held = excluded_questions(TinyTask(recipe.task, dict(recipe.task_kwargs)), recipe.heldout_params,
                              recipe.heldout_draws)
    for totals in ("any", "in_range", "excursion"):
        for strata in (["num_terms"], ["num_terms", "totals"]):
            task = get_task("chain_trace", **{**RANGE, "strategies": "two", "totals": totals, "heldout_size": 1000,
                                              "heldout_strata": strata})
            assert {" ".join(e["question"].split()) for e in task.heldout()} <= held


def test_recipe_builds_twenty_steps_and_evaluates_on_the_two_strategy_task(tmp_path):
    from grae.tiny.build import build_tiny

    out = build_tiny(tmp_path / "m", recipe_name="trace-two-modes", sft_steps=20, batch_size=8, hidden_size=32,
                     intermediate_size=64, num_hidden_layers=1, tokenizer_corpus_per_task=200, eval_problems=4,
                     eval_samples=2, num_threads=1, log=lambda *_: None)
    info = json.loads((out / "build_info.json").read_text())
    assert info["recipe"]["answer_style"] == "two_modes" and len(info["sft_history"]) == 0  # logs every 100 steps
    assert info["base_eval_task"] == {"task": "chain_trace", "task_kwargs": {
        "generator": "chain_range", "strategies": "two", "min_terms": 4, "max_terms": 5, "max_value": 30,
        "heldout_size": 600, "heldout_strata": ["num_terms"]}}
    assert info["base_eval"]["n_problems"] == 4 and 0.0 <= info["base_eval"]["pass@1"] <= 1.0
    with pytest.raises(ValueError, match="grouped_share"):
        build_tiny(tmp_path / "n", recipe_name="trace-two-modes", grouped_share=1.5)
