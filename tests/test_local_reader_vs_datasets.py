"""Why grae reads JSONL itself rather than through ``datasets.load_dataset("json", data_files=...)``
(docs/tasks.md): its errors name the line and the fix; datasets' do not. If datasets' errors
ever name the line, this test fails and the docs' reason (and the reader) should be revisited."""

from __future__ import annotations

import json

import pytest

from grae.data.fields import DataFormatError
from grae.data.local import read_records

datasets = pytest.importorskip("datasets", reason="the train extra; `make test` installs it")

GOOD = json.dumps({"question": "1+1?", "answer": "2"})
HOSTILE = {
    "invalid JSON on line 3": ([GOOD, GOOD, '{"question": "2+2?", "answer": '], 3, "one complete JSON object per line"),
    "an array on line 2": ([GOOD, "[1, 2]"], 2, "write one problem object per line"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_grae_names_the_line_and_the_fix_where_datasets_does_not(case, tmp_path):
    lines, line, fix = HOSTILE[case]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as ours:
        read_records(str(path))
    assert str(ours.value).startswith(f"{path}:{line}: ") and fix in str(ours.value)

    with pytest.raises(Exception) as theirs:
        datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    chain, error = [], theirs.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    said = " | ".join(chain)
    assert f"line {line}" not in said and f"{path}:{line}" not in said, said
