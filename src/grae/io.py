"""Crash-safe files: atomic writes and JSONL reading and appending, for every grae writer and reader.

* :func:`atomic_write_text`, :func:`atomic_write_json` — the whole new file or the old one, never a
  part: written to a temporary file in the same directory, flushed, fsync'd, then ``os.replace``'d
  over the target. The file gets the permissions a plain ``open(path, "w")`` would (0666 minus the
  umask), not the temporary file's private 0600.
* :func:`atomic_path` — the same for a writer that wants a file name (``pyarrow.parquet.write_table``);
  :func:`atomic_dir` — a directory written in full under ``<name>.partial`` and renamed.
* :func:`iter_jsonl`, :func:`read_jsonl` — JSON-object lines, tolerating the unterminated last line a
  killed writer leaves; :func:`append_jsonl` — append rows, flush and fsync.

Standard library only: importing this module imports nothing else of grae.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _process_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: read once, at import (reading it means setting it, which is not thread-safe later)
_UMASK = _process_umask()


def _finish(fd: int) -> None:
    """Give an open temporary file the permissions of a plain ``open(path, "w")`` and force it to disk."""
    os.fchmod(fd, 0o666 & ~_UMASK)
    os.fsync(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; on a clean exit the file is fsync'd and replaces
    ``path``, on an exception it is removed and ``path`` is left as it was.

    >>> with atomic_path("data.parquet") as tmp:
    ...     pq.write_table(table, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            _finish(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            _finish(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """:func:`atomic_write_text` of ``obj`` as indented JSON (non-ASCII kept as is) and a final newline."""
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A fresh staging directory ``<path>.partial`` to fill; on a clean exit it replaces ``path`` (an
    existing ``path`` is removed first), on an exception it is removed and ``path`` is left as it was.
    A staging directory left by a killed process is cleared on the next use."""
    path = Path(path)
    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)


class JsonlError(ValueError):
    """A JSONL file with a line that is not a JSON object (the message names the file and line)."""


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per line, streamed in file order.

    Blank lines are skipped and an unterminated, unparsable last line (a writer killed mid-row) is
    ignored. Any other line that is not UTF-8 JSON, or not an object, raises :class:`JsonlError`
    naming its line number.
    """
    path = Path(path)
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise JsonlError(f"{path}:{number}: not UTF-8 text (byte {err.start}); sample files are UTF-8 "
                                 "JSON lines") from None
            except json.JSONDecodeError as err:
                if not line.endswith(b"\n"):  # the tail a killed writer left
                    return
                raise JsonlError(f"{path}:{number}: not a JSON line ({err.msg})") from None
            if not isinstance(row, dict):
                raise JsonlError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield row


def read_jsonl(path: str | os.PathLike, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """:func:`iter_jsonl` as a list; ``missing_ok``: a file that does not exist reads as no rows."""
    if missing_ok and not Path(path).exists():
        return []
    return list(iter_jsonl(path))


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> int:
    """Append ``rows`` as JSON lines (parent directories created), flush and fsync; returns how many."""
    text = "".join(json.dumps(row) + "\n" for row in rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return text.count("\n")
