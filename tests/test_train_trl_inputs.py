"""`grae train` takes what TRL users bring: a reward function by dotted path and a local
dataset with its own column names; a run with no signal says so in the log and the report (§4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grae.rewards.dotted import load_reward_function

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402


def test_dotted_paths_both_spellings_and_one_line_errors():
    assert load_reward_function("os.path:join") is os.path.join
    assert load_reward_function("os.path.join") is os.path.join
    for spec, fragment in [("nosuchmodule_xyz:f", "cannot import"), ("os.path:nope", "no attribute"),
                           ("os:sep", "not callable"), ("justaname", "expected")]:
        with pytest.raises(ValueError, match=fragment):
            load_reward_function(spec)


def test_train_with_a_dotted_reward_and_mapped_local_columns(tmp_path):
    model = build_random_tiny(str(tmp_path / "tiny"))
    (tmp_path / "myrewards.py").write_text(
        "CALLS = []\n"
        "def constant(prompts, completions, answer, **kwargs):\n"
        "    assert len(answer) == len(completions)\n"
        "    return [0.0 for _ in completions]\n")
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"q": f"{a} + {b} =", "gold": str(a + b)}) + "\n"
                            for a in range(10) for b in range(10)))
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {model}\n"
        f"task: {{name: 'local:{data}', params: {{problem_field: q, answer_field: gold, prompt_style: plain, "
        "heldout_size: 10}, train_size: 40}\n"
        "reward_funcs: ['myrewards:constant']\n"
        "max_steps: 5\nsave_steps: 5\ncontinue_without_signal: true\n"  # warned, not stopped: 5 steps run
        "trl: {per_device_train_batch_size: 8, num_generations: 4, max_completion_length: 4}\n"
        "eval: {enabled: false}\n")
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "train", str(config), "--output-dir", str(out)],
                          capture_output=True, text=True, timeout=scaled(600), env=env, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "warning: no learning signal" in log and "answer" in log
    assert "train step 5/5" in log  # plain progress lines: stdout is a pipe
    assert "no learning signal" in (out / "report.md").read_text()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and all(r["reward"] == 0.0 for r in rows)
    bad = subprocess.run([sys.executable, "-m", "grae.cli", "train", str(config), "--output-dir", str(tmp_path / "x"),
                          "--reward_funcs", "myrewards:nope"], capture_output=True, text=True, timeout=scaled(300), env=env,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "reward_funcs" in bad.stdout + bad.stderr and not (tmp_path / "x").exists()
