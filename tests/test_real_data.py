"""Real data in, both ways: verl RL-schema parquet as a train and eval task, the round trip
through ``grae data export --format verl``, and hub benchmark names over local files of any schema
variant. Fixtures: five real rows per file under tests/fixtures/real (see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grae.data import get_task
from grae.data.fields import map_verl_row, verl_gold
from grae.eval.tasks import resolve_task

REAL = Path(__file__).parent / "fixtures" / "real"


def test_verl_parquet_is_a_train_and_eval_task():
    path = REAL / "verl_math_train_5.parquet"
    with pytest.warns(UserWarning, match=r"skipped 1 of 5 verl rows with an empty reward_model.ground_truth \(rows 5\)"):
        task = get_task(f"local:{path}", heldout_size=1)
        train = task.train(None)
    assert len(train) == 3 and len(task.heldout()) == 1
    first = get_task(f"local:{path}", eval_only=True)
    with pytest.warns(UserWarning):
        rows = first.heldout()
    by_answer = {r["answer"] for r in rows}
    assert "0" in by_answer  # row 0: the piecewise-continuity problem, target "0"
    assert rows[0]["question"].startswith("Let \\[f(x) = \\left\\{")
    assert task.score("so $a+b = \\boxed{0}$", {**rows[0]}) == 1.0


def test_verl_gold_variants():
    assert verl_gold("70") == "70"
    assert verl_gold(72.0) == "72"
    assert verl_gold({"question": "q", "target": "70"}) == "70"
    assert verl_gold({"solution": "so it is $\\boxed{\\frac12}$"}) == "\\frac12"
    assert verl_gold({"target": "", "solution": "there are $\\boxed{}$ primes"}) is None
    row = {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 2+2?"}],
           "reward_model": {"style": "rule", "ground_truth": "4"}, "extra_info": {"index": 7}}
    assert map_verl_row(row) == {"question": "What is 2+2?", "answer": "4", "id": "7"}


def test_export_verl_round_trip(tmp_path):
    from grae.engines.verl.export import export_verl

    source = get_task(f"local:{REAL / 'math500_5.jsonl'}", eval_only=True)
    out = export_verl("math500", tmp_path / "m.parquet", split="heldout", n=None, task=source)
    back = get_task(f"local:{out}", eval_only=True).heldout()
    original = source.heldout()
    assert [(r["question"], r["answer"]) for r in back] == [(r["question"], r["answer"]) for r in original]


@pytest.mark.parametrize(("entry", "size", "first_answer"), [
    ("math500=math500_5.jsonl", 5, "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("aime24=aime2024_5.jsonl", 5, "204"),
    ("aime25=aime2025_5.parquet", 5, "70"),
    ("aime25=verl_aime2025_5.parquet", 5, "70"),
    ("math500=verl_aime2025_5.parquet", 5, "70"),  # a verl file under any benchmark name
])
def test_benchmark_names_take_local_files_of_any_schema(entry, size, first_answer):
    name, file = entry.split("=")
    rows = resolve_task(f"{name}={REAL / file}").heldout()
    assert len(rows) == size and rows[0]["answer"] == first_answer
