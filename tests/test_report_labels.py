"""``grae report``'s labels: inputs with the same name (``eval/a``, ``runs/a``) are told apart by the shortest
path suffix instead of refused; an input given twice is still refused, naming ``--label``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from grae.eval.report import default_labels, distinct_suffixes


def _rows(path: Path, correct: int) -> None:
    """4 problems x 4 samples of chain_sum, ``correct`` right answers per problem."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"question_id": str(q), "generation_id": g, "task": "chain_sum", "label": g < correct}
            for q in range(4) for g in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _report(*args) -> tuple[int, str]:
    from grae.cli import eval_cmd

    app = typer.Typer()
    eval_cmd.register(app)
    result = CliRunner().invoke(app, ["report", *map(str, args)])
    return result.exit_code, result.output


def _table(markdown: Path) -> dict[str, str]:
    """``{label: pass@1 cell}`` of report.md's table."""
    cells = [line.strip("|").split("|") for line in markdown.read_text().splitlines() if line.startswith("| ")]
    return {c[0].strip(): c[1].strip() for c in cells[1:]}


def test_two_eval_directories_with_one_name_get_their_parents_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _rows(tmp_path / "eval" / "a" / "chain_sum.jsonl", correct=1)
    _rows(tmp_path / "runs" / "a" / "chain_sum.jsonl", correct=3)
    code, output = _report("eval/a", "runs/a", "-o", "rep")
    assert code == 0, output
    assert _table(tmp_path / "rep" / "report.md") == {"eval/a": "25.0", "runs/a": "75.0"}


def test_a_train_run_and_an_eval_directory_with_one_name(tmp_path):
    run = tmp_path / "runs" / "x"
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text("estimator: grpo\n")  # a grae train run's marker
    _rows(run / "eval" / "before.jsonl", correct=1)
    _rows(run / "eval" / "after.jsonl", correct=2)
    _rows(tmp_path / "evals" / "x" / "chain_sum.jsonl", correct=4)
    code, output = _report(run, tmp_path / "evals" / "x", "-o", tmp_path / "rep")
    assert code == 0, output
    assert _table(tmp_path / "rep" / "report.md") == {"runs/x (base)": "25.0", "runs/x": "50.0", "evals/x": "100.0"}


def test_names_that_differ_stay_short_and_only_the_equal_ones_grow(tmp_path):
    for d in ("p/a", "q/a", "q/b"):
        _rows(tmp_path / d / "chain_sum.jsonl", correct=1)
    files = [tmp_path / "p/a/chain_sum.jsonl", tmp_path / "q/a/chain_sum.jsonl", tmp_path / "q/b"]
    assert default_labels(files) == ["p/a/chain_sum", "q/a/chain_sum", "b"]
    assert default_labels([tmp_path / "p/a", tmp_path / "q/b"]) == ["a", "b"]
    assert default_labels([tmp_path / "p/a/samples.jsonl", tmp_path / "q/a"]) == ["p/a", "q/a"]


def test_the_same_input_twice_is_refused_naming_label(tmp_path):
    _rows(tmp_path / "a" / "chain_sum.jsonl", correct=1)
    code, output = _report(tmp_path / "a", tmp_path / "a", "-o", tmp_path / "rep")
    assert code == 1
    assert "labels must be distinct" in output and "--label" in output
    code, output = _report(tmp_path / "a", tmp_path / "a", "-o", tmp_path / "rep", "--label", "x", "--label", "y")
    assert code == 0, output


_part = st.text(alphabet="abc", min_size=1, max_size=2)


@given(st.lists(st.lists(_part, min_size=1, max_size=4).map(lambda p: "/".join(p)), min_size=1, max_size=6,
                unique=True))
def test_distinct_suffixes_are_distinct_suffixes_of_the_shortest_depth(paths):
    names = distinct_suffixes(paths)
    assert len(set(names)) == len(names)
    assert all(p == n or p.endswith("/" + n) for p, n in zip(paths, names))
    depth = 1 + max(n.count("/") for n in names)
    if depth > 1:  # one part less would make two names equal
        shorter = ["/".join(p.split("/")[-(depth - 1):]) for p in paths]
        assert len(set(shorter)) < len(shorter)


def test_passk_compare_names_its_columns_by_the_same_suffixes(tmp_path):
    from grae.cli import eval_cmd

    _rows(tmp_path / "a" / "chain_sum.jsonl", correct=1)
    _rows(tmp_path / "b" / "chain_sum.jsonl", correct=2)
    app = typer.Typer()
    eval_cmd.register(app)
    result = CliRunner().invoke(app, ["passk", str(tmp_path / "a" / "chain_sum.jsonl"),
                                      str(tmp_path / "b" / "chain_sum.jsonl"), "--compare"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "a/chain_sum.jsonl" in result.output and "b/chain_sum.jsonl" in result.output
