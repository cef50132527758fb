"""Rows are checked before they are used: a resumed ``grae eval`` re-checks each row on disk
against the task (gold and label), ``math500=FILE`` / ``aime2024=FILE`` refuse a question under two golds as
``t=FILE`` does, and a gold that is not a number or text is refused with file:line."""

from __future__ import annotations

import json

import pytest

from grae.data import get_task
from grae.data.fields import DataFormatError
from grae.eval.records import RecordsError, read_rows
from grae.eval.runner import run_samples
from grae.eval.tasks import resolve_task
from test_eval import AddTask, ScriptedSampler


def _edit(path, number: int, **changes) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = json.dumps(json.loads(lines[number - 1]) | changes)
    path.write_text("\n".join(lines) + "\n")


def _first_wrong(rows) -> int:
    return next(i for i, row in enumerate(rows, 1) if not row["label"])


@pytest.mark.parametrize(("edit", "said"), [
    (lambda row: {"gold_answer": "0", "label": True}, "gold_answer '0', the task's is"),
    (lambda row: {"label": True}, "label True, but the task's verifier scores its response False"),
    (lambda row: {"label": "yes"}, "expected a text response and a true/false label"),
])
def test_a_resumed_eval_refuses_rows_whose_gold_or_label_the_task_does_not_give(tmp_path, edit, said):
    task, sampler = AddTask(), ScriptedSampler()
    examples = task.heldout(4)
    out = tmp_path / "add.jsonl"
    first = run_samples(sampler, examples, task, n=4, batch_size=4, seed=0, output_path=out, bootstrap=0)
    rows = read_rows(out)
    number = _first_wrong(rows)
    _edit(out, number, **edit(rows[number - 1]))
    with pytest.raises(RecordsError, match=f"row {number} .*" + said.replace("(", r"\(")):
        run_samples(sampler, examples, task, n=4, batch_size=4, seed=0, output_path=out, bootstrap=0)
    _edit(out, number, **rows[number - 1])  # put back: the resume counts every row, pass@1 unchanged
    again = run_samples(sampler, examples, task, n=4, batch_size=4, seed=0, output_path=out, bootstrap=0)
    assert again.num_generated == 0 and again.curve[1] == first.curve[1]  # tol: exact, the same labels


@pytest.mark.parametrize("bench", ["math500", "aime2024"])
def test_a_benchmark_file_with_one_question_under_two_golds_is_refused_like_a_task_file(tmp_path, bench):
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [
        {"problem": "What is 1 + 1?", "answer": "2"}, {"problem": "What is 2 + 2?", "answer": "4"},
        {"problem": "What is 1 + 1?", "answer": "3"}]))
    said = r"bench.jsonl:3: the question of line 1 again with another gold answer \('3' here, '2' there\)"
    with pytest.raises(DataFormatError, match=said):
        resolve_task(f"t={path}").heldout(None)
    with pytest.raises(DataFormatError, match=said):
        resolve_task(f"{bench}={path}").heldout(None)


def test_a_gold_that_is_an_object_is_refused_with_file_and_line(tmp_path):
    path = tmp_path / "own.jsonl"
    path.write_text('{"question": "one", "answer": "1"}\n{"question": "two", "answer": {"a": 1}}\n')
    with pytest.raises(DataFormatError, match=r"own.jsonl:2: gold answer \{'a': 1\} is an object, not a number or text"):
        get_task(str(path)).splits()
    verl = tmp_path / "verl.jsonl"
    verl.write_text(json.dumps({"data_source": "x", "prompt": [{"role": "user", "content": "q?"}],
                                "reward_model": {"ground_truth": {"target": {"a": 1}}}}) + "\n")
    with pytest.raises(DataFormatError, match=r"verl.jsonl:1: reward_model.ground_truth: gold answer \{'a': 1\}"):
        get_task(str(verl)).splits()
