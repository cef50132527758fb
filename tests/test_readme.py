"""The README's code runs as printed: a README that drifts from the code fails here.

The marker convention: the line right before a fenced ``bash``/``sh``
or ``python`` block in a markdown file is an HTML comment, invisible on GitHub,

- ``<!-- runnable -->``: this test runs the block. A ``bash`` block runs under ``bash -euo pipefail`` with the
  Python environment's ``bin/`` first on PATH (``grae`` is the installed command); a ``python`` block runs as a
  script with this interpreter. Both run in an empty temporary directory, so whatever they write goes there,
  with ``OMP_NUM_THREADS=1``. Keep runnable blocks cheap: all of them together stay under a minute.
- ``<!-- runnable: no (why) -->``: not run, and the reason is said (installs, minutes of training, a GPU).

Every bash/python block of README.md carries one of the two, so a new block is a decision, not an omission.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from timeouts import scaled

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKED = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*runnable(?::\s*(.*?))?\s*-->\s*$")
LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}


@dataclass
class Block:
    file: str
    line: int
    language: str  # "bash" or "python"
    code: str
    marker: str | None  # None: no marker; "": runnable; else the reason it is not run

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def blocks(name: str, root: Path = ROOT) -> list[Block]:
    """The bash and python blocks of a markdown file, each with the marker on the line before its fence."""
    text = (root / name).read_text()
    found = []
    for m in FENCE.finditer(text):
        language = LANGUAGES.get(m.group(1).lower())
        if language is None:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        reason = None if marker is None else (marker.group(1) or "")
        found.append(Block(name, text.count("\n", 0, m.start()) + 1, language, m.group(2), reason))
    return found


RUNNABLE = [b for name in MARKED for b in blocks(name) if b.marker == ""]


def test_every_readme_block_says_whether_it_runs():
    unmarked = [b.id for b in blocks("README.md") if b.marker is None]
    assert not unmarked, (f"{unmarked}: put <!-- runnable --> (tests/test_readme.py runs it) or "
                          "<!-- runnable: no (why) --> on the line before each bash/python block")
    reasonless = [b.id for b in blocks("README.md") if b.marker and not re.fullmatch(r"no \(.+\)", b.marker)]
    assert not reasonless, f"{reasonless}: a block that is not run says why: <!-- runnable: no (why) -->"


def test_the_trl_snippet_and_the_library_example_are_run():
    """The blocks a reader copies first stay under test: the GraeTrainer swap and the estimator call."""
    run = [b.code for b in RUNNABLE if b.file == "README.md"]
    assert any("GraeTrainer(" in code and "trainer.train()" in code for code in run)
    assert any("get_estimator(" in code for code in run)
    assert any(code.lstrip().startswith("grae --help") for code in run)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_runnable_block_runs(block, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.language == "python":
        script = tmp_path / "block.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(240))
    assert proc.returncode == 0, f"{block.id} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_the_command_table_lists_every_command():
    """README's command table names every ``grae`` command, and only commands that exist."""
    import typer

    from grae.cli import COMMAND_MODULES

    app = typer.Typer()
    for module in COMMAND_MODULES:
        __import__(module, fromlist=["register"]).register(app)
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    commands |= {g.name for g in app.registered_groups}
    text = README.read_text()
    table = text[text.index("## The command line"):]
    table = table[: table.index("\n## ", 1)]
    named = set(re.findall(r"^\| `grae (\w[\w-]*)", table, re.M))
    assert commands - named == set(), f"commands missing from README's command table: {sorted(commands - named)}"
    assert named - commands == set(), f"README's command table names no such command: {sorted(named - commands)}"


def test_the_marker_reader_sees_what_it_should(tmp_path):
    """The block reader on a small file: markers, reasons, languages, and a block without a marker."""
    (tmp_path / "a.md").write_text(
        "<!-- runnable -->\n```bash\necho hi\n```\n\n<!-- runnable: no (a GPU) -->\n```python\nx = 1\n```\n"
        "\n```python\ny = 2\n```\n\n<!-- runnable -->\n```\nplain text\n```\n")
    found = [(b.line, b.language, b.code, b.marker) for b in blocks("a.md", tmp_path)]
    assert found == [(2, "bash", "echo hi\n", ""), (7, "python", "x = 1\n", "no (a GPU)"),
                     (11, "python", "y = 2\n", None)]


#: the README is a first page: a newcomer reads it in minutes; the rest lives in docs/
README_MAX_LINES = 200
PROSE_MAX_CHARS = 200


def test_the_readme_is_a_first_page():
    text = README.read_text()
    prose = FENCE.sub("", text).splitlines()  # printed output and code keep their own line lengths
    long_lines = [line[:60] for line in prose if len(line) > PROSE_MAX_CHARS]
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines; move detail to docs/"
    assert not long_lines, f"README prose lines over {PROSE_MAX_CHARS} characters: {long_lines}"
