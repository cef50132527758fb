"""Math tasks from local JSONL / JSON / Parquet files.

Schema (one object per line / row): problem text in ``problem`` or ``question``; gold in ``answer``
(bare or with ``\\boxed{}``) or, failing that, the last ``\\boxed{}`` of ``solution``; optional ``id``.
Other names can be mapped with ``problem_field=`` / ``answer_field=``. A row that does not fit raises
:class:`grae.data.fields.DataFormatError` naming the file, the row and the missing field. So does a JSONL
line that is not an object, one longer than ``max_line_bytes`` (1 MiB by default; a task parameter raises
it), and the same question twice with different gold answers (refused, not merged: fix or delete one).

Use ``get_task("local:/path/train.jsonl")`` or just ``get_task("/path/train.jsonl")``.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from grae.data.fields import DataFormatError, map_generic_row
from grae.data.registry import register_name_form
from grae.data.rows import RowsTask

SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")


#: longest JSONL line read (bytes, newline included); a longer one is refused, never read whole. A problem
#: is a few KB; a line of many MB is a file that is not one problem per line (or a process-sized allocation
#: further on). Raise it with the task parameter ``max_line_bytes``.
DEFAULT_MAX_LINE_BYTES = 1 << 20

_RAISE_LIMIT = ("raise the limit with the task parameter max_line_bytes (grae train --task.params.max_line_bytes N, "
                "grae eval --task-param max_line_bytes=N)")


def read_records(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[dict]:
    """Raw records of a ``.jsonl``/``.ndjson`` (one JSON object per line, blank lines ignored, each at most
    ``max_line_bytes``), ``.json`` (a list of objects, or ``{"data": [...]}``) or ``.parquet`` file."""
    return [record for _, record in located_records(path, max_line_bytes)]


def located_records(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[tuple[str, Any]]:
    """``(where, record)`` pairs of :func:`read_records`: ``where`` is ``path:LINE`` in a JSONL file,
    ``path: row N`` otherwise. Errors are :class:`DataFormatError` lines naming the file, the line and the fix."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    lower = path.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        return list(_jsonl_records(path, max_line_bytes))
    if lower.endswith(".json"):
        with open(path, encoding="utf-8", errors="replace") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise DataFormatError(f"{path}: expected a JSON list of objects (or {{'data': [...]}})")
        return [(f"{path}: row {i + 1}", record) for i, record in enumerate(data)]
    if lower.endswith(".parquet"):
        import pyarrow.parquet as pq

        return [(f"{path}: row {i + 1}", record) for i, record in enumerate(pq.read_table(path).to_pylist())]
    raise DataFormatError(f"{path}: unsupported file type; use one of {', '.join(SUFFIXES)}")


def _jsonl_records(path: str, max_line_bytes: int):
    """``(path:LINE, object)`` for each non-blank line; a line over ``max_line_bytes`` is refused after
    reading at most that many bytes of it."""
    if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int) or max_line_bytes < 1:
        raise DataFormatError(f"max_line_bytes: expected a positive integer (bytes), got {max_line_bytes!r}")
    with open(path, "rb") as fh:
        lineno = 0
        while line := fh.readline(max_line_bytes + 1):
            lineno += 1
            if len(line) > max_line_bytes and not (len(line) == max_line_bytes + 1 and line.endswith(b"\n")):
                raise DataFormatError(f"{path}:{lineno}: line longer than {max_line_bytes:,} bytes; JSONL holds one "
                                      f"problem per line; split the file, or {_RAISE_LIMIT}")
            text = line.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataFormatError(
                    f"{path}:{lineno}: invalid JSON ({exc.msg}); JSONL needs one complete JSON object per line"
                ) from None
            if not isinstance(record, dict):
                raise DataFormatError(f"{path}:{lineno}: expected a JSON object such as {{\"question\": …, \"answer\": …}}, "
                                      f"got a JSON {_json_kind(record)}; write one problem object per line")
            yield f"{path}:{lineno}", record


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def read_rows(path: str, problem_field: str | None = None, answer_field: str | None = None, *,
              max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[dict]:
    """``{"question", "answer", "id"}`` rows of a local file (see the module docstring for the schema).
    The same question twice with different gold answers is refused (:func:`check_conflicts`). A file read
    before (unchanged: same size and modification time) is not read again: ``grae train`` reads it when
    it validates the config and again when it trains."""
    stat = os.stat(path) if os.path.isfile(path) else None
    stamp = (stat.st_size, stat.st_mtime_ns) if stat else None
    rows, skipped = _read_rows(path, stamp, problem_field, answer_field, max_line_bytes)
    if skipped:  # verl rows with an empty ground truth: said at every read, never silent
        import warnings

        warnings.warn(skipped, stacklevel=2)
    return [dict(row) for row in rows]


@functools.lru_cache(maxsize=4)
def _read_rows(path: str, _stamp: tuple[int, int] | None, problem_field: str | None, answer_field: str | None,
               max_line_bytes: int) -> tuple[tuple[dict, ...], str | None]:
    """The rows of :func:`read_rows` and its warning about skipped verl rows (None: none skipped)."""
    located = located_records(path, max_line_bytes)
    if not located:
        raise DataFormatError(f"{path}: the file has no records")
    rows = [map_generic_row(rec, problem_field, answer_field, where=where) for where, rec in located]
    skipped = [i + 1 for i, row in enumerate(rows) if row is None]
    warning = (f"{path}: skipped {len(skipped)} of {len(rows)} verl rows with an empty reward_model.ground_truth "
               f"(rows {', '.join(map(str, skipped[:5]))}{'…' if len(skipped) > 5 else ''})") if skipped else None
    kept = [(where, row) for (where, _), row in zip(located, rows) if row is not None]
    if not kept:
        raise DataFormatError(f"{path}: no row has a gold answer")
    check_conflicts(path, kept)
    return tuple(row for _, row in kept), warning


def check_conflicts(path: str, rows: list[tuple[str, dict]]) -> None:
    """Refuse the same question (whitespace aside) with two gold answers that differ (as text and as math,
    :func:`grae.rewards.verify_math`): which one is right is the file's author's call, and merging them
    would train or score against one of them silently. ``rows``: ``(where, row)`` pairs of ``path``."""
    from grae.data.base import question_key
    from grae.rewards.verify import verify_math

    first: dict[str, tuple[str, str]] = {}
    ids: dict[str, tuple[str, str]] = {}  # id -> (where, question key)
    for where, row in rows:
        key, answer = question_key(row["question"]), str(row["answer"])
        if row.get("id") is not None:
            id_where, id_key = ids.setdefault(str(row["id"]), (where, key))
            if id_key != key:
                raise DataFormatError(f"{where}: id {row['id']!r} again, given to another question at "
                                      f"{_place(path, id_where)}; an id names one problem: make the ids unique "
                                      "(or drop the id field: rows are then named by their question)")
        if key not in first:
            first[key] = (where, answer)
            continue
        seen_where, seen = first[key]
        if " ".join(seen.split()) != " ".join(answer.split()) and not verify_math(f"\\boxed{{{answer}}}", seen):
            there = _place(path, seen_where)
            raise DataFormatError(f"{where}: the question of {there} again with another gold answer ({answer!r} here, "
                                  f"{seen!r} there); keep one answer per question: fix or delete one of the two")


def _place(path: str, where: str) -> str:
    """``where`` (``path:LINE`` or ``path: row N``) without the path: ``line LINE`` or ``row N``."""
    there = where.removeprefix(path).lstrip(":").strip()
    return there if there.startswith("row") else f"line {there}"


class LocalTask(RowsTask):
    """Math task over a local file.

    Args:
        path: training (or, with ``eval_only``, evaluation) file.
        heldout_path: optional file with the held-out split; otherwise ``heldout_size`` questions are
            carved out of ``path`` (default: 10% of it, at most 500).
        eval_only: the whole file is the held-out split (``grae eval`` on a local benchmark).
        problem_field, answer_field: column names if they are not ``problem``/``question`` and
            ``answer``/``solution``.
        name: task name (default ``"local:<path>"``); question ids are ``<file name>/<id or hash>``.
        max_line_bytes: longest JSONL line read (:data:`DEFAULT_MAX_LINE_BYTES`); a longer one is refused.
        **kwargs: :class:`grae.data.rows.RowsTask` options (``prompt_style``, ``heldout_size``, ...).
    """

    def __init__(
        self,
        path: str,
        *,
        heldout_path: str | None = None,
        eval_only: bool = False,
        problem_field: str | None = None,
        answer_field: str | None = None,
        name: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        **kwargs: Any,
    ):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.heldout_path = os.path.abspath(os.path.expanduser(heldout_path)) if heldout_path else None
        self.problem_field, self.answer_field = problem_field, answer_field
        self.max_line_bytes = max_line_bytes
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"data file not found: {self.path}")
        super().__init__(
            name or f"local:{path}",
            eval_only=eval_only,
            source=self.path,
            id_prefix=os.path.basename(self.path),
            **kwargs,
        )

    def load_train_rows(self) -> list[dict]:
        return read_rows(self.path, self.problem_field, self.answer_field, max_line_bytes=self.max_line_bytes)

    def load_heldout_rows(self) -> list[dict] | None:
        if self.heldout_path is not None:
            return read_rows(self.heldout_path, self.problem_field, self.answer_field, max_line_bytes=self.max_line_bytes)
        if self.eval_only:
            return self.load_train_rows()
        return None


@register_name_form("local:")
def _local_task(path: str, **params: Any) -> LocalTask:
    """``local:<path>`` (and a bare path with a data-file suffix): :class:`LocalTask` of that file."""
    return LocalTask(path, **params)
