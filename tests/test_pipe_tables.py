"""Tables read through a pipe print whole: every column, every value on one line (``grae sim | tee``,
``grae estimators | grep``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from grae.advantage import describe, names
from timeouts import scaled


def _piped(*args: str, columns: str | None = None) -> str:
    """``grae ARGS | cat`` in a shell: stdout is a pipe, not a terminal; ``COLUMNS`` as given (unset: None)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "grae.cli", *args]) + " | cat"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=env,
                          timeout=scaled(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _rows(text: str) -> list[list[str]]:
    """The cells of each body row of a rich table (lines that start with a vertical bar)."""
    return [[cell.strip() for cell in line.strip().strip("│┃").split("│")] for line in text.splitlines()
            if line.lstrip().startswith("│")]


# COLUMNS 80: a terminal's width the process inherited (GNU readline exports it in a Python that imports it, as
# pytest does, and every process started from there has it); a pipe still gets every table whole
@pytest.mark.parametrize("columns", [None, "80"])
def test_grae_estimators_in_a_pipe_has_one_line_per_estimator_with_each_value_whole(columns):
    out = _piped("estimators", columns=columns)
    rows = _rows(out)
    assert "…" not in out
    by_name = {row[0]: row for row in rows if row[0]}
    assert set(by_name) == set(names()) and len(rows) == len(names())  # no row continued on a second line
    for name in names():
        d = describe(name)
        assert by_name[name][1:] == [d["signature"], ", ".join(d["requires"]) or "-", d["summary"]], name


def test_grae_sim_in_a_pipe_keeps_every_k_column_and_steps_per_second():
    long = "avspo:alpha=0.5,r_max=1.0,tau_init=0.5,eta=0.01,tau_min=0.1,tau_max=0.9,collapse_tol=0.000001"
    out = _piped("sim", "-e", "grpo", "-e", long, "--steps", "2", "--prompts", "16")
    assert "…" not in out
    header = next(line for line in out.splitlines() if "policy" in line and "@1" in line)
    columns = [cell.strip() for cell in header.strip().strip("┃").split("┃")]
    ks = [c for c in columns if c.startswith("@")]
    assert ks == [f"@{2 ** i}" for i in range(len(ks))] and ks[-1] == "@256"
    assert columns[-1] == "steps/s"
    rows = _rows(out)
    pass_at_k = [row for row in rows if len(row) == len(columns)]
    assert [row[0] for row in pass_at_k] == ["base", "grpo", long]
    for row in pass_at_k:
        assert all(0.0 <= float(cell) <= 100.0 for cell in row[1:len(ks) + 1]), row
    assert all(float(row[-1]) > 0 for row in pass_at_k[1:])
    change = [row for row in rows if len(row) == len(ks) + 1]
    assert [row[0] for row in change] == ["grpo", long]
    assert all(cell[0] in "+-" for row in change for cell in row[1:])
