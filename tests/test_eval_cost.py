"""``grae eval`` says what it will cost before it samples, and on a CPU above an hour asks for ``--yes``:
the arithmetic of the estimate, the warm-up's timing and its effect on the samples (none),
and the refusal / ``--yes`` / prompt paths on the shipped tiny model. No timing is asserted: the refusal
tests set the threshold to 0 s (any estimate is above it) or leave it at an hour for a run of seconds."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from grae.eval import cost as cost_mod
from grae.eval.cost import CostEstimate, TaskCost, duration, measure_decoding, refusal
from grae.eval.runner import count_calls, plan_calls


@given(st.integers(0, 60), st.integers(1, 300), st.integers(1, 300))
def test_count_calls_is_the_number_of_planned_calls(problems, n, batch):
    assert count_calls(problems, n, batch) == len(plan_calls(problems, n, batch))


def _estimate(**kw) -> CostEstimate:
    task = TaskCost("math500", problems=500, n=256, samples=128_000, max_tokens=4096, calls=16_000)
    args = dict(tasks=[task], backend="hf", device="cpu", batch_size=8, threads=2, prefill_s=0.5, step_s=0.2,
                warmup_steps=cost_mod.WARMUP_TOKENS)
    return CostEstimate(**{**args, **kw})


def test_the_estimate_is_calls_times_prefill_plus_steps():
    est = _estimate()
    assert est.samples == 128_000 and est.tokens == 128_000 * 4096
    assert est.seconds == pytest.approx(16_000 * (0.5 + 4096 * 0.2))  # no sequence ended in the warm-up: the budget
    short = _estimate(warmup_steps=5)  # the warm-up call ended after 5 tokens: calls that short
    assert short.ended_early and short.seconds == pytest.approx(16_000 * (0.5 + 5 * 0.2))
    line = est.line()
    for part in ["math500: 500 problems × n = 256", "128,000 samples to draw × up to 4,096 tokens = 524,288,000 tokens",
                 "hf on cpu, batch 8, 2 threads", "estimated up to 152 days", "200 ms per decoding step"]:
        assert part in line, (part, line)
    assert "time not measured (vllm: no warm-up)" in _estimate(step_s=None, notes=["vllm: no warm-up"]).line()
    assert [duration(s) for s in (42, 720, 3 * 3600, 30 * 86400)] == ["42 s", "12 min", "3.0 h", "30 days"]


def test_refusal_only_on_a_cpu_above_the_limit_without_yes():
    why = refusal(_estimate(), yes=False)
    assert why.startswith("estimated up to 152 days on this CPU (above 1.0 h): 128,000 samples × up to 4,096 tokens")
    for flag in ("--yes", "--num-problems (now 500)", "--n (now 256)", "--max-tokens (now 4,096)"):
        assert flag in why
    assert "\n" not in why
    assert refusal(_estimate(), yes=True) is None
    assert refusal(_estimate(device="cuda"), yes=False) is None
    assert refusal(_estimate(step_s=None), yes=False) is None  # not measured: nothing to refuse on
    assert refusal(_estimate(step_s=1e-6, prefill_s=0.0), yes=False) is None  # 16,000 calls × 4 ms: below an hour


class _FakeSampler:
    """Reports ``steps`` decoding steps to ``on_step``, each advancing a fake clock by 0.25 s after a 1 s prefill."""

    def __init__(self, steps: int):
        from grae.eval.backends import SamplingSettings

        self.steps, self.now, self.on_step, self.seen = steps, 0.0, None, None
        self.settings = SamplingSettings(0.6, 0.95, 4096)

    def generate(self, prompts, n, seed=None):
        self.seen = (list(prompts), n, seed, self.settings.max_tokens)
        self.now += 1.0
        for t in range(1, min(self.steps, self.settings.max_tokens) + 1):
            self.now += 0.25
            self.on_step(t, self.settings.max_tokens, n)
        return [["x"] * n for _ in prompts]


def test_measure_decoding_times_prefill_and_steps_and_restores_the_sampler():
    sampler = _FakeSampler(steps=100)
    hook = object()
    sampler.on_step = hook
    prefill, step, steps = measure_decoding(sampler, "p", 8, clock=lambda: sampler.now)
    assert (prefill, step, steps) == (pytest.approx(1.0), pytest.approx(0.25), cost_mod.WARMUP_TOKENS)
    assert sampler.seen == (["p"], 8, 0, cost_mod.WARMUP_TOKENS)
    assert sampler.on_step is hook and sampler.settings.max_tokens == 4096  # restored
    assert measure_decoding(_FakeSampler(steps=3), "p", 8, clock=lambda: 0.0)[2] == 3  # ended early
    assert measure_decoding(object(), "p", 8) is None  # no per-step hook (vLLM)


def test_the_warm_up_leaves_the_samples_unchanged():
    from grae.eval.backends import SamplingSettings, make_sampler

    sampler = make_sampler("tiny", SamplingSettings(1.0, 1.0, 6), backend="hf", device="cpu")
    prompt = "What is 2 + 3?"
    before = sampler.generate([prompt, "7 + 1 ="], 4, seed=11)
    measure_decoding(sampler, prompt, 16)
    assert sampler.generate([prompt, "7 + 1 ="], 4, seed=11) == before


def _app():
    import typer

    from grae.cli import eval_cmd, train_cmd

    app = typer.Typer()  # two commands: `grae train` / `grae eval` as the CLI mounts them
    for module in (train_cmd, eval_cmd):
        module.register(app)
    return app


def _eval(out, *extra, input=None):
    args = ["eval", "tiny", "--tasks", "chain_sum", "--n", "4", "--num-problems", "3", "--device", "cpu",
            "--threads", "1", "-o", str(out), *extra]
    return CliRunner().invoke(_app(), args, input=input)


def test_eval_says_its_cost_and_refuses_above_the_limit_without_yes(tmp_path, monkeypatch):
    monkeypatch.setattr(cost_mod, "CPU_CONFIRM_SECONDS", 0.0)  # every estimate is above it
    refused = _eval(tmp_path / "a")
    assert refused.exit_code == 2, refused.output
    lines = refused.output.strip().splitlines()
    assert "cost: chain_sum: 3 problems × n = 4 → 12 samples to draw" in lines[-2] and "1 thread" in lines[-2]
    assert lines[-1].startswith("error: estimated") and "add --yes to run it" in lines[-1], refused.output
    assert "--num-problems (now 3), --n (now 4) or --max-tokens" in " ".join(refused.output.split())
    assert not (tmp_path / "a" / "chain_sum.jsonl").exists()  # refused before the first sample
    ran = _eval(tmp_path / "a", "--yes")
    assert ran.exit_code == 0, ran.output
    assert "cost: chain_sum: 3 problems × n = 4" in ran.output
    assert len((tmp_path / "a" / "chain_sum.jsonl").read_text().splitlines()) == 12
    again = _eval(tmp_path / "a")  # everything on disk: nothing to draw, nothing to refuse
    assert again.exit_code == 0 and "0 samples to draw" in again.output and "nothing left to draw" in again.output


def test_at_a_terminal_eval_asks_instead(tmp_path, monkeypatch):
    from grae.cli import eval_cmd

    monkeypatch.setattr(cost_mod, "CPU_CONFIRM_SECONDS", 0.0)
    monkeypatch.setattr(eval_cmd, "interactive", lambda: True)
    declined = _eval(tmp_path / "no", input="n\n")
    assert declined.exit_code == 2 and "run it? [y/N]" in declined.output
    assert not (tmp_path / "no" / "chain_sum.jsonl").exists()
    accepted = _eval(tmp_path / "yes", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert json.loads((tmp_path / "yes" / "summary.json").read_text())["tasks"]["chain_sum"]["num_problems"] == 3


def test_a_small_eval_runs_without_yes_at_the_real_limit(tmp_path):
    result = _eval(tmp_path / "small")  # seconds of work, an hour's limit: no question
    assert result.exit_code == 0, result.output
    assert "cost: chain_sum" in result.output and "estimated" in result.output
