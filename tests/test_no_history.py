"""The product says what it does, not the story of its changes: no issue citation, commit hash or ISO date in
``src/`` or ``README.md``, nor in the docstrings and comments of ``tests/``.

Those belong in commit messages, and where a reader needs the story, one line per change in ``docs/history.md``.
``docs/results.md`` and ``docs/history.md`` are exempt (a result carries its date and machine), as is every file
that is data rather than prose: the model assets' JSON (``build_info.json`` records a build), the test fixtures
and test string literals (the inputs a test feeds its code).

What counts (:func:`findings`):

* an issue citation: ``issue N``, ``issues N``, ``(#N)``, ``#N §M``. Another project's issue named with its
  project (``trl#4525``, ``OpenRLHF#1270``) is a source, not this project's history, and a colour (``"#1f77b4"``,
  ``"#333"``) or GSM8K's ``####`` marker is no citation;
* a commit hash: a run of 7 to 40 hex digits holding both a digit and a letter, standing alone. Not a float's
  digits (``3.4028234663852886e38``), a UUID's first group, or a hash a line names as data in a string literal
  (``"sha256": "…"``, ``revision="…"``): code that reads a hash at runtime holds data, not history;
* an ISO date: ``YYYY-MM-DD``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the text files of src/ that are prose or code (the assets' JSON, tokenizers and weights are data)
SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".jinja", ".md", ".txt", ".toml", ".cfg"}

ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w#&/])#\d+\b(?!#)", re.I)
COLOUR = re.compile(r"""(["'])#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})\1""")
HEX = re.compile(r"(?<![\w.+#-])[0-9a-f]{7,40}(?![\w.-])")
FLOAT_DIGITS = re.compile(r"\d+e\d+")
HASH_AS_DATA = re.compile(r"sha\d*|hash|digest|revision", re.I)
QUOTED = re.compile(r"""(["'])([^"'\n]*)\1""")
DATE = re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")


def _is_hash(word: str) -> bool:
    return (any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
            and not FLOAT_DIGITS.fullmatch(word))


def findings(text: str) -> list[tuple[int, str, str]]:
    """``(line, kind, text)`` for each issue citation, commit hash and ISO date in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        plain = COLOUR.sub("", line)
        found += [(number, "issue citation", m.group(0)) for m in ISSUE.finditer(plain)]
        data = ({m.group(2) for m in QUOTED.finditer(line)} if HASH_AS_DATA.search(line) else set())
        found += [(number, "commit hash", m.group(0)) for m in HEX.finditer(line)
                  if _is_hash(m.group(0)) and not any(m.group(0) in literal for literal in data)]
        found += [(number, "date", m.group(0)) for m in DATE.finditer(line)]
    return found


def prose_of_python(source: str) -> str:
    """A Python module's docstrings and comments, each on its own lines (the rest blanked), so that
    :func:`findings` reads what is written for a reader and not the data a test feeds its code."""
    lines = [""] * (source.count("\n") + 1)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines[token.start[0] - 1] += " " + token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                for offset, text in enumerate(first.value.value.splitlines()):
                    lines[first.lineno - 1 + offset] += " " + text
    return "\n".join(lines)


def product_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "src").rglob("*")
                                        if p.is_file() and p.suffix in SOURCE_SUFFIXES)]


def test_the_product_tells_no_history():
    found = [f"{path.relative_to(ROOT)}:{line}: {kind} {what!r}" for path in product_files()
             for line, kind, what in findings(path.read_text())]
    assert not found, ("issue numbers, commit hashes and dates go in commit messages (the story, where a reader "
                       "needs it, in docs/history.md):\n" + "\n".join(found))


def test_the_tests_prose_tells_no_history():
    """The tests' docstrings and comments say what is checked and why, never which issue asked for it."""
    modules = sorted(p for p in (ROOT / "tests").rglob("*.py") if "fixtures" not in p.relative_to(ROOT).parts)
    found = [f"{path.relative_to(ROOT)}:{line}: {kind} {what!r}" for path in modules
             for line, kind, what in findings(prose_of_python(path.read_text()))]
    assert not found, "say what the test checks, not the issue or commit it came from:\n" + "\n".join(found)


@pytest.mark.parametrize("text, kinds", [
    ("see issue 47 for why", ["issue citation"]),
    ("(issue 52 §5)", ["issue citation"]),
    ("Issues 45 and 47", ["issue citation"]),
    ("fixed in #47; see #12 §2", ["issue citation", "issue citation"]),
    ("at f3372d3 on the machine", ["commit hash"]),
    ("commit 4baee37e0c1d2f3a4b5c6d7e8f9a0b1c2d3e4f5a", ["commit hash"]),
    ("rerun 2026-11-28", ["date"]),
    # not history
    ("trl#4525 is to override it; OpenRLHF#1270", []),
    ("colors = ['#1f77b4', \"#333\", '#ff7f0e80']", []),
    ("GSM8K's `… #### 7`", []),
    ("docs/reliability.md §13; an issue of the format", []),
    ("the float32 limit 3.4028234663852886e38", []),
    ('"sha256": "0123456789abcdef0123456789abcdef01234567"', []),
    ("revision='a1b2c3d4e5'", []),
    ("a sha256 of 64 digits: " + "ab12" * 16, []),
    ("index 9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079", []),
    ("seed 1234567 and step 10000000", []),
    ("deadbeefcafe has no digit", []),
])
def test_the_history_finder_sees_what_it_should(text, kinds):
    assert [kind for _, kind, _ in findings(text)] == kinds


def test_the_prose_reader_keeps_docstrings_and_comments_and_drops_data():
    source = ('"""Module docstring, issue 3."""\nX = "issue 4"  # comment issue 5\n\n\ndef f():\n'
              '    """Function docstring\n    on two lines, issue 6."""\n    return "2026-01-01"\n')
    prose = prose_of_python(source)
    assert findings(prose) == [(1, "issue citation", "issue 3"), (2, "issue citation", "issue 5"),
                               (7, "issue citation", "issue 6")]
