"""No silent zero signal and progress/batch defaults a CPU user can see."""

from __future__ import annotations

import json

from grae.engines.learning_signal import first_streak_note
from grae.eval.backends import CPU_LARGE_MODEL_BATCH, approx_params, default_batch_size
from grae.eval.progress_lines import plain_progress
from grae.train.callbacks import sparse_signal_note


def _rows(fracs, reward=0.0):
    return [{"step": i + 1, "reward": reward, "frac_reward_zero_std": f} for i, f in enumerate(fracs)]


def test_zero_signal_named_with_answer_format_cause():
    note = first_streak_note(_rows([1.0] * 5))
    assert note is not None and note.startswith("no learning signal for 3 steps in a row (steps 1-3)")
    assert "answer" in note and "verifier" in note
    assert "too easy" in first_streak_note(_rows([1.0] * 5, reward=1.0))


def test_signal_in_any_early_step_or_too_few_steps_is_not_flagged():
    assert first_streak_note(_rows([1.0, 1.0, 0.5, 1.0, 1.0])) is None
    assert first_streak_note(_rows([1.0] * 2)) is None
    assert first_streak_note(_rows([1.0] * 5), streak_steps=0) is None  # the warning was off
    assert first_streak_note([{"step": 1, "reward": 0.0}] * 5) is None  # no frac_reward_zero_std logged


def test_report_carries_the_warning(tmp_path):
    from grae.train.config import load_config
    from grae.train.report import write_train_report

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows([1.0] * 6)))
    cfg = load_config("chain-sum", {"output_dir": str(tmp_path)})
    text = write_train_report(tmp_path, cfg, {}, {}, steps=6, train_seconds=1.0).read_text()
    assert "no learning signal" in text


def test_sparse_signal_counts_steps_without_gradient_and_names_the_side():
    # the smollm2 run's pattern: signal in step 1, then most steps with every group all wrong
    fracs = [0.5] + [1.0] * 28 + [0.5] * 21
    rows = _rows(fracs, reward=0.03)
    assert first_streak_note(rows).startswith("no learning signal for 3 steps in a row (steps 2-4)")
    note = sparse_signal_note(rows)
    assert note is not None and "28 of 50 logged steps" in note and "rarely right" in note
    assert "rarely wrong" in sparse_signal_note(_rows(fracs, reward=0.97))
    assert sparse_signal_note(_rows([0.5] + [1.0] * 24 + [0.5] * 25)) is None      # exactly half: not flagged
    assert sparse_signal_note([{"step": 1, "reward": 0.0}] * 10) is None          # nothing logged to count


def test_report_carries_the_sparse_signal_note(tmp_path):
    from grae.train.config import load_config
    from grae.train.report import write_train_report

    rows = _rows([0.5] + [1.0] * 8 + [0.5], reward=0.05)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config("chain-sum", {"output_dir": str(tmp_path)})
    text = write_train_report(tmp_path, cfg, {}, {}, steps=10, train_seconds=1.0).read_text()
    assert "sparse learning signal: 8 of 10 logged steps" in text
    assert "no learning signal for 3 steps in a row (steps 2-4)" in text  # what the console said at step 4


def test_plain_progress_lines_are_throttled_and_end_with_the_total():
    now = [0.0]
    lines = []
    update = plain_progress("math500", 100, lines.append, every_s=10.0, clock=lambda: now[0])
    for done in range(8, 101, 8):
        now[0] += 2.0
        update(min(done, 100), 100)
    update(100, 100)
    assert lines[0].startswith("math500: 8/100 samples")
    assert lines[-1].startswith("math500: 100/100 samples")
    assert len(lines) <= 5


def test_plain_progress_rate_counts_only_the_samples_drawn_here():
    """A resumed run reports the rows on disk first; they are not part of its rate (a run that resumed at
    416 of 2000 printed 3.69 samples/s after one call of 16 in 113 s)."""
    now = [0.0]
    lines = []
    update = plain_progress("math500", 2000, lines.append, every_s=10.0, clock=lambda: now[0])
    update(416, 2000)
    now[0] += 113.0
    update(432, 2000)
    assert lines == ["math500: 416/2000 samples (0.00/s, 0 s)", "math500: 432/2000 samples (0.14/s, 113 s)"]


def test_plain_progress_says_where_a_long_call_is():
    """A call of a real model on a CPU can decode for minutes before its rows land: the decoding steps
    show at the same pace as the sample lines, never more often."""
    now = [0.0]
    lines = []
    update = plain_progress("math500", 2000, lines.append, every_s=10.0, clock=lambda: now[0])
    for token in range(1, 4097):
        now[0] += 0.25
        update.decoding(token, 4096, 8)
    assert len(lines) == 102  # 1,024 s of decoding, a line per 10 s
    assert lines[0] == "math500: 0/2000 samples; decoding a call of 8 sequences, 40/4096 tokens (10 s)"
    now[0] += 10.0
    update(8, 2000)
    update.decoding(1, 4096, 8)  # a new call right after a sample line: quiet until 10 s pass
    assert lines[-1].startswith("math500: 8/2000 samples (") and len(lines) == 103
    now[0] += 10.0
    update.decoding(40, 4096, 8)
    assert lines[-1].startswith("math500: 8/2000 samples; decoding a call of 8 sequences, 40/4096 tokens")


def test_cpu_eval_batch_is_small_for_a_real_model(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_batch_size("hf", "tiny") == 64
    assert default_batch_size("hf", "smollm2") == CPU_LARGE_MODEL_BATCH
    assert default_batch_size("hf", "some/hub-id") == CPU_LARGE_MODEL_BATCH
    assert default_batch_size("vllm", "smollm2") == 8192
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 576, "num_hidden_layers": 30,
                                                       "vocab_size": 49152}))
    assert 100e6 < approx_params(str(tmp_path)) < 150e6  # SmolLM2-135M's shape
    assert default_batch_size("hf", str(tmp_path)) == CPU_LARGE_MODEL_BATCH
