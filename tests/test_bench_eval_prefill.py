"""bench/bench_eval_prefill.py runs end to end on the shipped tiny model: both ways of prefilling timed for every
problem set, and the same tokens drawn with the prefill shared as without."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from timeouts import scaled

ROOT = Path(__file__).resolve().parent.parent


def test_eval_prefill_bench_runs_on_the_tiny_model():
    done = subprocess.run([sys.executable, "bench/bench_eval_prefill.py", "--model", "tiny", "--start", "0", "2",
                           "--batch", "8", "--n", "4", "--tokens", "9", "--rounds", "1", "--threads", "1"],
                          cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.findall(r"^problems (\d+-\d+):", out, re.M) == ["0-1", "2-3"]
    for way in ("shared prefill ", "prefill per row "):
        assert len(re.findall(rf"{way}\s+call\s+\d", out)) == 2, way
        assert len(re.findall(rf"{way}\s+1-tok\s+\d", out)) == 2, way
    assert re.findall(r"sequences drawn identically: (\d+) of (\d+)", out) == [("8", "8"), ("8", "8")]
