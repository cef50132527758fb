"""A dry run ends with its verdict: a run that would stop exits non-zero and says why on its first and last line;
one that would train exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from timeouts import scaled

pytest.importorskip("trl", reason="the train extra; `make test` installs it")


def _dry(tmp_path, *args: str, **env: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-m", "grae.cli", "train", *args, "--dry-run"], capture_output=True,
                          text=True, timeout=scaled(300), cwd=tmp_path, env={**os.environ, "COLUMNS": "400", **env})
    return done.returncode, [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_golds_that_cannot_score_exit_1_with_the_verdict_first_and_last(tmp_path):
    (tmp_path / "words.jsonl").write_text("".join(json.dumps({"question": f"How many apples, {i}?",
                                                              "answer": "five apples"}) + "\n" for i in range(20)))
    code, lines = _dry(tmp_path, "--task.name", "words.jsonl", "--task.params.answer_extraction", "last_number")
    assert code == 1, "\n".join(lines[-5:])
    for line in (lines[0], lines[-1]):
        assert line.startswith("error: dry run: training here would stop: golds: none of the 20 golds can score "
                               "under answer_extraction last_number"), line


def test_a_model_that_cannot_load_exits_2_as_the_run_would(tmp_path):
    code, lines = _dry(tmp_path, "--model", "no-such-org/no-such-model", HF_HUB_OFFLINE="1")
    assert code == 2, "\n".join(lines[-5:])
    assert lines[0] == lines[-1] and lines[0].startswith("error: dry run: training here would stop: before loading: "
                                                          "model: 'no-such-org/no-such-model' is not a local directory")


def test_a_run_that_would_train_exits_0_and_says_so_last(tmp_path):
    code, lines = _dry(tmp_path)
    assert code == 0 and lines[-1].startswith("dry run: the config is valid and nothing seen here stops the run")
    assert not any("would stop" in line for line in lines)
