"""grae.rewards: verify_math (fast path, math_verify path, hard timeouts off the main thread, hostile
inputs), answer extraction, reasoning-gym binarisation, DAPO overlong shaping, format reward, TRL adapters,
safe_reward."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import math
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import grae.rewards as R
from grae.rewards import _pool
from timeouts import scaled

# Non-hostile calls get a generous timeout: the machine may be busy; a timeout would be a false 0.
T = scaled(60.0)


@pytest.fixture(scope="module", autouse=True)
def _workers():
    R.warmup(1)
    yield


# --- verify_math: truth table ------------------------------------------------------------------

TRUE_PAIRS = [
    ("So the answer is $\\boxed{\\frac12}$.", "0.5"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75"),
    ("\\boxed{-\\frac{1}{2}}", "-0.5"),
    ("\\boxed{\\text{(A)}}", "A"),
    ("\\boxed{(A)}", "\\text{(A)}"),
    ("\\boxed{[1,2)}", "[1,2)"),
    ("\\boxed{(-\\infty, 3]}", "(-\\infty,3]"),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}"),
    ("\\boxed{\\boxed{5}}", "5"),
    ("first \\boxed{3}, corrected: \\boxed{5}", "5"),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2"),
    ("\\boxed{1+x}", "The solution gives $\\boxed{x+1}$."),  # gold containing a box
    ("\\fbox{7}", "7"),
    ("$\\boxed 7$", "7"),
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
    ("The answer is $12$.", "12"),
    ("Answer: 1,000", "1000"),
    ("<answer>\\frac{2}{3}</answer>", "2/3"),
    (b"\xff\xfe \\boxed{5} \x80", "5"),  # non-UTF-8 bytes
    ([{"role": "assistant", "content": "\\boxed{5}"}], "5"),  # TRL conversational completion
]

FALSE_PAIRS = [
    ("\\boxed{(1,2]}", "[1,2)"),  # interval ends differ
    ("\\boxed{5} on second thought \\boxed{3}", "5"),  # last box wins
    ("\\boxed{3.14}", "\\pi"),
    ("\\boxed{0.33}", "\\frac13"),
    ("\\boxed{\\text{(B)}}", "A"),
    ("\\boxed{2}", "3"),
    ("\\boxed{3} and finally \\boxed{5", "3"),  # truncated last box: no credit for the earlier one
    ("\\boxed{}", "5"),
    ("5", "5"),  # no final-answer marker at all
    ("", "5"),
]


@pytest.mark.parametrize("completion,gold", TRUE_PAIRS)
def test_verify_math_true(completion, gold):
    assert R.verify_math(completion, gold, timeout=T) == 1.0


@pytest.mark.parametrize("completion,gold", FALSE_PAIRS)
def test_verify_math_false(completion, gold):
    assert R.verify_math(completion, gold, timeout=T) == 0.0


def test_fast_path_avoids_sympy_and_slow_path_is_used_otherwise():
    R.reset_stats()
    R.clear_cache()
    assert R.verify_math("\\boxed{\\frac12}", "0.5", timeout=T) == 1.0
    assert R.verify_math("\\boxed{17}", "18", timeout=T) == 0.0
    s = R.stats()
    assert (s["calls"], s["fast_path"], s["slow_path"]) == (2, 2, 0)
    assert R.verify_math("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", timeout=T) == 1.0
    assert R.verify_math("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", timeout=T) == 1.0
    s = R.stats()
    assert (s["slow_path"], s["cache_hits"]) == (1, 1)


def test_near_numbers_are_different_numbers_on_both_paths():
    # exact equality: math_verify alone rounds floats to 6 decimals and would call each of these pairs equal
    assert R.verify_math("\\boxed{0.3333333}", "\\frac{1}{3}", timeout=T) == 0.0  # fast path
    assert R.verify_math("\\boxed{1.4142136}", "\\sqrt{2}", timeout=T) == 0.0  # math-verify's path
    assert R.verify_math("\\boxed{2\\cdot 0.5}", "1", timeout=T) == 1.0  # a decimal inside an expression, exact


# --- hostile inputs ----------------------------------------------------------------------------

HOSTILE = {
    "power tower": "\\boxed{10^{10^{10}}}",
    "factorial": "\\boxed{1000000!}",
    "tower in answer line": "The answer is 9^{9^{9^{9}}}",
    "frac nested 500": "\\boxed{" + "\\frac{1}{" * 500 + "2" + "}" * 500 + "}",
    "frac nested 50": "\\boxed{" + "\\frac{1}{" * 50 + "2" + "}" * 50 + "}",
    "1 MB": "x" * (1 << 20),
    "1 MB of boxes": "\\boxed{1}" * 110_000,
    "unbalanced": "\\boxed{" * 1000 + "1",
    "unbalanced closers": "}" * 5000 + "\\boxed{1}}}}",
    "hundreds of boxes": " ".join(f"\\boxed{{{i}}}" for i in range(500)),
    "many answer tags": "<answer>" * 50_000,
    "invalid utf-8": b"\xff\xfe\xfd\\boxed{\xc3\x28}",
    "empty": "",
    "None": None,
}


def test_hostile_inputs_from_thread_pool_return_within_timeout():
    timeout, slack = 1.0, 1.5
    R.reset_stats()

    def run(completion):
        R.warmup(1)  # a ready worker, so the measurement covers only this call
        t0 = time.monotonic()
        value = R.verify_math(completion, "7", timeout=timeout)
        return value, time.monotonic() - t0, threading.current_thread() is threading.main_thread()

    with cf.ThreadPoolExecutor(max_workers=1) as ex:
        for name, completion in HOSTILE.items():
            value, elapsed, on_main = ex.submit(run, completion).result()
            assert not on_main
            assert value == 0.0, name
            assert elapsed < timeout + slack, (name, elapsed)
    s = R.stats()
    assert s["timeouts"] >= 2  # at least the power tower and the factorial
    assert s["calls"] == len(HOSTILE)


def test_cheap_rejections_are_fast():
    for completion in ("", None, "x" * (1 << 20), "\\boxed{" + "1" * 5000 + "}"):
        t0 = time.perf_counter()
        assert R.verify_math(completion, "1", timeout=T) == 0.0
        assert time.perf_counter() - t0 < 0.5


def test_timeout_counter_increments():
    R.reset_stats()
    assert R.verify_math("\\boxed{10^{10^{10}}}", "1", timeout=0.5) == 0.0
    assert R.stats()["timeouts"] == 1


FAKE_HANGING_WORKER = textwrap.dedent(
    """
    import signal, sys, time
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # like a worker stuck in C code
    sys.stdout.write('{"ready": true}\\n'); sys.stdout.flush()
    for line in sys.stdin:
        if 'crash' in line:
            sys.exit(3)
        time.sleep(600)
    """
)


def test_hard_timeout_kills_and_replaces_a_stuck_worker(tmp_path, monkeypatch):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_HANGING_WORKER)
    monkeypatch.setattr(_pool, "WORKER_SCRIPT", str(script))
    pool = _pool.MathWorkerPool(max_workers=1, memory_mb=0, startup_timeout=scaled(30))
    R.reset_stats()
    try:
        pool.warmup(1)
        with cf.ThreadPoolExecutor(1) as ex:
            t0 = time.monotonic()
            status = ex.submit(pool.verify, "1", "1", 0.5).result()
            elapsed = time.monotonic() - t0
        assert status == ("timeout", None)
        assert elapsed < 0.5 + 1.0
        assert R.stats()["worker_restarts"] == 1
        assert pool._live == 1 and len(pool._idle) == 1  # replacement already started
        assert pool.verify("crash", "1", 5.0) == ("error", None)  # worker died mid-request
        assert R.stats()["worker_restarts"] == 2
    finally:
        pool.shutdown()
    assert pool._live == 0


def test_worker_start_failure_is_reported(tmp_path, monkeypatch):
    script = tmp_path / "broken_worker.py"
    script.write_text("import sys; sys.stderr.write('no math_verify here'); sys.exit(1)\n")
    monkeypatch.setattr(_pool, "WORKER_SCRIPT", str(script))
    pool = _pool.MathWorkerPool(max_workers=1, memory_mb=0, startup_timeout=scaled(30))
    with pytest.raises(_pool.WorkerStartError, match="no math_verify here"):
        pool.verify("1", "2", 1.0)
    assert pool._live == 0


# --- extraction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
        ("\\boxed{1} \\boxed{2}", "2"),
        ("\\boxed{a \\boxed{b}}", "a \\boxed{b}"),  # last *top-level* box
        ("\\boxed{\\boxed{\\boxed{3}}}", "3"),
        ("\\boxed{\\{1\\}}", "\\{1\\}"),  # escaped braces are literal
        ("\\boxed {4}", "4"),
        ("\\fbox{5}", "5"),
        ("$\\boxed 6$.", "6"),
        ("\\boxed{", None),
        ("\\boxed{1} \\boxed{2", None),
        ("\\boxed{ }", None),
        ("\\boxedx{1}", None),
        ("no box", None),
    ],
)
def test_extract_boxed(text, expected):
    assert R.extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so\n#### 1,234", "1,234"),
        ("The final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("The answer is: **42**", "42"),
        ("Step 1 ...\nAnswer: 3\n", "3"),
        ("Answer:\n\n  17", "17"),
        ("The answer is 1.\nActually the answer is 2.", "2"),
        ("<answer>x</answer> then \\boxed{y}", "y"),  # a box takes precedence
        ("<answer> 9 </answer>", "9"),
        ("nothing here", None),
    ],
)
def test_extract_math_answer(text, expected):
    assert R.extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "text,fallback,expected",
    [
        (" 214", "first_token", "214"),
        (" -12, because", "first_token", "-12"),
        (" 3.5\nQuestion: ...", "first_token", "3.5"),
        (" yes.", "first_token", "yes"),
        ("apple banana\nmore", "first_line", "apple banana"),
        ("thinking... <answer>7</answer>", "none", "7"),
        ("x <answer>1</answer> y <answer>2</answer>", "first_token", "2"),
        ("\\boxed{8} 9", "first_token", "8"),
        (" 5", "none", None),
        ("   ", "first_token", None),
    ],
)
def test_extract_procedural_answer(text, fallback, expected):
    assert R.extract_procedural_answer(text, fallback=fallback) == expected


LATEXISH = st.sampled_from(
    ["\\boxed", "\\fbox", "{", "}", "\\{", "\\}", "\\\\", "$", "\\frac", "12", "x", " ", "\n", "####", "Answer:",
     "The answer is", "<answer>", "</answer>", ".", "**", "\\(", "\\)", "é", "\ufffd", "\x00",
     "\xa0", "\u2028", "\x1c", "\u3000"]  # whitespace to str.split() but not to the extractor's strip
)
FUZZ_TEXT = st.one_of(st.text(max_size=200), st.lists(LATEXISH, max_size=60).map("".join))


@given(FUZZ_TEXT)
@example("\x1c")  # a tiny model's sample that crashed a held-out evaluation (IndexError)
@example(" \xa0\u2028")
def test_extraction_never_raises(text):
    for fn in (R.extract_boxed, R.extract_math_answer, R.extract_final_answer_line, R.extract_answer_tag):
        out = fn(text)
        assert out is None or isinstance(out, str)
    for fallback in ("first_token", "first_line", "none"):
        out = R.extract_procedural_answer(text, fallback=fallback)
        assert out is None or (isinstance(out, str) and out)


@given(st.text(alphabet=st.characters(blacklist_characters="{}\\$", blacklist_categories=("Cs",)), max_size=50))
def test_boxed_round_trip(content):
    expected = content.strip(" \t\r\n") or None
    assert R.extract_boxed(f"reasoning \\boxed{{{content}}} done") == expected


# --- reasoning-gym binarisation ------------------------------------------------------------------


def test_procedural_scores_are_binarised():
    import reasoning_gym

    ds = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)
    entry = {**ds[0], "answer": "12"}
    assert 0.0 < ds.score_answer("125", entry) < 1.0  # reasoning-gym's partial credit (0.67)
    assert R.score_procedural("125", entry, ds) == 0.0
    assert R.score_procedural("12", entry, ds) == 1.0
    assert R.score_procedural(None, entry, ds) == 0.0
    assert R.score_procedural("1" * 10_000, entry, ds) == 0.0


def test_procedural_scorer_errors_are_counted():
    class Broken:
        def score_answer(self, answer, entry):
            raise RuntimeError("boom")

    R.reset_stats()
    assert R.score_procedural("1", {"answer": "1"}, Broken()) == 0.0
    assert R.stats()["procedural_errors"] == 1


# --- DAPO overlong shaping -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "length,expected",
    [(100, 0.0), (16384, 0.0), (16385, -1 / 4096), (18432, -0.5), (20479, -4095 / 4096), (20480, -1.0), (20481, -1.0),
     (10**6, -1.0)],
)
def test_overlong_penalty_reference_values(length, expected):
    # DAPO settings: L_max = 20480, L_cache = 4096 (arXiv:2503.14476, Sec. 3.4 / Eq. 13)
    assert R.overlong_penalty(length, 20480, 4096) == pytest.approx(expected)
    assert R.overlong_penalty(length, 20480, 4096, factor=0.5) == pytest.approx(0.5 * expected)


def test_overlong_penalty_vectorised():
    lengths = [10, 60, 75, 90, 100, 101, 500]
    expected = [R.overlong_penalty(x, 100, 40) for x in lengths]
    assert expected == pytest.approx([0.0, 0.0, -0.375, -0.75, -1.0, -1.0, -1.0])
    assert R.overlong_penalty(lengths, 100, 40) == pytest.approx(expected)
    assert R.overlong_penalty(np.array(lengths), 100, 40) == pytest.approx(expected)
    out = R.overlong_penalty(torch.tensor(lengths), 100, 40)
    assert out.dtype == torch.float32 and out.tolist() == pytest.approx(expected)
    step = R.overlong_penalty(torch.tensor([100, 101]), 100, 0, factor=2.0)
    assert step.tolist() == [0.0, -2.0]
    with pytest.raises(ValueError):
        R.overlong_penalty(5, 100, 200)


# --- format reward -------------------------------------------------------------------------------


def test_format_reward():
    assert R.format_reward("... \\boxed{3}") == 1.0
    assert R.format_reward("... \\boxed{3") == 0.0
    assert R.format_reward("... \\boxed{}") == 0.0
    assert R.format_reward("3") == 0.0
    assert R.format_reward([{"role": "assistant", "content": "\\boxed{x}"}]) == 1.0
    assert R.format_reward("<answer>4</answer>", "answer_tag") == 1.0
    assert R.format_reward("<answer></answer>", "answer_tag") == 0.0
    assert R.format_reward(" 12", "plain") == 1.0
    assert R.format_reward("   ", "plain") == 0.0
    assert R.format_reward("<think>a</think><answer>1</answer>", r"^<think>.*</think><answer>.*</answer>$") == 1.0
    assert R.format_reward("<answer>1</answer>", r"^<think>") == 0.0


# --- TRL adapters ----------------------------------------------------------------------------------


def trl_call(fn, prompts, completions, **columns):
    """The way TRL 1.16 ``GRPOTrainer._calculate_rewards`` calls a reward function."""
    logged = {}
    out = fn(
        prompts=prompts,
        completions=completions,
        completion_ids=[[1] * 3 for _ in completions],
        **columns,
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert len(out) == len(completions)
    return [float("nan") if r is None else r for r in out], logged


def test_accuracy_reward_plain_and_conversational():
    plain, _ = trl_call(R.accuracy_reward, ["q1", "q2", "q3"], ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}"],
                        answer=["2", "2", None], question_id=["a", "b", "c"])
    assert plain[:2] == [1.0, 0.0] and math.isnan(plain[2])
    conv = [[{"role": "assistant", "content": "\\boxed{2}"}], [{"role": "assistant", "content": "no"}]]
    prompts = [[{"role": "user", "content": "q"}]] * 2
    assert trl_call(R.accuracy_reward, prompts, conv, answer=["2", "2"])[0] == [1.0, 0.0]
    assert R.accuracy_reward.__name__ == "accuracy_reward"


def test_trl_names_and_sync_detection():
    from trl.trainer.utils import get_callable_name, is_async_callable

    fmt = R.make_format_reward_fn("boxed")
    over = R.make_overlong_reward_fn(100, 20)
    safe = R.safe_reward(lambda completions, **kw: [1.0] * len(completions), name="mine")

    async def areward(completions, **kw):
        return [1.0] * len(completions)

    assert get_callable_name(fmt) == "format_reward"
    assert get_callable_name(over) == "overlong_penalty"
    assert get_callable_name(safe) == "mine"
    assert get_callable_name(R.safe_reward(areward)) == "areward"
    assert not is_async_callable(fmt) and not is_async_callable(safe)
    assert is_async_callable(R.safe_reward(areward))


def test_overlong_reward_fn_uses_completion_ids():
    fn = R.make_overlong_reward_fn(max_len=100, cache_len=40)
    out = fn(prompts=["p"] * 3, completions=["a", "b", "c"], completion_ids=[[0] * 10, [0] * 80, [0] * 100])
    assert out == pytest.approx([0.0, -0.5, -1.0])


# --- safe_reward ---------------------------------------------------------------------------------


def flaky(prompts, completions, **kwargs):
    out = []
    for c in completions:
        if c == "boom":
            raise ValueError("bad sample")
        out.append(float(len(c)))
    return out


def test_safe_reward_isolates_failing_samples():
    R.reset_stats()
    fn = R.safe_reward(flaky)
    rewards, logged = trl_call(fn, ["p"] * 3, ["ab", "boom", "abc"], answer=["x", "y", "z"])
    assert rewards[0] == 2.0 and math.isnan(rewards[1]) and rewards[2] == 3.0
    assert fn.failures == 1 and R.stats()["safe_reward/flaky/failures"] == 1
    assert logged == {"flaky/failure_frac": pytest.approx(1 / 3)}
    assert R.safe_reward(flaky, fallback=0.0)(prompts=["p"] * 2, completions=["boom", "a"]) == [0.0, 1.0]


def test_safe_reward_all_failed_raises_naming_the_function():
    fn = R.safe_reward(flaky)
    with pytest.raises(R.RewardFunctionError, match="'flaky' failed on all 2 samples.*bad sample"):
        fn(prompts=["p", "p"], completions=["boom", "boom"])


def test_safe_reward_rejects_malformed_outputs():
    fn = R.safe_reward(lambda completions, **kw: ["x" if c == "bad" else 1.0 for c in completions], name="m")
    assert fn(prompts=["p"] * 2, completions=["bad", "ok"]) == [None, 1.0]


@pytest.mark.parametrize("bad", [math.inf, -math.inf, "n/a", [1.0], {"r": 1}, 1j])
def test_safe_reward_bad_values_are_faults_not_crashes(bad):
    """±inf and non-numbers become the fallback (missing), counted as failures, without a per-sample rerun."""
    calls = []

    def fn(completions, **kwargs):
        calls.append(len(completions))
        return [bad if c == "x" else 1.0 for c in completions]

    wrapped = R.safe_reward(fn, name="bad_values")
    assert wrapped(prompts=["p"] * 3, completions=["a", "x", "b"]) == [1.0, None, 1.0]
    assert wrapped.failures == 1 and wrapped.last_call[:2] == (3, 1) and calls == [3]
    assert "is a finite number" in str(wrapped.last_call[3])
    with pytest.raises(R.RewardFunctionError, match="'bad_values' failed on all 2 samples"):
        wrapped(prompts=["p"] * 2, completions=["x", "x"])
    assert R.safe_reward(fn, fallback=0.0)(prompts=["p"] * 2, completions=["x", "a"]) == [0.0, 1.0]


def test_safe_reward_nan_and_none_are_missing_not_failures():
    fn = R.safe_reward(lambda completions, **kw: [math.nan, None, 0.5][: len(completions)], name="missing")
    assert fn(prompts=["p"] * 3, completions=["a", "b", "c"]) == [None, None, 0.5]
    assert fn.failures == 0


def test_safe_reward_wrong_length_is_retried_per_sample():
    fn = R.safe_reward(lambda completions, **kw: [1.0] * (len(completions) + 1) if len(completions) > 1 else [2.0],
                       name="wrong_length")
    assert fn(prompts=["p"] * 3, completions=["a", "b", "c"]) == [2.0, 2.0, 2.0]


def test_safe_reward_timeout_per_sample():
    def slow(completions, **kwargs):
        if completions[0] == "hang":
            time.sleep(3)
        return [1.0]

    fn = R.safe_reward(slow, timeout=0.3)
    t0 = time.monotonic()
    assert fn(prompts=["p"] * 3, completions=["a", "hang", "b"]) == [1.0, None, 1.0]
    assert time.monotonic() - t0 < 2.0
    assert fn.timeouts == 1 and fn.failures == 1


def test_safe_reward_async():
    async def areward(completions, **kwargs):
        if "boom" in completions:
            raise RuntimeError("x")
        if "hang" in completions:
            await asyncio.sleep(5)
        return [1.0] * len(completions)

    fn = R.safe_reward(areward, timeout=0.3)
    assert asyncio.run(fn(prompts=["p"] * 3, completions=["a", "boom", "hang"])) == [1.0, None, None]
    with pytest.raises(R.RewardFunctionError, match="areward"):
        asyncio.run(fn(prompts=["p"], completions=["boom"]))


def test_stats_keys():
    s = R.stats()
    for key in ("calls", "timeouts", "errors"):
        assert isinstance(s[key], int)



# --- verifier at batch scale -----------------------------------------------------------------------


def test_identical_hostile_completions_cost_one_time_out():
    R.clear_cache()
    R.reset_stats()
    R.warmup(1)
    hostile = HOSTILE["power tower"]
    scores = R.verify_math_batch([hostile] * 8, ["7"] * 8, timeout=1.0)
    assert scores == [0.0] * 8
    assert R.stats()["timeouts"] == 1
    assert R.verify_math(hostile, "7", timeout=1.0) == 0.0  # cached: no second time-out
    assert R.stats()["timeouts"] == 1 and R.stats()["timeout_cache_hits"] == 1
    R.verify_math(hostile, "7", timeout=2.0)  # more time than it had: tried again
    assert R.stats()["timeouts"] == 2


def test_batch_verification_equals_one_by_one_and_keeps_order():
    completions = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{3}", None, b"\\boxed{\\sqrt{4}}", "no answer",
                   "\\boxed{2}", "\\boxed{1/2}"]
    golds = ["0.5", "\\frac12", "3", "1", "2", "1", "\\sqrt{4}", "$\\frac{1}{2}$"]
    R.clear_cache()
    batch = R.verify_math_batch(completions, golds, timeout=T)
    R.clear_cache()
    assert batch == [R.verify_math(c, g, timeout=T) for c, g in zip(completions, golds)]
    assert batch.count(1.0) >= 5
    with pytest.raises(ValueError, match="golds: 1 for 2 completions"):
        R.verify_math_batch(["a", "b"], ["1"])
