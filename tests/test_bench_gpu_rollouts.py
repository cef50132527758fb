"""The GPU check (bench/gpu_rollouts.sh → bench/bench_gpu_rollouts.py) runs end to end on a CPU with
a tiny Qwen2: every trainer side and both eval sides measured, the table printed, the JSON written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from timeouts import scaled  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_rollouts_script_runs_on_a_cpu_with_a_tiny_model(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "bench/gpu_rollouts.sh", "--size", "tiny", "--rounds", "1", "--steps", "2",
                           "--prompts", "1", "--tokens", "4", "--eval-problems", "2", "--n", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "device: CPU" in done.stdout
    for row in ("| stock |", "| grae, TRL generate |", "| grae decoding |", "| grae eval (grae decoding) |",
                "| transformers generate |"):
        assert row in done.stdout, row
    measured = json.loads((tmp_path / "gpu_rollouts.json").read_text())
    assert {len(v) for v in measured["step_seconds"].values()} == {1}  # 2 steps, 1 warm-up dropped
    assert all(rate > 0 for rates in measured["samples_per_second"].values() for rate in rates)
