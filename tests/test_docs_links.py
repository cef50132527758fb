"""Every relative link in the repository's markdown resolves.

Two kinds of reference are checked:

- markdown links and images, ``[text](target)``, in every tracked ``*.md`` file: ``target`` relative to the
  file's folder must exist, and a ``#fragment`` into a markdown file must name one of its headings (GitHub's
  anchors);
- repository paths in backticks in the pages a newcomer reads (README.md, docs/, the examples' and
  studies' READMEs): a token that starts with a top-level folder (``docs/``, ``tests/``, ...) or ``grae/``
  (read as ``src/grae/``) and ends in a file suffix or ``/`` must exist. Placeholders (``<name>``, ``*``,
  ``...``) are not paths.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked(pattern: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.fail(f"git ls-files failed: {out.stderr.strip()} (run the tests in a git checkout)")
    return [f for f in out.stdout.split() if (ROOT / f).is_file()]  # a file deleted in the work tree is gone


MARKDOWN = _tracked("*.md")
NEWCOMER = ["README.md", *sorted(f for f in MARKDOWN if f.startswith("docs/")),
            "examples/trl/README.md", "examples/verl/README.md", "studies/README.md"]
TOP = ("docs/", "src/", "tests/", "bench/", "examples/", "configs/", "studies/", ".ci/", "grae/")
#: backticked paths that name no file of this repository, on purpose
NOT_OURS = {
    ("docs/scaling.md", "tests/test_grpo_trainer.py"): "TRL's own test file (huggingface/trl)",
    ("docs/tiny.md", "bench/tiny_grpo_probe.py"): "the lab notebook's removed probe; the text says it was removed",
}
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`([^`\s]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(name: str) -> list[str]:
    path = ROOT / name
    bad = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    return bad


def broken_paths(name: str) -> list[str]:
    bad = []
    for token in CODE_SPAN.findall((ROOT / name).read_text()):
        token = token.split("::")[0].rstrip(".,;:")
        if not token.startswith(TOP) or re.search(r"[<>*{}\[\]…]|\.\.\.", token):
            continue
        if not (re.search(r"\.[A-Za-z]{1,5}$", token) or token.endswith("/")) or (name, token) in NOT_OURS:
            continue
        if not (ROOT / ("src/" + token if token.startswith("grae/") else token)).exists():
            bad.append(token)
    return sorted(set(bad))


@pytest.mark.parametrize("name", MARKDOWN)
def test_markdown_links_resolve(name):
    assert broken_links(name) == [], f"{name}: fix or remove these links"


@pytest.mark.parametrize("name", NEWCOMER)
def test_backticked_repository_paths_exist(name):
    assert broken_paths(name) == [], f"{name}: these paths name no file (moved? update the text)"


def test_the_checks_catch_what_they_are_for(tmp_path, monkeypatch):
    """The checkers find a missing file, a wrong anchor and a missing backticked path, and pass the rest."""
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Set-up: two commands\n\n## The `grae` CLI\n\n## The `grae` CLI\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#set-up-two-commands) [ok](docs/a.md#the-grae-cli-1) [web](https://x.org/y)\n"
        "[gone](docs/b.md) [anchor](docs/a.md#nowhere) ![img](docs/fig.png)\n"
        "```\n[in a fence](not/checked.md)\n```\n"
        "`docs/a.md` `docs/` `docs/b.md` `grae/x.py` `studies/reports/<name>/` `grae/config` `tests/test_x.py::t`\n")
    assert broken_links("README.md") == ["docs/b.md: no such file", "docs/a.md#nowhere: no heading #nowhere in docs/a.md",
                                         "docs/fig.png: no such file"]
    assert broken_paths("README.md") == ["docs/b.md", "grae/x.py", "tests/test_x.py"]
