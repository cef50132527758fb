"""Training problems in a base model's competence band: the file ``grae data band`` writes, and the task that
trains on it (``task.train_subset``).

A band file is JSON lines: a header line ``{"grae_band": {...}}`` — the task and its parameters, the pool (size and
seed of the task's training stream it was drawn from), the model (path and a hash of its weight files), how pass
rates were measured (exact, or sampled with ``n``; temperature, top_p, max_tokens, seed), the band ``[lo, hi]`` and
the counts kept / below / above — then one line per kept problem:
``{"question_id", "question", "answer", "pass_rate"}`` (sampled: also ``"correct"`` of ``"n"`` and the 95 % Wilson
interval ``"interval"``). The same arguments write the same bytes (no time stamps; scores rounded to 10
significant digits before the band is applied).

:class:`BandTask` restricts a task's training stream to a band file's problems: it draws the same pool again from
the task (so each problem keeps every field the task's verifier reads) and refuses a file whose task, parameters
or problems differ from the run's, naming the field. Held-out problems, the verifier and prompts are the task's own.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from grae.data.base import Task

HEADER_KEY = "grae_band"
#: significant digits of a written pass rate (the band is applied to the rounded value: same file, same band)
SCORE_DIGITS = 10


class BandFileError(ValueError):
    """A band file that cannot be used for this run (one line naming the field and the fix)."""


def rounded(value: float) -> float:
    return float(f"{value:.{SCORE_DIGITS}g}")


def wilson_interval(correct: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion ``correct / n`` (95 % for the default ``z``)."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"need 0 <= correct <= n and n >= 1, got correct={correct}, n={n}")
    rate = correct / n
    center = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def check_band(lo: float, hi: float) -> None:
    if not (0.0 <= lo <= hi <= 1.0):
        raise BandFileError(f"--lo/--hi: need 0 <= lo <= hi <= 1, got lo={lo}, hi={hi}")


def band_counts(rates: Sequence[float], lo: float, hi: float) -> dict[str, int]:
    """How many pass rates fall below, inside (kept) and above ``[lo, hi]``."""
    below = sum(1 for r in rates if r < lo)
    above = sum(1 for r in rates if r > hi)
    return {"pool": len(rates), "kept": len(rates) - below - above, "below": below, "above": above}


def band_rows(examples: Sequence[Mapping[str, Any]], rates: Sequence[float], lo: float, hi: float,
              correct: Sequence[int] | None = None, n: int | None = None) -> list[dict[str, Any]]:
    """One row per example whose pass rate lies in ``[lo, hi]`` (pool order); sampled rates carry ``correct`` of
    ``n`` and their Wilson interval."""
    rows = []
    for i, (example, rate) in enumerate(zip(examples, rates)):
        if not lo <= rate <= hi:
            continue
        row = {"question_id": str(example["question_id"]), "question": example["question"],
               "answer": str(example["answer"]), "pass_rate": rate}
        if correct is not None and n is not None:
            row.update(correct=int(correct[i]), n=int(n), interval=[rounded(v) for v in wilson_interval(int(correct[i]), n)])
        rows.append(row)
    return rows


#: the first two bytes of a gzip file
GZIP_MAGIC = b"\x1f\x8b"


def write_band(path: str | Path, header: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write the band file atomically: the header line, then the rows."""
    from grae.io import atomic_write_text

    lines = [json.dumps({HEADER_KEY: dict(header)}, sort_keys=True, ensure_ascii=False)]
    lines += [json.dumps(dict(r), sort_keys=True, ensure_ascii=False) for r in rows]
    atomic_write_text(Path(path), "\n".join(lines) + "\n")
    return Path(path)


#: the band files grae ships (``grae/assets/bands``): ``task.train_subset`` names one by its file name without
#: ``.jsonl.gz`` (``tiny-two-modes-band-train``: the two-modes base's in-range band, the embedded default's)
SHIPPED_BANDS = Path(__file__).resolve().parent.parent / "assets" / "bands"


def shipped_bands() -> list[str]:
    """The names of the band files grae ships."""
    return sorted(p.name.removesuffix(".jsonl.gz") for p in SHIPPED_BANDS.glob("*.jsonl.gz"))


def band_file(path: str | Path) -> Path:
    """The file ``task.train_subset`` names: a path, or where none is there, a shipped band's name."""
    file = Path(path).expanduser()
    shipped = SHIPPED_BANDS / f"{path}.jsonl.gz"
    return shipped if not file.exists() and "/" not in str(path) and shipped.is_file() else file


def read_band(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, rows)`` of a band file (a path or a shipped band's name: :func:`band_file`), plain or
    gzip-compressed (read by its magic bytes, whatever its name); :class:`BandFileError` for a file that is not one."""
    file = band_file(path)
    if not file.is_file():
        raise BandFileError(f"task.train_subset: {str(path)!r} is not a file or a shipped band "
                            f"({', '.join(shipped_bands())}); write one with grae data band")
    try:
        data = file.read_bytes()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise BandFileError(f"task.train_subset: {path}: a damaged gzip file ({err}); write it again with grae data "
                            "band and gzip") from None
    except UnicodeDecodeError as err:
        raise BandFileError(f"task.train_subset: {path}: not UTF-8 text (byte {err.start}: {err.reason}); a band file is "
                            "the JSON lines grae data band writes") from None
    except OSError as err:
        raise BandFileError(f"task.train_subset: {path}: cannot read ({err.strerror or err})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        first = json.loads(lines[0]) if lines else None
        rows = [json.loads(line) for line in lines[1:]]
    except json.JSONDecodeError as err:
        raise BandFileError(f"task.train_subset: {path}: not JSON lines ({err})") from None
    if not isinstance(first, dict) or not isinstance(first.get(HEADER_KEY), dict):
        raise BandFileError(f"task.train_subset: {path} has no grae_band header line; it was not written by grae data "
                            "band (write one with it)")
    header = first[HEADER_KEY]
    for key in ("task", "params", "pool", "pool_seed"):
        if key not in header:
            raise BandFileError(f"task.train_subset: {path}: header lacks {key!r}; write the file again with grae data band")
    if not rows:
        raise BandFileError(f"task.train_subset: {path} keeps no problems (counts {header.get('counts')}); widen "
                            "--lo/--hi or score a larger --pool")
    return header, rows


def check_same_task(header: Mapping[str, Any], name: str, params: Mapping[str, Any], path: str | Path) -> None:
    """:class:`BandFileError` naming the first field where the band file's task differs from the run's."""
    if header["task"] != name:
        raise BandFileError(f"task.name: {path} was scored on task {header['task']!r}, this run trains {name!r}; train "
                            "on the band's task or score a band of this one")
    scored = dict(header["params"])
    for key in sorted(set(scored) | set(params)):
        if scored.get(key, "<unset>") != params.get(key, "<unset>"):
            raise BandFileError(f"task.params.{key}: {path} was scored with {scored.get(key, '<unset>')!r}, this run has "
                                f"{params.get(key, '<unset>')!r}; a band holds only for the task it was scored on")


#: how many generator pools :func:`_pool` keeps (a study loads one band per job, every job the same pool)
POOL_CACHE = 4
_POOLS: dict[tuple, dict[str, dict]] = {}


def _pool(task: Task, name: str, params: Mapping[str, Any], size: int, seed: int) -> dict[str, dict]:
    """``question_id`` → example of ``task.train(size, seed=seed)``. A generator task (reasoning-gym) draws the same
    pool from the same name, params, size and seed, so its pool is drawn once per process and kept (the last
    :data:`POOL_CACHE`); a file or hub task is read again every time (its rows may change)."""
    from grae.data.procedural import ReasoningGymTask

    if not isinstance(task, ReasoningGymTask):
        return {str(e["question_id"]): e for e in task.train(size, seed=seed)}
    key = (type(task).__qualname__, name, json.dumps(params, sort_keys=True, default=repr), size, seed)
    if key not in _POOLS:
        while len(_POOLS) >= POOL_CACHE:
            _POOLS.pop(next(iter(_POOLS)))
        _POOLS[key] = {str(e["question_id"]): e for e in task.train(size, seed=seed)}
    return _POOLS[key]


class BandTask(Task):
    """``task`` with its training stream restricted to the problems of the band file at ``path`` (module
    docstring); ``name``/``params``: how the run names the task (checked against the file's header)."""

    def __init__(self, task: Task, path: str | Path, name: str, params: Mapping[str, Any]):
        self.base, self.path = task, Path(path)
        self.header, rows = read_band(path)
        check_same_task(self.header, name, params, path)
        self.name, self.prompt_style, self.answer_format = task.name, task.prompt_style, task.answer_format
        self.one_gold_completion = task.one_gold_completion
        self.examples = self._from_pool(rows, name, params)

    def _from_pool(self, rows: Sequence[Mapping[str, Any]], name: str, params: Mapping[str, Any]) -> list[dict]:
        """The task's own examples of ``rows`` (copies), drawn again from the pool the file was scored on."""
        pool_size, seed = int(self.header["pool"]), int(self.header["pool_seed"])
        try:
            pool = _pool(self.base, name, params, pool_size, seed)
        except ValueError as err:
            raise BandFileError(f"task.train_subset: {self.path}: the task cannot draw its pool again ({err})") from None
        out = []
        for row in rows:
            example = pool.get(str(row["question_id"]))
            if example is None or example["question"] != row["question"] or str(example["answer"]) != str(row["answer"]):
                raise BandFileError(f"task.train_subset: problem {row['question_id']} of {self.path} is not in the task's "
                                    f"pool (size {pool_size}, seed {seed}) as scored: the task's generator or file "
                                    "changed since; score the band again")
            out.append(copy.deepcopy(example))
        return out

    def __len__(self) -> int:
        return len(self.examples)

    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        """The band's problems in a ``random.Random(seed)`` order (every problem once)."""
        order = list(range(len(self.examples)))
        random.Random(seed).shuffle(order)
        return (dict(self.examples[i]) for i in order)

    def _shortage_hint(self) -> str:
        return (f"The band file {self.path} keeps {len(self.examples)}: set task.train_size to at most that, or null "
                "for all of them (training cycles over them in epochs)")

    def heldout(self, n: int | None = None) -> list[dict]:
        return self.base.heldout(n)

    def score(self, completion: Any, example: dict) -> float:
        return self.base.score(completion, example)

    def score_batch(self, completions: list[Any], examples: list[dict]) -> list[float]:
        return self.base.score_batch(completions, examples)

    def parse_answer(self, completion: Any) -> str | None:
        return self.base.parse_answer(completion)

    def answer_set(self) -> list[str] | None:
        return self.base.answer_set()

    def answer_completion(self, answer: str) -> str:
        return self.base.answer_completion(answer)

    def gold_completions(self, example: dict) -> list[str]:
        return self.base.gold_completions(example)

    def reward_fn(self, name: str | None = None):
        return self.base.reward_fn(name)

    def __getattr__(self, attr: str) -> Any:  # anything else a task offers (entry_for, strata, …) is the base's
        if attr == "base":
            raise AttributeError(attr)
        return getattr(self.base, attr)


def with_train_subset(task: Task, subset: str | Path | None, name: str, params: Mapping[str, Any]) -> Task:
    """``task`` itself without a subset, else its :class:`BandTask` over the band file ``subset``."""
    return task if not subset else BandTask(task, subset, name, params)
