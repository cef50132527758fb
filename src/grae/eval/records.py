"""Sample rows on disk: the JSONL format of ``grae eval`` and crash-safe reading and writing.

One row per sample::

    {"question_id": str, "generation_id": int, "task": str, "prompt": str, "response": str,
     "pred_answer": str | null, "gold_answer": str, "label": bool}

plus ``"truncated": true`` on a completion the token budget cut (labelled false unless the task's
``score_truncated``; :class:`grae.eval.backends.Completion`) and ``"image_id"`` on a visual task's row.

The seeds' files (rows with at least ``question_id`` and ``label``) read the same way.

Crash safety: rows are appended, flushed and fsync'd once per batch, so a killed writer leaves
whole rows plus at most one truncated last line. :func:`iter_rows` ignores that line and
:func:`repair_tail` cuts it off before a resumed run appends.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# atomic writes live in grae.io; re-exported here for the callers that import them from this module
from grae.io import _UMASK, JsonlError, atomic_write_json, atomic_write_text, iter_jsonl  # noqa: F401

#: Fields of a ``grae eval`` row, in the order they are written.
ROW_FIELDS = ("question_id", "generation_id", "task", "prompt", "response", "pred_answer", "gold_answer", "label")


class RecordsError(JsonlError):
    """A JSONL file that cannot be read as sample rows."""


def iter_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Complete rows of a JSONL file, streamed in file order (:func:`grae.io.iter_jsonl`).

    Blank lines are skipped and an unterminated, unparsable last line (a writer killed mid-row)
    is ignored. Any other unparsable line raises :class:`RecordsError` naming its line number.
    """
    try:
        yield from iter_jsonl(path)
    except JsonlError as err:
        raise RecordsError(str(err)) from None


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """:func:`iter_rows` as a list."""
    return list(iter_rows(path))


def repair_tail(path: str | Path) -> int:
    """Truncate ``path`` after its last newline, dropping a partly written last row.

    Returns the number of bytes removed (0 when the file ends cleanly or does not exist). A
    complete last row that only lacks its newline is kept and the newline added.
    """
    path = Path(path)
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    try:
        complete = isinstance(json.loads(tail), dict)
    except json.JSONDecodeError:
        complete = False
    with open(path, "r+b") as f:
        if complete:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            removed = 0
        else:
            f.truncate(cut)
            removed = len(tail)
        f.flush()
        os.fsync(f.fileno())
    return removed


class RowWriter:
    """Append-only JSONL writer: :meth:`write_batch` returns only once the rows are on disk.

    Holds an exclusive advisory lock (POSIX ``flock``) so two runs cannot append to the same file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")
        try:
            import fcntl

            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock
            pass
        except OSError:
            self._file.close()
            raise RecordsError(f"{self.path} is being written by another process") from None

    def write_batch(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append rows, flush and fsync. Returns how many rows were written."""
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        if text:
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())
        return text.count("\n")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def file_stem(name: str) -> str:
    """A task name as a file name stem (:func:`task_label` of it): runs of characters other than letters, digits,
    ``_.-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task_label(name)).strip("_.") or "task"


def task_label(name: str) -> str:
    """How reports and file names call a task: a local data file's ``local:<path>`` (the name ``grae train`` gives
    it) by the file's name without its suffixes, as ``grae eval --tasks <path>`` names the same file (their
    question ids are the same, ``<file name>/<id>``); every other name as it is."""
    if name.startswith("local:"):
        return Path(name.removeprefix("local:")).name.split(".")[0] or name
    return name


def as_label(value: Any) -> bool:
    """A row's ``label`` as a bool: ``true``/``false``, ``0``/``1`` (numbers or strings). Anything else
    (``0.7``, ``2``, ``"yes"``, null) is refused: pass@k counts correct samples, not scores."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise RecordsError(f"label {value!r} is not one of 0, 1, true, false")
