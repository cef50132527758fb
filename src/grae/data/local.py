"""Math tasks from local JSONL / JSON / Parquet files.

Schema (one object per line / row): problem text in ``problem`` or ``question``; gold in ``answer``
(bare or with ``\\boxed{}``) or, failing that, the last ``\\boxed{}`` of ``solution``; optional ``id``.
Other names can be mapped with ``problem_field=`` / ``answer_field=``. A row that does not fit raises
:class:`grae.data.fields.DataFormatError` naming the file, the row and the missing field.

Use ``get_task("local:/path/train.jsonl")`` or just ``get_task("/path/train.jsonl")``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from grae.data.fields import DataFormatError, map_generic_row
from grae.data.registry import register_name_form
from grae.data.rows import RowsTask

SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")


def read_records(path: str) -> list[dict]:
    """Raw records of a ``.jsonl``/``.ndjson`` (one JSON object per line, blank lines ignored),
    ``.json`` (a list of objects, or ``{"data": [...]}``) or ``.parquet`` file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    lower = path.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        records = []
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataFormatError(
                        f"{path}:{lineno}: invalid JSON ({exc.msg}); JSONL needs one complete JSON object per line"
                    ) from None
        return records
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
        return data
    if lower.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise DataFormatError(f"{path}: unsupported file type; use one of {', '.join(SUFFIXES)}")


def read_rows(path: str, problem_field: str | None = None, answer_field: str | None = None) -> list[dict]:
    """``{"question", "answer", "id"}`` rows of a local file (see the module docstring for the schema)."""
    records = read_records(path)
    if not records:
        raise DataFormatError(f"{path}: the file has no records")
    rows = [map_generic_row(rec, problem_field, answer_field, where=f"{path}: row {i + 1}") for i, rec in enumerate(records)]
    skipped = [i + 1 for i, row in enumerate(rows) if row is None]
    if skipped:  # verl rows with an empty ground truth: said, never silent
        import warnings

        warnings.warn(f"{path}: skipped {len(skipped)} of {len(rows)} verl rows with an empty "
                      f"reward_model.ground_truth (rows {', '.join(map(str, skipped[:5]))}{'…' if len(skipped) > 5 else ''})",
                      stacklevel=2)
    kept = [row for row in rows if row is not None]
    if not kept:
        raise DataFormatError(f"{path}: no row has a gold answer")
    return kept


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
        **kwargs: Any,
    ):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.heldout_path = os.path.abspath(os.path.expanduser(heldout_path)) if heldout_path else None
        self.problem_field, self.answer_field = problem_field, answer_field
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
        return read_rows(self.path, self.problem_field, self.answer_field)

    def load_heldout_rows(self) -> list[dict] | None:
        if self.heldout_path is not None:
            return read_rows(self.heldout_path, self.problem_field, self.answer_field)
        if self.eval_only:
            return self.load_train_rows()
        return None


@register_name_form("local:")
def _local_task(path: str, **params: Any) -> LocalTask:
    """``local:<path>`` (and a bare path with a data-file suffix): :class:`LocalTask` of that file."""
    return LocalTask(path, **params)
