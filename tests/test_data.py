"""grae.data: registry, reasoning-gym splits (disjoint, deduplicated), prompt styles, task mixes, hub field
mappings on hand-made rows, hub split logic with a fake loader, local JSONL/JSON/Parquet files."""

from __future__ import annotations

import json

import pytest

import grae.data as D
from grae.data import fields
from grae.data.base import question_key
from grae.data.hub import SOURCES, HubSource, HubTask
from grae.data.procedural import HELDOUT_BASE, MAX_DRAWS, train_base

# --- registry ------------------------------------------------------------------------------------


def test_registry_names_and_unknown_name_lists_valid_ones():
    names = D.task_names()
    for expected in ("chain_sum", "basic_arithmetic", "products", "gcd", "count_bits", "lcm", "math", "math500",
                     "gsm8k", "deepscaler", "dapo_math", "aime24", "aime25", "amc23", "minerva", "olympiadbench"):
        assert expected in names
    with pytest.raises(D.UnknownTaskError) as err:
        D.get_task("chain_summ")
    assert "chain_sum" in str(err.value) and "rg:" in str(err.value) and "local:" in str(err.value)
    with pytest.raises(D.UnknownTaskError, match="leg_counting"):
        D.get_task("rg:no_such_generator")


def test_register_custom_task():
    @D.register_task("test_tiny_rows")
    def make(**params):
        return D.RowListTask("test_tiny_rows", [{"question": f"q{i}", "answer": str(i)} for i in range(20)], **params)

    task = D.get_task("test_tiny_rows", heldout_size=5)
    assert len(task.heldout()) == 5 and len(task.train(None)) == 15
    assert "test_tiny_rows" in D.task_names()
    with pytest.raises(ValueError, match="already registered"):
        D.register_task("test_tiny_rows")(lambda: None)
    with pytest.raises(ValueError, match="':'"):
        D.register_task("a:b")


def test_rg_prefix_and_generator_kwargs():
    task = D.get_task("rg:leg_counting", heldout_size=10)
    assert task.name == "rg:leg_counting"
    ex = task.train(3, seed=0)
    assert [e["task"] for e in ex] == ["rg:leg_counting"] * 3
    assert all(task.score(" " + e["answer"], e) == 1.0 for e in ex)
    with pytest.raises(TypeError, match="managed by grae"):
        D.get_task("chain_sum", seed=3)
    with pytest.raises(TypeError):
        D.get_task("chain_sum", no_such_option=1)


# --- reasoning-gym splits ------------------------------------------------------------------------


def test_seed_windows_are_disjoint_from_heldout():
    for seed in (0, 1, 7, 2047, 2048, 10**9):
        base = train_base(seed)
        assert 0 <= base and base + MAX_DRAWS <= HELDOUT_BASE
    assert HELDOUT_BASE + MAX_DRAWS < 2**32  # numpy.random.seed limit used by some generators
    assert len({train_base(s) for s in range(2048)}) == 2048
    with pytest.raises(ValueError):
        train_base(-1)


def test_rg_train_heldout_disjoint_deterministic_and_stable_ids():
    task = D.get_task("products", heldout_size=200)
    heldout = task.heldout(200)
    train0 = task.train(400, seed=0)
    train1 = task.train(400, seed=1)
    held_q = {question_key(e["question"]) for e in heldout}
    for split in (heldout, train0, train1):
        qs = [question_key(e["question"]) for e in split]
        assert len(set(qs)) == len(qs)  # no duplicates inside a split
        assert len({e["question_id"] for e in split}) == len(split)
    assert not held_q & {question_key(e["question"]) for e in train0 + train1}
    assert D.get_task("products", heldout_size=200).train(400, seed=0) == train0  # same params -> same data
    assert train0 != train1
    assert heldout[:50] == task.heldout(50)
    with pytest.raises(ValueError, match="heldout_size"):
        task.heldout(201)
    for e in heldout[:5] + train0[:5]:
        assert set(D.EXAMPLE_KEYS) <= set(e)


def test_rg_dedup_with_a_tiny_question_space():
    # 1-digit a +/- b: at most 10 * 10 * 2 = 200 distinct questions
    params = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, heldout_size=60)
    task = D.get_task("chain_sum", **params)
    heldout = {question_key(e["question"]) for e in task.heldout()}
    train = task.train(100, seed=3)
    keys = [question_key(e["question"]) for e in train]
    assert len(set(keys)) == 100 and not heldout & set(keys)
    with pytest.raises(ValueError, match="distinct training questions"):
        task.train(190, seed=3)


def test_plain_prompt_and_scoring():
    task = D.get_task("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2)
    ex = task.train(5, seed=0)
    for e in ex:
        assert e["prompt"] == e["question"] + "\nAnswer:"
        assert task.score(f" {e['answer']}", e) == 1.0
        assert task.score(f" {e['answer']}\nQuestion: next", e) == 1.0
        assert task.score(f" {e['answer']}5", e) == 0.0  # partial credit binarised away
        assert task.score(" ", e) == 0.0
        assert task.score(b"\xff\xfe", e) == 0.0
    assert task.answer_format == "plain"


def test_chat_prompt_and_answer_tags():
    task = D.get_task("gcd", prompt_style="chat")
    e = task.train(1, seed=0)[0]
    system, user = e["prompt"]
    assert system["role"] == "system" and "<answer>" in system["content"]
    assert user == {"role": "user", "content": e["question"]}
    answer = e["answer"]
    assert task.score(f"thinking <answer>{answer}</answer>", e) == 1.0
    assert task.score([{"role": "assistant", "content": f"<answer>{answer}</answer>"}], e) == 1.0
    assert task.score(answer, e) == 0.0  # chat style requires the tag (or a box)
    assert task.answer_format == "answer_tag"
    no_system = D.get_task("gcd", prompt_style="chat", system_prompt=None).train(1, seed=0)[0]
    assert [m["role"] for m in no_system["prompt"]] == ["user"]
    with pytest.raises(ValueError, match="prompt_style"):
        D.get_task("gcd", prompt_style="fancy")


def test_score_regenerates_metadata_in_a_fresh_task():
    task = D.get_task("count_bits")
    e = task.train(1, seed=5)[0]
    fresh = D.get_task("count_bits")
    assert fresh.entry_for(e)["metadata"] == task.entry_for(e)["metadata"]
    assert fresh.score(" " + e["answer"], e) == 1.0


def test_task_mix():
    assert D.parse_mix_spec("chain_sum=2, products ,gcd=0.5") == {"chain_sum": 2.0, "products": 1.0, "gcd": 0.5}
    with pytest.raises(ValueError):
        D.parse_mix_spec("chain_sum=lots")
    mix = D.get_task("mix:chain_sum=3,gcd=1", heldout_size=50)
    train = mix.train(400, seed=0)
    counts = {name: sum(e["task"] == name for e in train) for name in ("chain_sum", "gcd")}
    assert counts["chain_sum"] + counts["gcd"] == 400 and 250 < counts["chain_sum"] < 350
    assert len({question_key(e["question"]) for e in train}) == 400
    heldout = mix.heldout(40)
    assert sorted(e["task"] for e in heldout).count("chain_sum") == 30
    assert not {e["question_id"] for e in heldout} & {e["question_id"] for e in train}
    assert not {question_key(e["question"]) for e in mix.heldout()} & {question_key(e["question"]) for e in train}
    assert mix.train(400, seed=0) == train
    assert all(mix.score(" " + e["answer"], e) == 1.0 for e in train[:20] + heldout[:20])
    with pytest.raises(ValueError, match="not a component"):
        mix.score("1", {"task": "lcm", "answer": "1"})
    with pytest.raises(ValueError, match="prompt_style"):
        D.TaskMix({D.get_task("gcd", prompt_style="chat"): 1, D.get_task("lcm"): 1})


def test_to_hf_dataset_and_task_reward_fn():
    task = D.get_task("lcm", prompt_style="chat")
    examples = task.train(4, seed=0)
    ds = task.to_hf_dataset(examples)
    assert set(ds.column_names) == set(D.EXAMPLE_KEYS)
    assert ds[0]["prompt"] == examples[0]["prompt"]
    reward = task.reward_fn()
    assert reward.__name__ == "accuracy"
    # TRL passes all columns but prompt as keyword lists
    columns = {k: ds[k] for k in ds.column_names if k != "prompt"}
    completions = [[{"role": "assistant", "content": f"<answer>{a}</answer>"}] for a in ds["answer"]]
    completions[1] = [{"role": "assistant", "content": "<answer>0</answer>"}]
    out = reward(prompts=ds["prompt"], completions=completions, completion_ids=[[1]] * 4, trainer_state=None,
                 log_metric=lambda *a: None, log_extra=lambda *a: None, **columns)
    assert out == [1.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="one prompt_style"):
        D.to_hf_dataset(examples[:1] + D.get_task("lcm").train(1))


# --- hub field mappings (pure functions on hand-made rows) ----------------------------------------


def test_math_rows():
    row = {"problem": "Compute $\\frac{1}{2}+\\frac{1}{2}$.", "level": "Level 1", "type": "Algebra",
           "solution": "We get $\\boxed{\\frac{1}{2}}$ twice, so $\\boxed{\\frac{2}{2}} = \\boxed{1}$."}
    assert fields.map_math_row(row) == {"question": row["problem"], "answer": "1", "id": None}
    nested = {"problem": "p", "solution": "Thus $\\boxed{\\{x : x^{2} > 1\\}}$."}
    assert fields.map_math_row(nested)["answer"] == "\\{x : x^{2} > 1\\}"
    assert fields.map_math_row({"problem": "p", "solution": "no box"}) is None


def test_math500_gsm8k_deepscaler_rows():
    m500 = {"problem": "p", "solution": "... \\boxed{3}", "answer": "3", "subject": "Algebra", "level": 2,
            "unique_id": "test/algebra/1.json"}
    assert fields.map_math500_row(m500) == {"question": "p", "answer": "3", "id": "test/algebra/1.json"}
    gsm = {"question": "How many?", "answer": "48/2 = <<48/2=24>>24\n24 + 48 = 1,200\n#### 1,200"}
    assert fields.map_gsm8k_row(gsm) == {"question": "How many?", "answer": "1200", "id": None}
    assert fields.map_gsm8k_row({"question": "q", "answer": "no marker"}) is None
    ds = {"problem": "p", "answer": "$\\frac{\\sqrt{3}}{2}$", "solution": "..."}
    assert fields.map_deepscaler_row(ds)["answer"] == "\\frac{\\sqrt{3}}{2}"


def test_dapo_rows():
    content = (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
        "Find $x$ if $2x = 34$.\n\nRemember to put your answer on its own line after \"Answer:\"."
    )
    row = {"data_source": "math_dapo", "prompt": [{"role": "user", "content": content}], "ability": "MATH",
           "reward_model": {"ground_truth": "17", "style": "rule-lighteval/MATH_v2"},
           "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}}
    assert fields.map_dapo_row(row) == {"question": "Find $x$ if $2x = 34$.", "answer": "17",
                                        "id": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}
    assert fields.map_dapo_row({**row, "reward_model": {}}) is None


def test_generic_rows_for_benchmarks():
    assert fields.map_generic_row({"problem": "p", "answer": 72.0, "id": 3}) == {"question": "p", "answer": "72", "id": "3"}
    olympiad = {"question": "q", "final_answer": ["$\\frac{1}{2}$"], "solution": ["..."]}
    assert fields.map_generic_row(olympiad)["answer"] == "\\frac{1}{2}"
    assert fields.map_generic_row({"question": "q", "final_answer": ["$1$", "$2$"]})["answer"] == "1, 2"
    assert fields.map_generic_row({"Problem": "q", "Answer": "204"})["answer"] == "204"
    assert fields.map_generic_row({"problem": "q", "solution": "so \\boxed{5}"})["answer"] == "5"
    assert fields.map_generic_row({"task": "q", "gt": "5"}, problem_field="task", answer_field="gt")["answer"] == "5"
    assert fields.answer_to_str(float("nan")) is None and fields.answer_to_str(0.5) == "0.5"


def test_hub_sources_cover_the_benchmarks():
    for key in ("math_train", "math500", "gsm8k_train", "gsm8k_test", "deepscaler", "dapo_math", "aime24", "aime25",
                "amc23", "minerva", "olympiadbench"):
        assert isinstance(SOURCES[key], HubSource)
    assert SOURCES["gsm8k_train"].configs == ("main",)
    assert SOURCES["math500"].path == "HuggingFaceH4/MATH-500"


# --- hub split logic with an in-memory loader -------------------------------------------------------


def fake_loader(source: HubSource) -> list[dict]:
    from grae.data.hub import map_rows

    raw = {
        "math_train": [{"problem": f"Problem {i}.", "solution": f"so \\boxed{{{i}}}"} for i in range(30)]
        + [{"problem": "Problem  7.", "solution": "\\boxed{7}"},  # duplicate up to whitespace
           {"problem": "Shared   with the test set.", "solution": "\\boxed{0}"},
           {"problem": "no answer", "solution": "none"}],
        "math500": [{"problem": "Shared with the test set.", "answer": "0", "unique_id": "test/x/1.json"},
                    {"problem": "Only in test.", "answer": "\\frac{1}{2}", "unique_id": "test/x/2.json"}],
    }[next(k for k, v in SOURCES.items() if v == source)]
    return map_rows(source, raw)


def test_hub_task_splits_with_fake_loader():
    task = D.get_task("math", loader=fake_loader)
    heldout = task.heldout()
    assert [e["question_id"] for e in heldout] == ["math/test/x/1.json", "math/test/x/2.json"]
    train = task.train(None, seed=0)
    assert len(train) == 30  # 30 unique, duplicate and test-overlap removed, unanswerable skipped
    assert "Shared with the test set." not in {question_key(e["question"]) for e in train}
    assert task.train(30, seed=1) != train and sorted(map(str, task.train(30, seed=1))) == sorted(map(str, train))
    with pytest.raises(ValueError, match="only 30 distinct"):
        task.train(31)
    e = heldout[1]
    assert e["prompt"] == [{"role": "user", "content": "Only in test.\nPlease reason step by step, and put your "
                                                     "final answer within \\boxed{}."}]
    assert task.score("... so $\\boxed{0.5}$", e) == 1.0 and task.score("\\boxed{2}", e) == 0.0
    assert task.answer_format == "boxed"
    bench = D.get_task("math500", loader=fake_loader, prompt_style="plain")
    assert len(bench.heldout()) == 2 and isinstance(bench.heldout(1)[0]["prompt"], str)
    with pytest.raises(ValueError, match="evaluation-only"):
        bench.train(1)
    carve = HubTask("math_carve", train="math_train", heldout="carve", heldout_size=5, loader=fake_loader)
    assert len(carve.heldout()) == 5 and len(carve.train(None)) == 26  # 31 distinct answerable
    assert not {e["question"] for e in carve.heldout()} & {e["question"] for e in carve.train(None)}


# --- local files -----------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_local_jsonl_round_trip(tmp_path):
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "id": f"p{i}"} for i in range(40)]
    rows.append({"question": "Uses the other field names.", "solution": "Hence \\boxed{\\frac{3}{4}}."})
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    task = D.get_task(path, heldout_size=10)
    assert task.name == f"local:{path}"
    heldout, train = task.heldout(), task.train(None, seed=0)
    assert len(heldout) == 10 and len(train) == 31
    assert not {e["question_id"] for e in heldout} & {e["question_id"] for e in train}
    by_q = {e["question"]: e for e in heldout + train}
    assert by_q["Uses the other field names."]["answer"] == "\\frac{3}{4}"
    assert by_q["What is 3 + 3?"]["question_id"] == "train.jsonl/p3"
    assert task.score("\\boxed{6}", by_q["What is 3 + 3?"]) == 1.0
    assert task.score("\\boxed{0.75}", by_q["Uses the other field names."]) == 1.0
    # same questions, same split, whatever the file order
    shuffled = write_jsonl(tmp_path / "shuffled.jsonl", rows[::-1])
    assert {e["question"] for e in D.get_task(f"local:{shuffled}", heldout_size=10).heldout()} == \
        {e["question"] for e in heldout}
    ev = D.get_task(path, eval_only=True)
    assert len(ev.heldout()) == 41
    with pytest.raises(ValueError, match="evaluation-only"):
        ev.train(1)
    separate = D.get_task(path, heldout_path=write_jsonl(tmp_path / "test.jsonl", rows[:3]))
    assert len(separate.heldout()) == 3 and len(separate.train(None)) == 38


def test_local_json_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"question": f"q{i}", "answer": i} for i in range(12)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    (tmp_path / "d.json").write_text(json.dumps({"data": rows}))
    for name in ("d.parquet", "d.json"):
        task = D.get_task(str(tmp_path / name), heldout_size=2)
        assert len(task.heldout()) == 2 and len(task.train(None)) == 10
        assert {e["answer"] for e in task.heldout() + task.train(None)} == {str(i) for i in range(12)}


def test_bad_local_files_name_the_problem(tmp_path):
    missing_answer = write_jsonl(tmp_path / "a.jsonl", [{"problem": "p", "answer": "1"}, {"problem": "q", "sol": "2"}])
    with pytest.raises(D.DataFormatError, match=r"a\.jsonl:2: no gold answer.*'answer'.*answer_field"):
        D.get_task(missing_answer).heldout()
    missing_problem = write_jsonl(tmp_path / "b.jsonl", [{"text": "p", "answer": "1"}])
    with pytest.raises(D.DataFormatError, match=r"b\.jsonl:1: no problem text.*'problem' or 'question'.*\['answer', 'text'\]"):
        D.get_task(missing_problem).heldout()
    assert D.get_task(missing_problem, problem_field="text", eval_only=True).heldout()[0]["question"] == "p"
    broken = tmp_path / "c.jsonl"
    broken.write_text('{"problem": "p", "answer": "1"}\n{"problem": \n')
    with pytest.raises(D.DataFormatError, match=r"c\.jsonl:2: invalid JSON"):
        D.get_task(str(broken)).heldout()
    with pytest.raises(FileNotFoundError):
        D.get_task("local:/nonexistent/file.jsonl")


def test_math_prompt_helpers():
    assert D.math_prompt("2+2?", "plain") == "2+2?\n" + D.MATH_INSTRUCTION
    assert D.procedural_prompt("2+2 =", "plain") == "2+2 =\nAnswer:"
    assert D.MATH_INSTRUCTION.endswith("put your final answer within \\boxed{}.")
