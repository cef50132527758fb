"""``chain_trace`` (gate v2): chain_sum answered with every running total, verified whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("reasoning_gym")

from grae.data import get_task
from grae.data.trace import expression_of, running_totals, trace_answer

PARAMS = dict(min_terms=4, max_terms=5, min_digits=1, max_digits=2, heldout_size=40,
              heldout_strata=["num_terms", "num_digits"])


def test_running_totals_by_hand():
    assert running_totals("12 + 45 - 7 + 30") == [57, 50, 80]
    assert trace_answer("0 - 4 - 0 + 8") == "-4 -4 4"
    assert expression_of("State the final answer to the following arithmetic problem: 4 - 1 =") == "4 - 1"
    with pytest.raises(ValueError, match="not a chain_sum expression"):
        running_totals("+ 3")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("+-"), st.integers(0, 999)), min_size=1, max_size=6),
       st.integers(0, 999))
def test_last_total_is_the_expression_value(ops, first):
    """Property: the trace has one total per operator and ends at the expression's value (Python's eval)."""
    expression = f"{first} " + " ".join(f"{s} {n}" for s, n in ops)
    totals = running_totals(expression)
    assert len(totals) == len(ops) and totals[-1] == eval(expression)  # noqa: S307 (digits and +/- only)


def test_task_gold_is_the_trace_of_chain_sums_question_and_scoring_is_whole_line():
    trace, plain = get_task("chain_trace", **PARAMS), get_task("chain_sum", **PARAMS)
    held = trace.heldout()
    assert [e["question"] for e in held] == [e["question"] for e in plain.heldout()]  # the same held-out split
    for e, p in zip(held, plain.heldout()):
        totals = [int(v) for v in e["answer"].split()]
        assert totals[-1] == int(p["answer"]) and len(totals) == trace.stratum(e)[0] - 1
    e = held[0]
    assert trace.score(" " + e["answer"], e) == 1.0
    assert trace.score("  " + e["answer"].replace(" ", "   ") + "\nmore", e) == 1.0  # whitespace, later lines
    totals = e["answer"].split()
    wrong_middle = " ".join([str(int(totals[0]) + 1)] + totals[1:])  # right final answer, wrong running total
    assert trace.score(" " + wrong_middle, e) == 0.0
    assert trace.score(" " + totals[-1], e) == 0.0  # the final answer alone is not the trace
    assert trace.answer_set() is None
    train = trace.train(30, seed=1)
    assert not {x["question"] for x in train} & {x["question"] for x in held}


def test_trace_recipe_sft_targets_are_traces():
    """The `trace` build recipe feeds SFT the chain_trace gold completion, never the bare answer."""
    from grae.tiny.build import RECIPES, TinyRecipe, _sft_batches, train_tokenizer
    from grae.tiny.tasks import TinyTask

    recipe = TinyRecipe(**{**RECIPES["trace"], "batch_size": 4, "tokenizer_corpus_per_task": 100})
    tok = train_tokenizer(recipe.vocab_size, recipe.tokenizer_corpus_per_task)
    batch = next(_sft_batches(recipe, tok, TinyTask(recipe.task, dict(recipe.task_kwargs)), set()))
    for ids, labels in zip(batch["input_ids"], batch["labels"]):
        text = tok.decode(ids[labels != -100], skip_special_tokens=True)
        prompt = tok.decode(ids[(labels == -100) & (ids != tok.pad_token_id)], skip_special_tokens=True)
        assert text.strip() == trace_answer(expression_of(prompt.split("\n")[0]))


def test_chain_range_draws_operands_in_range_deterministically_with_chain_sums_text():
    import reasoning_gym

    ds = reasoning_gym.create_dataset("chain_range", seed=7, size=50, min_terms=4, max_terms=5, max_value=30)
    again = reasoning_gym.create_dataset("chain_range", seed=7, size=50, min_terms=4, max_terms=5, max_value=30)
    for i in range(50):
        e = ds[i]
        assert e == again[i]
        operands = [int(v) for v in e["metadata"]["expression"].replace("+", " ").replace("-", " ").split()]
        assert 4 <= len(operands) == e["metadata"]["num_terms"] <= 5 and all(0 <= v <= 30 for v in operands)
        assert e["answer"] == str(running_totals(e["metadata"]["expression"])[-1])
        assert expression_of(e["question"]) == e["metadata"]["expression"]
    with pytest.raises(ValueError, match="max_value"):
        reasoning_gym.create_dataset("chain_range", seed=0, size=5, max_value=0)
    trace = get_task("chain_trace", generator="chain_range", min_terms=4, max_terms=5, max_value=30, heldout_size=40,
                     heldout_strata=["num_terms"])
    held = trace.heldout()
    assert {trace.stratum(e) for e in held} == {(4,), (5,)}
    assert not {e["question"] for e in trace.train(40, seed=3)} & {e["question"] for e in held}
    with pytest.raises(ValueError, match="generator must be chain_sum or chain_range"):
        get_task("chain_trace", generator="products")
