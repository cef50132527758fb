"""The single-file examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from timeouts import scaled

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_minimal_loop_trains(tmp_path):
    """examples/minimal_loop.py: sample → verify → estimator → grae.loss → optimizer, no TRL."""
    pytest.importorskip("transformers")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "minimal_loop.py"), "--steps", "3", "--estimator", "grpo"],
                          capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("step")]
    assert [line.split()[1] for line in steps] == ["1", "3"]
    assert all("reward" in line and "omega" in line for line in steps)
    source = (EXAMPLES / "minimal_loop.py").read_text()
    assert "import trl" not in source and "from trl" not in source
